"""WebSockets. Agents: one call's state until it is final, or every change to an agent's
calls. People: the queue and the call page, re-rendered from the database.

Agents authenticate with the handshake's ``Authorization: Bearer`` header only, read as the
HTTP API reads it (``agent_auth``) — never a session cookie — and face no Origin check
(non-browser clients send none). A refusal is a close code sent *after* ``accept()``,
because daphne turns a close before it into a bare HTTP 403. The database is the truth and
pushes are hints: each socket joins its group first and then reads and sends the current
state, so no change is lost between the two.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth.models import User
from django.template.loader import render_to_string
from django.utils import timezone

from approvals.agent_auth import authorization_values, bearer_agent
from approvals.errors import ApiError
from approvals.models import Agent, Call
from approvals.notify import QUEUE_GROUP, agent_group, call_group
from approvals.selectors.call_page import call_page
from approvals.selectors.calls import call_for_agent, call_state
from approvals.selectors.deciders import may_view
from approvals.selectors.queue import queue_for_user
from config.runtime.sweeper import ensure_sweeper_started, expire_due_now

logger = logging.getLogger(__name__)

CLOSE_NORMAL = 1000
CLOSE_BAD_REQUEST = 4400
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404

# How soon a waiter tries again when its call is past its deadline but still pending (the
# expiry failed, or lost a race with a decision that is still committing).
EXPIRY_RETRY_SECONDS = 0.5
# How often a socket with a pending call reads it again: the channel layer can drop a push
# while the socket stays open, and then nothing else would tell the agent before the deadline.
RECHECK_SECONDS = 30.0

State = dict[str, Any]


def parse_since(query_string: bytes) -> datetime | None:
    """The ``since`` query parameter as an aware time; None when absent.

    Raises ``ValueError`` when it is repeated or not an ISO 8601 time. A time without an
    offset is UTC.
    """
    values = parse_qs(query_string.decode("latin-1"), keep_blank_values=True).get("since")
    if values is None:
        return None
    if len(values) != 1:
        raise ValueError("since is given more than once")
    # An offset's "+" arrives as a space when the client did not percent-encode it; a space
    # is never part of a valid time, so reading it back as "+" only accepts more.
    text = values[0].strip().replace(" ", "+")
    try:
        moment = datetime.fromisoformat(text)
        if timezone.is_naive(moment):
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
    except OverflowError as error:
        raise ValueError("since is out of range") from error


@database_sync_to_async
def _agent_of(headers: Iterable[tuple[bytes, bytes]]) -> Agent:
    return bearer_agent(authorization=authorization_values(headers))


@database_sync_to_async
def _owns_call(agent: Agent, call_id: uuid.UUID) -> bool:
    return Call.objects.filter(pk=call_id, agent=agent).exists()


@database_sync_to_async
def _call_state(agent: Agent, call_id: uuid.UUID) -> State | None:
    call = call_for_agent(agent=agent, call_id=call_id)
    return None if call is None else call_state(call)


@database_sync_to_async
def _agent_states(agent: Agent, since: datetime | None) -> list[State]:
    """The agent's calls changed since ``since`` (default: its pending ones), oldest first."""
    calls = Call.objects.filter(agent=agent).select_related("decided_by")
    if since is None:
        calls = calls.filter(status=Call.Status.PENDING).order_by("created_at", "pk")
    else:
        calls = calls.filter(updated_at__gte=since).order_by("updated_at", "created_at", "pk")
    return [call_state(call) for call in calls.prefetch_related("approvals__user")]


