"""One call followed for one agent until it is final: the waiter that the long-poll
(``approvals.api.longpoll``) and the call socket (``AgentCallConsumer``) share.

Whoever uses it listens first — on the call's group and on its token's and agent's — and only
then asks for the first state, so that a change made in between is pushed, not missed. Pushes
carry the call's full state and are hints: the channel layer delivers at most once, so the
waiter also reads the database now and then, and keeps reading it while the layer is down.
At the call's deadline it expires the call itself rather than wait for the sweep. Reads run
on threads of their own (``thread_sensitive=False``), each closing its connection, not on the
one thread the consumers share.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer
from django.db import connection
from django.utils import timezone

from approvals.api.auth import bearer_still_valid
from approvals.api.errors import AGENT_DISABLED, NOT_FOUND, UNAUTHENTICATED, ApiError, Code
from approvals.models import Agent, Call
from approvals.ops.metrics import decision_pushed
from approvals.realtime.pushes import CALL_CHANGED, CLOSE_TOKEN_REVOKED, SOCKETS_CLOSE
from approvals.selectors.calls import call_for_agent, call_state
from config.runtime.sweeper import expire_due_now

State = dict[str, Any]
Message = dict[str, Any]

# How often a waiter reads its call while the channel layer is down.
POLL_SECONDS = 0.5
# How often it reads a pending call anyway: the layer can drop a push and stay up.
RECHECK_SECONDS = 30.0
# How soon it tries again when its call is past its deadline and still pending (the expiry
# failed, or lost a race with a decision that is still committing).
EXPIRY_RETRY_SECONDS = 0.5

logger = logging.getLogger(__name__)


class Inbox(Protocol):
    """Where a waiter's pushes arrive: ``call.changed`` and ``sockets.close`` messages."""

    @property
    def live(self) -> bool:
        """False while the channel layer is down: the waiter then polls the database."""
        ...

    async def next(self, seconds: float) -> Message | None:
        """The next message; None after ``seconds``."""
        ...


class ChannelInbox:
    """A channel of the waiter's own in its groups, for a waiter outside a consumer.

    If the layer fails (Redis restarting, say), the waiter does not fail with it:
    ``live`` turns False and it reads the database instead.
    """

    __slots__ = ("channel", "groups", "layer", "live")

    def __init__(self, layer: BaseChannelLayer | None, groups: list[str]) -> None:
        self.layer, self.groups = layer, groups
        self.channel = ""
        self.live = False

    async def open(self) -> None:
        try:
            assert self.layer is not None
            channel = self.channel = await self.layer.new_channel()
            # At once: with Redis, each is a round trip.
            await asyncio.gather(*(self.layer.group_add(group, channel) for group in self.groups))
            self.live = True
        except Exception:
            logger.warning("channel layer unavailable; a waiter reads the database", exc_info=True)

    async def next(self, seconds: float) -> Message | None:
        if not self.live:
            await asyncio.sleep(seconds)
            return None
        assert self.layer is not None
        timeout = asyncio.timeout(seconds)
        try:
            async with timeout:
                message = await self.layer.receive(self.channel)
        except Exception:
            if timeout.expired():
                return None
            logger.warning("channel layer failed; a waiter reads the database", exc_info=True)
            self.live = False
            return None
        return dict(message)

    async def close(self) -> None:
        if self.live and self.layer is not None:
            channel = self.channel
            # A failing layer forgets the groups by itself (they expire): nothing to report.
            await asyncio.gather(
                *(self.layer.group_discard(group, channel) for group in self.groups),
                return_exceptions=True,
            )


class ConsumerInbox:
    """The messages a consumer's handlers hand over: the socket's own channel serves its
    waiter, so a socket costs no second one. Lighter than an ``asyncio.Queue``, of which a
    socket would hold one for its whole life."""

    __slots__ = ("_arrived", "_messages")

    live = True  # the consumer's channel: if the layer fails, the consumer fails with it

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._arrived: asyncio.Future[None] | None = None

    def hand(self, message: Message) -> None:
        self._messages.append(message)
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    async def next(self, seconds: float) -> Message | None:
        if not self._messages:
            self._arrived = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(seconds):
                    await self._arrived
            except TimeoutError:
                return None
            finally:
                self._arrived = None
        return self._messages.pop(0)


