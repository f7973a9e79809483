"""WebSockets. Agents: one call's state until it is final, or every change to an agent's
calls. People: the queue and the call page, re-rendered from the database.

Agents authenticate with the handshake's ``Authorization: Bearer`` header only, read as the
HTTP API reads it (``agent_auth``) — never a session cookie — and face no Origin check
(non-browser clients send none). A refusal is a close code sent *after* ``accept()``,
because a close before it is a bare HTTP 403. The database is the truth and pushes are
hints: each socket joins its groups first and then reads and sends the current state, so no
change is lost between the two.

A call socket follows its call with the waiter the long-poll uses too
(``approvals.realtime.call_waiter``), fed by the socket's own channel.

Access ends when it is taken away (docs/reliability.md): an agent socket listens on the
groups of its token and its agent and closes with ``4401`` when the token is revoked or
``4403`` when the agent is disabled (``pushes.agent_sockets_close``), and reads its token
again every ``ACCESS_RECHECK_SECONDS`` in case that message was lost. A page socket listens
on its person's and its session's groups (a logout, a deactivation, a password change, lost
permissions) and checks its session (Channels' ``get_user``) before each push and every
``SESSION_RECHECK_SECONDS``, and at once when the process's login watch sees its person's
password or active flag change (``approvals.realtime.login_watch``).

Fair sockets (``approvals.realtime.hub``): one person holds at most
``COUNTERSIGN_MAX_SOCKETS_PER_USER`` page sockets and one agent at most
``COUNTERSIGN_MAX_SOCKETS_PER_AGENT`` sockets per process, and one more closes with ``4429``.
The queue's changes reach a process once and each view's sockets from there, by one task per
view (``fairness.page_feed_join``); each view is rendered once per change for all the sockets
showing it, on threads of the pages' own, and pushed at most every
``fairness.PAGE_PUSH_INTERVAL``, one socket at a time, so that agents' reads and pushes never
wait behind approvers' renders. A queue socket is sent the rows that changed since its last
push (``approvals.realtime.queue_updates``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Hashable, Iterable
from datetime import UTC, datetime
from importlib import import_module
from typing import Any

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.backends.base import SessionBase
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.template.loader import render_to_string
from django.utils import timezone

from approvals.api.auth import Bearer, authorization_values, bearer, bearer_still_valid
from approvals.api.errors import ApiError
from approvals.models import Agent, Call
from approvals.ops.metrics import PushedVia, decision_pushed
from approvals.querydict import query_value, scope_query
from approvals.realtime.call_waiter import CallWaiter, ConsumerInbox
from approvals.realtime.hub import (
    CLOSE_TOO_MANY,
    agent_socket_give_back,
    agent_socket_take,
    now,
    page_database,
    page_feed_join,
    page_feed_leave,
    page_send,
    person_socket_give_back,
    person_socket_take,
    shared,
)
from approvals.realtime.login_watch import login_unwatch, login_watch
from approvals.realtime.presence import (
    agent_key,
    call_key,
    presence_watch,
    waiter_enter,
    waiter_leave,
)
from approvals.realtime.pushes import (
    agent_group,
    agent_sockets_group,
    call_group,
    person_group,
    session_group,
    token_group,
)
from approvals.realtime.queue_updates import QueuePush, ascii_html, queue_push
from approvals.selectors.calls import call_state
from approvals.selectors.deciders import may_view
from approvals.web.call_page import call_page
from approvals.web.queue_page import queue_for_user
from config.runtime.consumer_dispatch import DispatchWithoutConnectionSweep
from config.runtime.sweeper import ensure_sweeper_started

logger = logging.getLogger(__name__)

CLOSE_NORMAL = 1000
CLOSE_BAD_REQUEST = 4400
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_FAILED = 1011  # what the server sends for a consumer that fails: the client reconnects

# How often an agent socket reads its token again, and a page socket its session, in case the
# message that closes them was lost (the spec's bound for a session: at least every minute).
ACCESS_RECHECK_SECONDS = 60.0
SESSION_RECHECK_SECONDS = 60.0

State = dict[str, Any]


def parse_since(query_string: bytes) -> datetime | None:
    """The ``since`` query parameter as an aware time; None when absent.

    Raises ``ValueError`` when it is repeated or not an ISO 8601 time. A time without an
    offset is UTC.
    """
    value = query_value(scope_query(query_string), "since")
    if value is None:
        return None
    # An offset's "+" arrives as a space when the client did not percent-encode it; a space
    # is never part of a valid time, so reading it back as "+" only accepts more.
    text = value.strip().replace(" ", "+")
    try:
        moment = datetime.fromisoformat(text)
        if timezone.is_naive(moment):
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
    except OverflowError as error:
        raise ValueError("since is out of range") from error


@database_sync_to_async
def _bearer_of(headers: Iterable[tuple[bytes, bytes]]) -> Bearer:
    return bearer(authorization=authorization_values(headers))


@database_sync_to_async
def _still_valid(token_id: int) -> None:
    bearer_still_valid(token_id=token_id)


@database_sync_to_async
def _owns_call(agent: Agent, call_id: uuid.UUID) -> bool:
    return Call.objects.filter(pk=call_id, agent=agent).exists()


@database_sync_to_async
def _agent_states(token_id: int, agent: Agent, since: datetime | None) -> list[State]:
    """The agent's calls changed since ``since`` (default: its pending ones), oldest first,
    once the token is read again (raises ``ApiError`` if it no longer holds)."""
    bearer_still_valid(token_id=token_id)
    calls = Call.objects.filter(agent=agent).select_related("decided_by")
    if since is None:
        calls = calls.filter(status=Call.Status.PENDING).order_by("created_at", "pk")
    else:
        calls = calls.filter(updated_at__gte=since).order_by("updated_at", "created_at", "pk")
    return [call_state(call) for call in calls.prefetch_related("approvals__user")]


class _AgentConsumer(DispatchWithoutConnectionSweep, AsyncJsonWebsocketConsumer):
    """Bearer authentication, the cap, the groups that end the socket with its access, and
    deaf ears for anything the agent sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bearer: Bearer | None = None
        self._counted: int | None = None  # the agent whose cap this socket counts in
        self._access_watch: asyncio.Task[None] | None = None
        self._ended = False
        self._waits_for: str | None = None  # approvals.realtime.presence's key, while counted

    def _wait_for(self, key: str) -> None:
        """Count this socket as an agent waiting (``approvals.realtime.presence``) until it
        closes."""
        self._waits_for = key
        waiter_enter(key)

    async def _authenticate(self) -> Bearer | None:
        """The socket's active agent and token, counted in its cap; otherwise the (accepted)
        socket is closed with ``4401`` (no valid token), ``4403`` (disabled agent) or
        ``4429`` (the agent holds its cap) and this is None."""
        try:
            found = await _bearer_of(self.scope["headers"])
        except ApiError as error:
            await self._end(error.close_code)
            return None
        if not agent_socket_take(found.agent.pk):
            await self._end(CLOSE_TOO_MANY)
            return None
        self._counted = found.agent.pk
        self.bearer = found
        # Joined before the first read, which reads the token again: a revocation committed
        # in between is either seen there or pushed here.
        await self._join(token_group(found.token_id), agent_sockets_group(found.agent.pk))
        return found

    async def _join(self, *groups: str) -> None:
        # Listed in self.groups, the groups are left by websocket_disconnect. At once: with
        # Redis, each is a round trip.
        await asyncio.gather(*(self.channel_layer.group_add(g, self.channel_name) for g in groups))
        self.groups.extend(groups)

    def _watch_access(self) -> None:
        self._access_watch = asyncio.get_running_loop().create_task(self._recheck_access())

    async def _recheck_access(self) -> None:
        assert self.bearer is not None
        while True:
            await asyncio.sleep(ACCESS_RECHECK_SECONDS)
            try:
                await _still_valid(self.bearer.token_id)
            except ApiError as error:
                await self._end(error.close_code)
                return

    async def sockets_close(self, event: dict[str, Any]) -> None:
        """A push from ``approvals.realtime.pushes``: the token was revoked or the agent
        disabled."""
        await self._end(int(event["code"]))

    async def _end(self, code: int) -> None:
        """Close once, whoever asks first (a final state, a revocation, a recheck)."""
        if self._ended:
            return
        self._ended = True
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        self._ended = True
        watch, self._access_watch = self._access_watch, None
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()
        counted, self._counted = self._counted, None
        if counted is not None:
            agent_socket_give_back(counted)
        waits_for, self._waits_for = self._waits_for, None
        if waits_for is not None:
            waiter_leave(waits_for)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Agents have nothing to say on these sockets: whatever they send is ignored."""

    async def _send_state(self, state: State) -> None:
        await self.send_json({"type": "call", "call": state})


class AgentCallConsumer(_AgentConsumer):
    """``/ws/v1/calls/<id>``: the call's state now, every change, and a ``1000`` close once it
    is final. Its waiter (``approvals.realtime.call_waiter``) also expires the call at its
    deadline, so the agent learns ``expired`` on time even if the sweep lags, and reads the
    call now and then in case a push was lost."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inbox = ConsumerInbox()
        self._following: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        ensure_sweeper_started()
        await self.accept()
        found = await self._authenticate()
        if found is None:
            return
        call_id: uuid.UUID = self.scope["url_route"]["kwargs"]["call_id"]
        if not await _owns_call(found.agent, call_id):
            await self._end(CLOSE_NOT_FOUND)
            return
        self._wait_for(call_key(call_id))
        await self._join(call_group(call_id))  # before the waiter's first read
        waiter = CallWaiter(
            agent=found.agent,
            call_id=call_id,
            token_id=found.token_id,
            inbox=self._inbox,
            via=PushedVia.CALL_SOCKET,
        )
        # A task of its own: the consumer goes on receiving the pushes its waiter needs.
        self._following = asyncio.get_running_loop().create_task(self._follow(waiter))

    async def _follow(self, waiter: CallWaiter) -> None:
        try:
            async with contextlib.aclosing(waiter.states()) as states:
                async for state in states:
                    await self._send_state(state)
                    if state["status"] not in Call.Status.FINAL and self._access_watch is None:
                        self._watch_access()
        except ApiError as error:
            await self._end(error.close_code)
            return
        except Exception:
            logger.exception("following call %s failed", waiter.call_id)
            await self._end(CLOSE_FAILED)
            return
        await self._end(CLOSE_NORMAL)

    async def call_changed(self, event: dict[str, Any]) -> None:
        """A push from ``approvals.realtime.pushes``, for the waiter."""
        self._inbox.hand(event)

    def _stop_following(self) -> None:
        task, self._following = self._following, None
        # The waiter's own task ends the socket: it must not cancel its own last steps.
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _end(self, code: int) -> None:
        self._stop_following()
        await super()._end(code)

    async def disconnect(self, code: int) -> None:
        self._stop_following()
        await super().disconnect(code)


