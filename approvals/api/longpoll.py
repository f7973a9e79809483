"""``GET /api/v1/calls/{id}/wait`` as a raw ASGI app, outside Django's handler.

Django's handler holds a thread per request for as long as the response takes, so a parked
long-poll there costs a thread. Here a waiter costs a coroutine: each database read runs in a
short ``sync_to_async(thread_sensitive=False)`` call that closes its connection, and the wait
itself is on the channel layer. The waiter joins the call's group *before* it reads the
state, so a decision made between the read and the wait is not missed; it joins its token's
and its agent's groups too, so that revoking the token or disabling the agent answers it
``401``/``403`` at once (``notify.agent_sockets_close``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from approvals.api.auth import Bearer, authorization_values, bearer, bearer_still_valid
from approvals.api.errors import (
    AGENT_DISABLED,
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    QUERY_RANGE,
    UNAUTHENTICATED,
    ApiError,
    Code,
    query_refusal,
    query_repeated,
    send_error,
    send_json,
)
from approvals.models import Agent, Call
from approvals.ops.metrics import LONG_POLLS, PushedVia, decision_pushed
from approvals.realtime.presence import call_key, waiter_enter, waiter_leave
from approvals.realtime.pushes import (
    CLOSE_TOKEN_REVOKED,
    SOCKETS_CLOSE,
    agent_sockets_group,
    call_group,
    token_group,
)
from approvals.selectors.calls import call_for_agent, call_state
from config.runtime.asgi_types import Receive, Scope, Send
from config.runtime.sweeper import expire_due_now

WAIT_PATH = re.compile(r"^/api/v1/calls/(?P<call_id>[^/]+)/wait$")
POLL_SECONDS = 0.5
DEFAULT_WAIT = 25  # seconds, when the long-poll names no timeout

logger = logging.getLogger(__name__)


def default_wait() -> int:
    return min(DEFAULT_WAIT, settings.COUNTERSIGN_MAX_WAIT)


def _read_bearer(scope: Scope) -> Bearer:
    try:
        return bearer(authorization=authorization_values(scope.get("headers", [])))
    finally:
        close_old_connections()


def _read_state(agent: Agent, call_id: uuid.UUID) -> dict[str, Any] | None:
    try:
        call = call_for_agent(agent=agent, call_id=call_id)
        return None if call is None else call_state(call)
    finally:
        close_old_connections()


def _read_state_still_valid(found: Bearer, call_id: uuid.UUID) -> dict[str, Any] | None:
    """The first read, once the waiter listens on its token's groups: the token is read again
    first, as a revocation committed before the listening was pushed to nobody."""
    try:
        bearer_still_valid(token_id=found.token_id)
    finally:
        close_old_connections()
    return _read_state(found.agent, call_id)


def _access_ended(code: int) -> ApiError:
    """The refusal a ``sockets.close`` push stands for."""
    if code == CLOSE_TOKEN_REVOKED:
        return ApiError(401, Code.UNAUTHENTICATED, UNAUTHENTICATED)
    return ApiError(403, Code.AGENT_DISABLED, AGENT_DISABLED)


def _timeout(scope: Scope) -> int:
    query = scope.get("query_string", b"").decode("latin-1")
    values = parse_qs(query, keep_blank_values=True).get("timeout")
    if values is None:
        return default_wait()
    if len(values) > 1:
        raise query_repeated(name="timeout")
    raw, most = values[0], settings.COUNTERSIGN_MAX_WAIT
    if not re.fullmatch(r"[0-9]{1,6}", raw, re.ASCII) or int(raw) > most:
        raise query_refusal(name="timeout", expected=QUERY_RANGE.format(low=0, high=most))
    return int(raw)


def _seconds_to_expiry(state: dict[str, Any]) -> float | None:
    expires = state.get("expires_at")
    if expires is None:
        return None
    deadline = datetime.fromisoformat(expires.replace("Z", "+00:00"))
    return (deadline - timezone.now()).total_seconds()


class _Pushes:
    """The call's pushes from the channel layer, with the database as the fallback, and the
    token's and agent's ``sockets.close`` pushes.

    Pushes are hints: if the layer fails (Redis restarting, say), the waiter does not fail
    with it but reads the database every ``POLL_SECONDS`` until it can answer.
    """

    def __init__(self, groups: list[str]) -> None:
        self.groups = groups
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.live = False

    async def open(self) -> None:
        try:
            assert self.layer is not None
            channel = self.channel = await self.layer.new_channel()
            # At once: with Redis, each is a round trip.
            await asyncio.gather(*(self.layer.group_add(group, channel) for group in self.groups))
            self.live = True
        except Exception:
            logger.warning(
                "channel layer unavailable; a long-poll reads the database instead", exc_info=True
            )

    async def next(
        self, disconnected: asyncio.Future[None], seconds: float
    ) -> dict[str, Any] | None:
        """The next pushed call state; None after ``seconds``, or at once when not live.
        Raises ``ApiError`` when the token was revoked or the agent disabled."""
        if not self.live:
            done, _ = await asyncio.wait({disconnected}, timeout=min(seconds, POLL_SECONDS))
            if done:
                raise asyncio.CancelledError
            return None
        assert self.layer is not None
        assert self.channel is not None
        message: asyncio.Future[Any] = asyncio.ensure_future(self.layer.receive(self.channel))
        waiting: set[asyncio.Future[Any]] = {message, disconnected}
        done, _ = await asyncio.wait(waiting, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        if message not in done:
            message.cancel()
        if disconnected in done:
            raise asyncio.CancelledError
        if message not in done:
            return None
        try:
            pushed = dict(message.result())
            if pushed["type"] != SOCKETS_CLOSE:
                return dict(pushed["call"])
        except Exception:
            logger.warning("channel layer failed; a long-poll reads the database instead")
            self.live = False
            return None
        raise _access_ended(int(pushed["code"]))

    async def close(self) -> None:
        if self.live and self.layer is not None and self.channel is not None:
            channel = self.channel
            # A failing layer forgets the groups by itself (they expire): nothing to report.
            await asyncio.gather(
                *(self.layer.group_discard(group, channel) for group in self.groups),
                return_exceptions=True,
            )


async def _wait(
    found: Bearer, call_id: uuid.UUID, timeout: int, receive: Receive
) -> dict[str, Any]:
    """The call's state once it is final, or when ``timeout`` seconds have passed."""
    agent = found.agent
    read = sync_to_async(_read_state, thread_sensitive=False)
    pushes = _Pushes(
        [call_group(call_id), token_group(found.token_id), agent_sockets_group(agent.pk)]
    )
    await pushes.open()  # before the read: a decision made in between is pushed, not missed
    disconnected = asyncio.ensure_future(_until_disconnect(receive))
    waits_for: str | None = None
    LONG_POLLS.inc()
    try:
        state = await sync_to_async(_read_state_still_valid, thread_sensitive=False)(found, call_id)
        if state is None:
            raise ApiError(404, Code.NOT_FOUND, NOT_FOUND)
        waits_for = call_key(call_id)
        waiter_enter(waits_for)  # approvals.realtime.presence: counted in memory, no round trip
        clock = asyncio.get_running_loop().time
        give_up = clock() + timeout
        while state["status"] not in Call.Status.FINAL:
            remaining = give_up - clock()
            to_expiry = _seconds_to_expiry(state)
            if to_expiry is not None and to_expiry <= 0:
                # The deadline has come: expire the call here rather than wait for the sweep.
                await expire_due_now()
                state = await read(agent, call_id) or state
                to_expiry = 0.1  # if it was extended meanwhile, look again shortly
            if remaining <= 0:
                return await read(agent, call_id) or state
            wait_for = remaining if to_expiry is None else min(remaining, to_expiry)
            pushed = await pushes.next(disconnected, wait_for)
            if pushed is not None:
                state = pushed
                decision_pushed(pushed, via=PushedVia.LONG_POLL)
            elif not pushes.live:
                state = await read(agent, call_id) or state
        return state
    finally:
        LONG_POLLS.dec()
        if waits_for is not None:
            waiter_leave(waits_for)
        disconnected.cancel()
        await pushes.close()


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def wait_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The long-poll endpoint (docs/api.md: ``GET /api/v1/calls/{id}/wait``)."""
    try:
        if scope["method"] != "GET":
            raise ApiError(405, Code.METHOD_NOT_ALLOWED, METHOD_NOT_ALLOWED)
        match = WAIT_PATH.match(scope["path"])
        assert match is not None
        found = await sync_to_async(_read_bearer, thread_sensitive=False)(scope)
        timeout = _timeout(scope)
        try:
            call_id = uuid.UUID(match["call_id"])
        except ValueError:
            raise ApiError(404, Code.NOT_FOUND, NOT_FOUND) from None
        state = await _wait(found, call_id, timeout, receive)
    except ApiError as error:
        await send_error(send, error)
        return
    except asyncio.CancelledError:
        return  # the client went away: nobody to answer
    await send_json(send, 200, json.dumps(state).encode())