def _access_ended(code: int) -> ApiError:
    """The refusal a ``sockets.close`` push stands for."""
    if code == CLOSE_TOKEN_REVOKED:
        return ApiError(401, Code.UNAUTHENTICATED, UNAUTHENTICATED)
    return ApiError(403, Code.AGENT_DISABLED, AGENT_DISABLED)


def _call_state(agent: Agent, call_id: uuid.UUID) -> State | None:
    call = call_for_agent(agent=agent, call_id=call_id)
    return None if call is None else call_state(call)


def _state(agent: Agent, call_id: uuid.UUID) -> State | None:
    try:
        return _call_state(agent, call_id)
    finally:
        connection.close()


def _state_still_valid(token_id: int, agent: Agent, call_id: uuid.UUID) -> State | None:
    try:
        bearer_still_valid(token_id=token_id)
        return _call_state(agent, call_id)
    finally:
        connection.close()


# Each read closes its connection itself: on a thread of the pool, the connection it opened
# is not seen by a close made around the call (a pooled PostgreSQL connection would be kept).
_read = sync_to_async(_state, thread_sensitive=False)
_read_still_valid = sync_to_async(_state_still_valid, thread_sensitive=False)


def _seconds_to_deadline(state: State) -> float | None:
    expires = state.get("expires_at")
    if expires is None:
        return None
    return (datetime.fromisoformat(expires) - timezone.now()).total_seconds()


class CallWaiter:
    """One agent's call, followed through ``inbox`` (already listening on the call's, the
    token's and the agent's groups) until it is final. ``via`` names the waiter in
    ``countersign_decision_push_seconds``."""

    __slots__ = ("agent", "call_id", "inbox", "token_id", "via")

    def __init__(
        self, *, agent: Agent, call_id: uuid.UUID, token_id: int, inbox: Inbox, via: str
    ) -> None:
        self.agent, self.call_id, self.token_id = agent, call_id, token_id
        self.inbox, self.via = inbox, via

    async def states(self) -> AsyncGenerator[State, None]:
        """The call's state now, then each new one; a final one is the last.

        The token is read again first: a revocation committed before the waiter listened
        was pushed to nobody. Raises ``ApiError``: ``404`` when the call is not the agent's
        (or is gone), ``401``/``403`` when the token is revoked or the agent disabled.
        """
        state = await _read_still_valid(self.token_id, self.agent, self.call_id)
        last = None
        while state is not None:
            if state != last:
                yield state
                last = state
            if state["status"] in Call.Status.FINAL:
                return
            state = await self._after_wait(state)
        raise ApiError(404, Code.NOT_FOUND, NOT_FOUND)

    async def read(self) -> State | None:
        """The call's state as stored now; None if it is gone."""
        return await _read(self.agent, self.call_id)

    async def _after_wait(self, last: State) -> State | None:
        """The state after the next push, or a read once no push came in time: by the
        deadline (when the call is expired first), the recheck, or the poll."""
        to_deadline = _seconds_to_deadline(last)
        if to_deadline is not None and to_deadline <= 0:
            try:
                await expire_due_now()
            except Exception:
                logger.exception("expiring call %s at its deadline failed", self.call_id)
            state = await self.read()
            if state != last:
                return state
            wait = EXPIRY_RETRY_SECONDS
        else:
            wait = RECHECK_SECONDS if self.inbox.live else POLL_SECONDS
            if to_deadline is not None:
                wait = min(wait, to_deadline)
        message = await self.inbox.next(wait)
        if message is None:
            due = _seconds_to_deadline(last)
            if due is not None and due <= 0:
                return last  # expired first, on the next turn
            return await self.read()
        if message["type"] == SOCKETS_CLOSE:
            raise _access_ended(int(message["code"]))
        if message["type"] != CALL_CHANGED or message["call"].get("id") != str(self.call_id):
            return last
        pushed: State = message["call"]
        decision_pushed(pushed, via=self.via)
        return pushed