class AgentStreamConsumer(_AgentConsumer):
    """``/ws/v1/agent[?since=<ISO 8601>]``: the state of every call of the agent changed since
    ``since`` (default: its pending calls), oldest first, then every change as it happens."""

    async def connect(self) -> None:
        ensure_sweeper_started()
        await self.accept()
        found = await self._authenticate()
        if found is None:
            return
        try:
            since = parse_since(self.scope["query_string"])
        except ValueError:
            await self._end(CLOSE_BAD_REQUEST)
            return
        self._wait_for(agent_key(found.agent.pk))
        await self._join(agent_group(found.agent.pk))
        try:
            states = await _agent_states(found.token_id, found.agent, since)
        except ApiError as error:
            await self._end(error.close_code)
            return
        for state in states:
            await self._send_state(state)
        self._watch_access()

    async def call_changed(self, event: dict[str, Any]) -> None:
        await self._send_state(event["call"])
        decision_pushed(event["call"], via=PushedVia.AGENT_STREAM)


# --- The approver's pages ---------------------------------------------------------------------


def _session_store(session_key: str) -> SessionBase:
    store: SessionBase = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return store


async def _session_expiry(session_key: str, user_id: int) -> tuple[datetime | None, str]:
    """When this session expires, while it still is this person's login and they may see the
    pages (None otherwise), and the hash of the password it holds, for the login watch.

    Channels' ``get_user`` checks the login (its backend, the person still active, the
    password it was made with; a session whose password changed is flushed, as Django's own
    ``get_user`` does) on a store read afresh: the scope's was read at connect.
    """
    store = _session_store(session_key)
    scope: Any = {"session": store}  # all of a scope that get_user reads
    user = await get_user(scope)
    if not isinstance(user, User) or user.pk != user_id:
        return None, ""
    # Checked equal to the session's by get_user.
    return await _viewer_session_expiry(user, store), user.get_session_auth_hash()