class _AgentConsumer(AsyncJsonWebsocketConsumer):
    """Bearer authentication, group membership, and deaf ears for anything the agent sends."""

    async def _authenticate(self) -> Agent | None:
        """The socket's active agent; otherwise the (accepted) socket is closed with
        ``4401`` (no valid token) or ``4403`` (disabled agent) and this is None."""
        try:
            return await _agent_of(self.scope["headers"])
        except ApiError as error:
            await self.close(code=error.close_code)
            return None

    async def _join(self, group: str) -> None:
        # Listed in self.groups, the group is left by websocket_disconnect.
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups.append(group)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Agents have nothing to say on these sockets: whatever they send is ignored."""

    async def _send_state(self, state: State) -> None:
        await self.send_json({"type": "call", "call": state})


class AgentCallConsumer(_AgentConsumer):
    """``/ws/v1/calls/<id>``: the call's state now, every change, and a ``1000`` close once it
    is final. While the call is pending the socket also sleeps until its deadline and then
    expires it itself, so the agent learns ``expired`` on time even if the sweep lags, and
    reads the call now and then in case a push was lost."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent: Agent | None = None
        self.call_id: uuid.UUID | None = None
        self._finished = False
        self._last_sent: State | None = None
        self._deadline: str | None = None  # the expires_at the timer is armed for
        self._timer: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        ensure_sweeper_started()
        await self.accept()
        agent = await self._authenticate()
        if agent is None:
            return
        call_id: uuid.UUID = self.scope["url_route"]["kwargs"]["call_id"]
        if not await _owns_call(agent, call_id):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.agent, self.call_id = agent, call_id
        await self._join(call_group(call_id))
        await self._refresh()

    async def disconnect(self, code: int) -> None:
        self._finished = True
        self._stop_timer()

    async def call_changed(self, event: dict[str, Any]) -> None:
        """A push from ``approvals.notify``: it carries the full state, no need to re-read."""
        state: State = event["call"]
        if state.get("id") == str(self.call_id):
            await self._deliver(state)

    async def _refresh(self) -> None:
        """Send the state as the database has it."""
        await self._deliver(await self._read())

    async def _read(self) -> State | None:
        assert self.agent is not None
        assert self.call_id is not None
        return await _call_state(self.agent, self.call_id)

    async def _deliver(self, state: State | None) -> None:
        """Send a state unless it is a repeat; close after a final one; else (re)arm the
        deadline timer, since the deadline can have been extended. None: the call is gone."""
        if self._finished or state == self._last_sent:
            return
        if state is None:  # deleted while watched
            self._finished = True
            self._stop_timer()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self._last_sent = state
        if state["status"] in Call.Status.FINAL:
            self._finished = True
            self._stop_timer()
            await self._send_state(state)
            await self.close(code=CLOSE_NORMAL)
            return
        # Armed before the send's await, so that the latest state sent always sets the timer.
        self._arm(state.get("expires_at"))
        await self._send_state(state)

    def _arm(self, expires_at: str | None) -> None:
        if expires_at == self._deadline and self._timer is not None:
            return
        self._stop_timer()
        self._deadline = expires_at
        if expires_at is not None:
            deadline = datetime.fromisoformat(expires_at)
            self._timer = asyncio.get_running_loop().create_task(self._watch(deadline))

    def _stop_timer(self) -> None:
        timer, self._timer = self._timer, None
        # The timer itself re-arms through _deliver: it must not cancel its own last steps.
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    async def _watch(self, deadline: datetime) -> None:
        """Read the call again every ``RECHECK_SECONDS`` and at its deadline, expiring it
        then; send what changed. Ends once the call is final or its deadline moved (the new
        deadline has its own watch)."""
        while True:
            remaining = (deadline - timezone.now()).total_seconds()
            if remaining > 0:
                await asyncio.sleep(min(remaining, RECHECK_SECONDS))
            due = timezone.now() >= deadline
            if due:
                try:
                    await expire_due_now()
                except Exception:
                    logger.exception("expiring call %s at its deadline failed", self.call_id)
            await self._deliver(await self._read())
            if self._finished or self._timer is not asyncio.current_task():
                return
            if due:
                # Still pending past its deadline: the expiry failed, or lost a race with a
                # decision that is still committing.
                await asyncio.sleep(EXPIRY_RETRY_SECONDS)


class AgentStreamConsumer(_AgentConsumer):
    """``/ws/v1/agent[?since=<ISO 8601>]``: the state of every call of the agent changed since
    ``since`` (default: its pending calls), oldest first, then every change as it happens."""

    async def connect(self) -> None:
        ensure_sweeper_started()
        await self.accept()
        agent = await self._authenticate()
        if agent is None:
            return
        try:
            since = parse_since(self.scope["query_string"])
        except ValueError:
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        await self._join(agent_group(agent.pk))
        for state in await _agent_states(agent, since):
            await self._send_state(state)

    async def call_changed(self, event: dict[str, Any]) -> None:
        await self._send_state(event["call"])


# --- The approver's pages ---------------------------------------------------------------------


def _person(user_id: int, session_key: str | None) -> User | None:
    """The user re-read from the database, if their session still exists and they may still
    see the pages (``scope["user"]`` is fixed at connect; a logout or a lost permission must
    end the socket's pushes)."""
    if session_key is None or not import_module(settings.SESSION_ENGINE).SessionStore().exists(
        session_key
    ):
        return None
    user = User.objects.filter(pk=user_id).first()
    return user if user is not None and may_view(user) else None


