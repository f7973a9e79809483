"""``GET /api/v1/calls/{id}/wait`` as a raw ASGI app, outside Django's handler.

Django's handler holds a thread per request for as long as the response takes, so a parked
long-poll there costs a thread. Here it costs a coroutine and a channel of its own on the
layer, in the call's group and its token's and agent's, joined before the first read; it
follows the call with the waiter the call socket uses too (``approvals.realtime.call_waiter``).
Revoking the token or disabling the agent answers it ``401``/``403`` at once
(``pushes.agent_sockets_close``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections

from approvals.api.auth import Bearer, authorization_values, bearer
from approvals.api.errors import (
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    QUERY_RANGE,
    SERVER_STOPPING,
    UNAVAILABLE_RETRY_AFTER,
    ApiError,
    Code,
    query_refusal,
    query_repeated,
    send_error,
    send_json,
)
from approvals.ops.metrics import LONG_POLLS, PushedVia
from approvals.querydict import ParameterRepeated, query_value, scope_query
from approvals.realtime.call_waiter import CallWaiter, ChannelInbox, State
from approvals.realtime.presence import call_key, waiter_enter, waiter_leave
from approvals.realtime.pushes import agent_sockets_group, call_group, token_group
from config.runtime.asgi_types import Receive, Scope, Send

WAIT_PATH = re.compile(r"^/api/v1/calls/(?P<call_id>[^/]+)/wait$")
DEFAULT_WAIT = 25  # seconds, when the long-poll names no timeout


def default_wait() -> int:
    return min(DEFAULT_WAIT, settings.COUNTERSIGN_MAX_WAIT)


def _read_bearer(scope: Scope) -> Bearer:
    try:
        return bearer(authorization=authorization_values(scope.get("headers", [])))
    finally:
        close_old_connections()


def _timeout(scope: Scope) -> int:
    try:
        raw = query_value(scope_query(scope.get("query_string", b"")), "timeout")
    except ParameterRepeated:
        raise query_repeated(name="timeout") from None
    if raw is None:
        return default_wait()
    most = settings.COUNTERSIGN_MAX_WAIT
    if not re.fullmatch(r"[0-9]{1,6}", raw, re.ASCII) or int(raw) > most:
        raise query_refusal(name="timeout", expected=QUERY_RANGE.format(low=0, high=most))
    return int(raw)


async def _wait(found: Bearer, call_id: uuid.UUID, timeout: int, receive: Receive) -> State:
    """The call's state once it is final, or as it is after ``timeout`` seconds. Cancelled
    if the client goes away first: outside Django's handler nobody else notices. Cancelled
    by the server instead (it is stopping, past its graceful shutdown), raises ``503``: the
    agent waits again, here once the server is back or on another worker."""
    waiting = asyncio.current_task()
    assert waiting is not None
    gone = asyncio.ensure_future(_until_disconnect(receive))

    def cancel_waiting(_: object) -> None:
        waiting.cancel()

    gone.add_done_callback(cancel_waiting)
    groups = [call_group(call_id), token_group(found.token_id), agent_sockets_group(found.agent.pk)]
    inbox = ChannelInbox(get_channel_layer(), groups)
    waits_for: str | None = None
    LONG_POLLS.inc()
    try:
        await inbox.open()  # before the first read: a decision made in between is pushed
        waiter = CallWaiter(
            agent=found.agent,
            call_id=call_id,
            token_id=found.token_id,
            inbox=inbox,
            via=PushedVia.LONG_POLL,
        )
        async with contextlib.aclosing(waiter.states()) as states:
            state = await anext(states)
            waits_for = call_key(call_id)
            waiter_enter(waits_for)  # approvals.realtime.presence: counted in memory
            try:
                async with asyncio.timeout(timeout):
                    async for later in states:
                        state = later  # the last one is final
            except TimeoutError:
                state = await waiter.read() or state
        return state
    except asyncio.CancelledError:
        if gone.done():
            raise  # the client went away: nobody to answer
        raise ApiError(
            503, Code.UNAVAILABLE, SERVER_STOPPING, retry_after=UNAVAILABLE_RETRY_AFTER
        ) from None
    finally:
        gone.remove_done_callback(cancel_waiting)
        gone.cancel()
        LONG_POLLS.dec()
        if waits_for is not None:
            waiter_leave(waits_for)
        await inbox.close()


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