@database_sync_to_async
def _viewer_session_expiry(user: User, store: SessionBase) -> datetime | None:
    if not may_view(user):
        return None
    if isinstance(store, DatabaseSessionStore):
        # get_expiry_date() counts from now unless the session set its own expiry: the row
        # (the engine's documented model) has when it really ends.
        expiry: datetime | None = (
            store.get_model_class()
            .objects.filter(session_key=store.session_key)
            .values_list("expire_date", flat=True)
            .first()
        )
        return expiry
    return store.get_expiry_date()


def _viewer(user_id: int) -> User | None:
    """The person re-read from the database (``scope["user"]`` is fixed at connect), if they
    may still see the pages."""
    user = User.objects.filter(pk=user_id).first()
    return user if user is not None and may_view(user) else None


def _queue_push(user_id: int) -> QueuePush | None:
    user = _viewer(user_id)
    if user is None:
        return None
    return queue_push(user_id=user_id, queue=queue_for_user(user=user))


def _call_html(user_id: int, call_id: uuid.UUID) -> str | None:
    """The call page's live parts for this person; its decision part only once it holds no
    form, so that nobody loses a comment they are typing. ``""``: the call is gone."""
    user = _viewer(user_id)
    if user is None:
        return None
    page = call_page(call_id=call_id, user=user)
    if page is None:
        return ""
    context = {"page": page, "oob": True}
    parts = ["live", "audit"] if page.show_form else ["live", "audit", "decide"]
    return ascii_html(
        "".join(render_to_string(f"approvals/call.html#{part}", context) for part in parts)
    )