@database_sync_to_async
def _queue_html(user_id: int, session_key: str | None) -> str | None:
    user = _person(user_id, session_key)
    if user is None:
        return None
    queue = queue_for_user(user=user)
    return render_to_string("approvals/queue.html#queue", {"queue": queue, "oob": True})


@database_sync_to_async
def _call_html(user_id: int, session_key: str | None, call_id: uuid.UUID) -> str | None:
    """The call page's live parts for this person; its decision part only once it holds no
    form, so that nobody loses a comment they are typing. ``""``: the call is gone."""
    user = _person(user_id, session_key)
    if user is None:
        return None
    page = call_page(call_id=call_id, user=user)
    if page is None:
        return ""
    context = {"page": page, "oob": True}
    parts = ["live", "audit"] if page.show_form else ["live", "audit", "decide"]
    return "".join(render_to_string(f"approvals/call.html#{part}", context) for part in parts)


class _PageConsumer(AsyncWebsocketConsumer):
    """A logged-in person's page, re-rendered from the database on connect and after changes.

    Wrapped in ``AllowedHostsOriginValidator(AuthMiddlewareStack(...))`` (``routing.py``): a
    foreign Origin never gets here. Without a session, or without ``approvals.view_call`` /
    ``approvals.decide_call``, the socket is accepted and closed with ``4403``. Pushes only
    say "something changed": each is answered by one render from the database, and changes
    that arrive while a render is under way are folded into one more render.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user_id: int | None = None
        self._stale = False
        self._renderer: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        ensure_sweeper_started()
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user_id = user.pk
        await self.channel_layer.group_add(QUEUE_GROUP, self.channel_name)
        self.groups.append(QUEUE_GROUP)
        # Joined first, then rendered: no change falls between the two.
        await self._push()

    async def disconnect(self, code: int) -> None:
        self.user_id = None
        renderer, self._renderer = self._renderer, None
        if renderer is not None and renderer is not asyncio.current_task():
            renderer.cancel()

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """The page has nothing to say: whatever it sends is ignored."""

    async def call_changed(self, event: dict[str, Any]) -> None:
        if self.user_id is None or not self._concerns(event["call"]):
            return
        self._stale = True
        if self._renderer is None or self._renderer.done():
            self._renderer = asyncio.get_running_loop().create_task(self._render_while_stale())

    def _concerns(self, state: State) -> bool:
        raise NotImplementedError

    async def _render_while_stale(self) -> None:
        while self._stale and self.user_id is not None:
            self._stale = False
            try:
                await self._push()
            except Exception:
                logger.exception("rendering a page push failed")

    def _session_key(self) -> str | None:
        session = self.scope.get("session")
        return None if session is None else session.session_key

    async def _push(self) -> None:
        raise NotImplementedError

    async def _refuse(self) -> None:
        self.user_id = None
        await self.close(code=CLOSE_FORBIDDEN)


class QueueConsumer(_PageConsumer):
    """``/ws/v1/queue``: the whole queue as this person sees it, on every (re)connect and
    after every change to a call that waits or waited: a pending one, or one that has just
    left the queue (only a held call can end approved, denied, expired or cancelled). Calls
    allowed or refused at once never were in it."""

    def _concerns(self, state: State) -> bool:
        return state.get("status") not in Call.Status.NEVER_HELD

    async def _push(self) -> None:
        assert self.user_id is not None
        html = await _queue_html(self.user_id, self._session_key())
        if html is None:
            await self._refuse()
            return
        await self.send(text_data=html)


class CallPageConsumer(_PageConsumer):
    """``/ws/v1/queue/calls/<id>``: the call page's live parts, on every (re)connect and
    after every change to this call or to any ledger (an allowed or approved call)."""

    LEDGER_CHANGES = frozenset({Call.Status.ALLOWED, Call.Status.APPROVED})

    def _concerns(self, state: State) -> bool:
        return (
            state.get("id") == str(self.scope["url_route"]["kwargs"]["call_id"])
            or state.get("status") in self.LEDGER_CHANGES
        )

    async def _push(self) -> None:
        assert self.user_id is not None
        call_id: uuid.UUID = self.scope["url_route"]["kwargs"]["call_id"]
        html = await _call_html(self.user_id, self._session_key(), call_id)
        if html is None:
            await self._refuse()
        elif html == "":
            self.user_id = None
            await self.close(code=CLOSE_NOT_FOUND)
        else:
            await self.send(text_data=html)