_queue_push_async = page_database(_queue_push)
_call_html_async = page_database(_call_html)


class _PageConsumer(DispatchWithoutConnectionSweep, AsyncWebsocketConsumer):
    """A logged-in person's page, re-rendered from the database on connect and after changes.

    Wrapped in ``SameOriginValidator(AuthMiddlewareStack(...))`` (``routing.py``): a foreign
    Origin — another site, or another port of this one — never gets here. Without a session,
    or without ``approvals.view_call`` / ``approvals.decide_call``, the socket is accepted and
    closed with ``4403``; past the person's cap, with ``4429``. A logout of its session, the
    person's deactivation, a password change or a change of their permissions closes it with
    ``4403`` (``notify.session_sockets_close``, ``notify.person_sockets_close``); so does its
    session's expiry, remembered at connect and read again before each push and every
    ``SESSION_RECHECK_SECONDS``. A password changed or a deactivation made where no push
    comes from (a script, ``changepassword``) is seen by the process's login watch
    (``login_watch``) within a second.

    Pushes only say "something changed" (through the process's one channel in the queue
    group, to the view's feed, ``fairness.page_feed_join``): the feed asks each socket of the
    view in turn to ``page_push``, answered by one render from the database, shared with every
    socket of the same view in the process (``fairness.shared``), after the session is
    checked again (shared per session). A change after a quiet spell is pushed at once;
    changes that come within ``fairness.PAGE_PUSH_INTERVAL`` of the last push, or while a
    render is under way, are folded into one more.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user_id: int | None = None  # None once the socket is ending
        self._session_key = ""
        self._expires: datetime | None = None  # the session's, as last read
        self._counted: int | None = None  # the person whose cap this socket counts in
        self._feed: Hashable | None = None  # the view whose feed this socket is in
        self._shown: QueuePush | None = None  # the queue render last sent, if any
        self._sending = asyncio.Lock()
        self._session_watch: asyncio.Task[None] | None = None
        self._ended = False

    async def connect(self) -> None:
        ensure_sweeper_started()
        await self.accept()
        user = self.scope.get("user")
        session = self.scope.get("session")
        session_key = None if session is None else session.session_key
        if user is None or not user.is_authenticated or not session_key:
            await self._end(CLOSE_FORBIDDEN)
            return
        if not person_socket_take(user.pk):
            await self._end(CLOSE_TOO_MANY)
            return
        self._counted = self.user_id = user.pk
        self._session_key = session_key
        # The queue's changes come through the process's one channel in the queue group;
        # what ends this socket's access, through groups of its own.
        groups = (person_group(user.pk), session_group(session_key))
        await asyncio.gather(*(self.channel_layer.group_add(g, self.channel_name) for g in groups))
        self.groups.extend(groups)  # left by websocket_disconnect
        key, _ = self._view()
        self._feed = key  # before the wait: a disconnect meanwhile leaves the feed
        await page_feed_join(key, self, concerns=self._concerns)
        presence_watch()
        # Joined first, then checked and rendered: no change and no logout falls between.
        await self.page_push(since=now())
        if self.user_id is not None:
            loop = asyncio.get_running_loop()
            self._session_watch = loop.create_task(self._recheck_session())

    async def disconnect(self, code: int) -> None:
        self._ended = True
        self.user_id = None
        login_unwatch(self)
        self._leave_feed()
        self._stop_tasks()
        counted, self._counted = self._counted, None
        if counted is not None:
            person_socket_give_back(counted)

    def _leave_feed(self) -> None:
        feed, self._feed = self._feed, None
        if feed is not None:
            page_feed_leave(feed, self)

    def _stop_tasks(self) -> None:
        task, self._session_watch = self._session_watch, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """The page has nothing to say: whatever it sends is ignored."""

    async def sockets_close(self, event: dict[str, Any]) -> None:
        """A push from ``approvals.realtime.pushes``: a logout, a deactivation, a password change,
        or permissions that may be lost."""
        await self._end(int(event["code"]))

    async def login_changed(self) -> None:
        """The login watch saw the person's password or active flag change: check the session
        in full now."""
        await self._session_holds(since=now())

    def _concerns(self, state: State) -> bool:
        raise NotImplementedError

    def _view(self) -> tuple[Hashable, Callable[[], Any]]:
        """What this socket shows, as a key naming all it depends on, and its render."""
        raise NotImplementedError

    async def page_push(self, *, since: float) -> None:
        """Check the session, render, check the session's expiry again, send; the check and
        the render are shared with the other sockets asking, if they started after
        ``since``."""
        if not await self._session_holds(since=since):
            return
        key, render = self._view()
        rendered: str | QueuePush | None = await shared(key, render, since=since)
        if self.user_id is None:  # ended while rendering
            return
        if rendered is None or self._expired():
            await self._end(CLOSE_FORBIDDEN)
            return
        if rendered == "":
            await self._end(CLOSE_NOT_FOUND)
            return
        # One push at a time (the connect's and a change's can meet): a queue push is worked
        # out from the one before it, which must have been sent.
        async with self._sending:
            if isinstance(rendered, str):
                html: str | None = rendered
            else:
                html = await rendered.text_after(self._shown)
                if html is not None:
                    self._shown = rendered
            if html is not None and self.user_id is not None:
                self._pushed_at = now()
                await page_send(lambda: self.send(text_data=html))

    async def _session_holds(self, *, since: float) -> bool:
        """Whether the session still lets this person see the pages (read once for every
        socket of the session asking at the same time); if not, the socket is ended."""
        user_id, session_key = self.user_id, self._session_key
        if user_id is None:
            return False
        self._expires, session_hash = await shared(
            ("session", session_key, user_id),
            lambda: _session_expiry(session_key, user_id),
            since=since,
        )
        if self._expired():
            await self._end(CLOSE_FORBIDDEN)
            return False
        if self.user_id is None:
            return False
        login_watch(self, user_id=user_id, session_hash=session_hash)
        return True

    def _expired(self) -> bool:
        return self._expires is None or self._expires <= timezone.now()

    async def _recheck_session(self) -> None:
        """Every ``SESSION_RECHECK_SECONDS``, and when the session expires, check it again:
        a session that ended without a push (expired, deleted, a lost message) gets no
        further pushes and its socket is closed."""
        while self.user_id is not None:
            wait = SESSION_RECHECK_SECONDS
            if self._expires is not None:
                left = (self._expires - timezone.now()).total_seconds()
                wait = max(0.0, min(wait, left))
            await asyncio.sleep(wait)
            await self._session_holds(since=now())

    async def _end(self, code: int) -> None:
        """Close once, whoever asks first (a push, a check, the session's watch)."""
        if self._ended:
            return
        self._ended = True
        self.user_id = None
        login_unwatch(self)
        self._leave_feed()
        self._stop_tasks()
        await self.close(code=code)


class QueueConsumer(_PageConsumer):
    """``/ws/v1/queue``: the whole queue as this person sees it, on every (re)connect and
    after every change to a call that waits or waited: a pending one, or one that has just
    left the queue (only a held call can end approved, denied, expired or cancelled). Calls
    allowed or refused at once never were in it. One render per person per change, whatever
    the number of their sockets."""

    def _concerns(self, state: State) -> bool:
        # A held call refused at approval leaves the queue; it carries a decision.
        return state.get("status") not in Call.Status.NEVER_HELD or bool(state.get("decision"))

    def _view(self) -> tuple[Hashable, Callable[[], Any]]:
        user_id = self.user_id
        assert user_id is not None
        return ("queue", user_id), lambda: _queue_push_async(user_id)


class CallPageConsumer(_PageConsumer):
    """``/ws/v1/queue/calls/<id>``: the call page's live parts, on every (re)connect and
    after every change to this call or to any ledger (an allowed or approved call). One render
    per person and call per change."""

    LEDGER_CHANGES = frozenset({Call.Status.ALLOWED, Call.Status.APPROVED})

    def _concerns(self, state: State) -> bool:
        call_id = str(self.scope["url_route"]["kwargs"]["call_id"])
        return (
            state.get("id") == call_id
            or state.get("status") in self.LEDGER_CHANGES
            # approvals.realtime.presence: an agent began or ceased to wait for this call, or for
            # every call of some agent (this one's, perhaps)
            or call_id in state.get("presence_calls", ())
            or bool(state.get("presence_agents"))
        )

    def _view(self) -> tuple[Hashable, Callable[[], Any]]:
        user_id = self.user_id
        assert user_id is not None
        call_id: uuid.UUID = self.scope["url_route"]["kwargs"]["call_id"]
        return ("call", user_id, call_id), lambda: _call_html_async(user_id, call_id)
