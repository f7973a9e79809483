"""Sockets under attack, against real server processes (issue 13; docs/reliability.md,
"Hostile conditions"): access taken away in admin ends the sockets and long-polls it opened,
one person cannot hold more than their cap of sockets, 300 queue sockets on one session do
not stall the agents, and a page on another port cannot open the queue socket.

Closes are awaited for ``CLOSED_WITHIN`` seconds counted from the admin's (or the logout's)
answer: the close message is pushed after the commit and before that answer, so the bound is
the spec's promise, not a measure of speed (bench/queue_sockets_bench.py measures that).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from websockets.asyncio.client import connect as aconnect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.sync.connection import Connection
from websockets.typing import Origin

from approvals.models import Agent, AgentToken
from approvals.services.rules import cap_rule_save
from tests.factories import token_make, user_make
from tests.live import CSRF_INPUT, Approver, LiveServer, free_port
from tests.scale.servers import APPROVER, PASSWORD, agent_create, bearer, workers

pytestmark = pytest.mark.django_db(transaction=True)

CLOSED_WITHIN = 1.0
HELD = '{"amount": "600.00"}'  # over the 500.00 cap: held at the default gate
ADMIN = "root"
QUEUE_SOCKETS = 300
HELD_CALLS = 20
CALL_INTERVAL = 0.1  # seconds between two held calls
DELIVERY_TIMEOUT = 60.0  # seconds for everything of the 300-socket test, a guard only


@pytest.fixture
def admin(transactional_db: None) -> User:
    return user_make(username=ADMIN, superuser=True, password=PASSWORD)


@pytest.fixture
def held_rule(transactional_db: None) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")


@pytest.fixture
def server(held_rule: None) -> Iterator[LiveServer]:
    with workers(1) as (single,):
        yield single


# --- people at their forms --------------------------------------------------------------


class _Form(HTMLParser):
    """The fields of the page's first form with a submit button, as a browser would send
    them (unticked checkboxes left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        name = named.get("name")
        if tag == "input" and name:
            kind = named.get("type", "text")
            if kind in ("checkbox", "radio") and "checked" not in named:
                return
            if kind not in ("submit", "button"):
                self.fields[name] = named.get("value") or ("on" if kind == "checkbox" else "")
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and "selected" in named:
            self.fields[self._select] = named.get("value") or ""
        elif tag == "textarea" and name:
            self._textarea = name
            self.fields[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data


def _csrf(page: httpx.Response) -> str:
    token = CSRF_INPUT.search(page.text)
    assert token is not None, "no CSRF token on the page"
    return token[1]


def admin_action(person: Approver, changelist: str, action: str, pk: int) -> None:
    """An action of an admin list run on one row, as the admin's own form sends it."""
    page = person.http.get(changelist)
    answer = person.http.post(
        changelist,
        data={
            "csrfmiddlewaretoken": _csrf(page),
            "action": action,
            "_selected_action": str(pk),
            "index": "0",
        },
        headers={"Referer": str(page.url)},
    )
    assert answer.status_code == 302, answer.status_code


def admin_form(person: Approver, path: str, **changes: str | None) -> None:
    """Submit an admin form with some fields changed (None: unticked / left out)."""
    page = person.http.get(path)
    assert page.status_code == 200, page.status_code
    form = _Form()
    form.feed(page.text)
    fields = {**form.fields, **changes}
    data = {name: value for name, value in fields.items() if value is not None}
    answer = person.http.post(path, data=data, headers={"Referer": str(page.url)})
    assert answer.status_code == 302, (answer.status_code, re.findall(r"errorlist.*", answer.text))


def log_out(person: Approver) -> None:
    page = person.http.get("/")
    answer = person.http.post(
        "/accounts/logout/",
        data={"csrfmiddlewaretoken": _csrf(page)},
        headers={"Referer": str(page.url)},
    )
    assert answer.status_code in (200, 302), answer.status_code


def session_cookie(person: Approver) -> str:
    return f"sessionid={person.http.cookies['sessionid']}"


# --- sockets ------------------------------------------------------------------------------


def submit_held(server: LiveServer, token: str) -> str:
    answer = httpx.post(
        f"{server.url}/api/v1/calls",
        json={"tool": "pay", "arguments": HELD},
        headers=bearer(token),
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["status"] == "pending"
    return str(answer.json()["id"])


def agent_socket(server: LiveServer, path: str, token: str) -> ClientConnection:
    return connect(f"{server.ws_url}{path}", additional_headers=bearer(token), open_timeout=10)


def queue_socket(server: LiveServer, cookie: str, origin: str | None = None) -> ClientConnection:
    return connect(
        f"{server.ws_url}/ws/v1/queue",
        origin=Origin(origin or server.url),
        additional_headers={"Cookie": cookie},
        open_timeout=10,
    )


def closed_with(ws: Connection, within: float) -> tuple[int | None, list[str]]:
    """The close code the server sent within ``within`` seconds, and what came before it."""
    received: list[str] = []
    deadline = time.monotonic() + within
    try:
        while True:
            message = ws.recv(timeout=max(0.0, deadline - time.monotonic()))
            received.append(str(message))
    except ConnectionClosed as closed:
        return (None if closed.rcvd is None else closed.rcvd.code), received
    except TimeoutError:
        return None, received


def first_state(ws: Connection) -> dict[str, Any]:
    message = json.loads(ws.recv(timeout=10))
    assert message["type"] == "call"
    state: dict[str, Any] = message["call"]
    return state


class LongPoll:
    """``GET /wait`` in a thread of its own."""

    def __init__(self, server: LiveServer, call_id: str, token: str) -> None:
        self.status: int | None = None
        self.body: dict[str, Any] = {}
        self.answered_at = 0.0
        self._thread = threading.Thread(
            target=self._run, args=(server, call_id, token), daemon=True
        )
        self._thread.start()

    def _run(self, server: LiveServer, call_id: str, token: str) -> None:
        answer = httpx.get(
            f"{server.url}/api/v1/calls/{call_id}/wait?timeout=30",
            headers=bearer(token),
            timeout=40,
        )
        self.answered_at = time.monotonic()
        self.status, self.body = answer.status_code, answer.json()

    def answered_within(self, seconds: float) -> bool:
        self._thread.join(seconds)
        return not self._thread.is_alive()


# --- access ends when it is taken away ----------------------------------------------------


def test_a_token_revoked_in_admin_closes_its_socket_and_the_new_tokens_calls_never_reach_it(
    server: LiveServer, admin: User
) -> None:
    agent, old = agent_create("revoked-bot")
    row = AgentToken.objects.get(agent=agent)
    root = Approver(server, ADMIN, PASSWORD)
    with agent_socket(server, "/ws/v1/agent", old) as stream:
        admin_action(root, "/admin/approvals/agenttoken/", "revoke", row.pk)
        # The agent gets a new token and goes on: what it submits never reaches the old socket.
        submit_held(server, token_make(agent=agent))
        code, before = closed_with(stream, CLOSED_WITHIN)
    root.close()
    assert code == 4401
    assert before == []
    assert httpx.get(f"{server.url}/api/v1/calls", headers=bearer(old)).status_code == 401


def test_revoking_all_of_an_agents_tokens_in_admin_closes_each_socket(
    server: LiveServer, admin: User
) -> None:
    agent, first = agent_create("two-token-bot")
    second = token_make(agent=agent)
    root = Approver(server, ADMIN, PASSWORD)
    call_id = submit_held(server, first)
    with (
        agent_socket(server, f"/ws/v1/calls/{call_id}", first) as on_call,
        agent_socket(server, "/ws/v1/agent", second) as stream,
    ):
        first_state(on_call)
        first_state(stream)
        admin_action(root, "/admin/approvals/agent/", "revoke_tokens", agent.pk)
        codes = [closed_with(on_call, CLOSED_WITHIN)[0], closed_with(stream, CLOSED_WITHIN)[0]]
    root.close()
    assert codes == [4401, 4401]


def test_unticking_active_closes_both_sockets_with_4403_and_answers_the_long_poll_403(
    server: LiveServer, admin: User, approver: User
) -> None:
    agent, token = agent_create("disabled-bot")
    call_id = submit_held(server, token)
    root = Approver(server, ADMIN, PASSWORD)
    with (
        agent_socket(server, f"/ws/v1/calls/{call_id}", token) as on_call,
        agent_socket(server, "/ws/v1/agent", token) as stream,
    ):
        first_state(on_call)
        first_state(stream)
        poll = LongPoll(server, call_id, token)
        assert not poll.answered_within(0.5)  # parked
        admin_form(root, f"/admin/approvals/agent/{agent.pk}/change/", active=None)
        call_closed = closed_with(on_call, CLOSED_WITHIN)
        stream_closed = closed_with(stream, CLOSED_WITHIN)
        answered = poll.answered_within(CLOSED_WITHIN)
    root.close()
    assert not Agent.objects.get(pk=agent.pk).active
    assert call_closed == (4403, [])
    assert stream_closed == (4403, [])
    assert answered
    assert (poll.status, poll.body["error"]["code"]) == (403, "agent_disabled")


def test_a_logout_closes_that_sessions_queue_socket(server: LiveServer, approver: User) -> None:
    alice = Approver(server, APPROVER, PASSWORD)
    with queue_socket(server, session_cookie(alice)) as ws:
        assert 'id="queue"' in str(ws.recv(timeout=10))
        log_out(alice)
        code, _ = closed_with(ws, CLOSED_WITHIN)
    alice.close()
    assert code == 4403


@pytest.mark.parametrize("change", ["password", "deactivate"])
def test_a_password_change_or_deactivation_in_admin_closes_the_queue_socket(
    server: LiveServer, admin: User, approver: User, change: str
) -> None:
    alice = Approver(server, APPROVER, PASSWORD)
    root = Approver(server, ADMIN, PASSWORD)
    with queue_socket(server, session_cookie(alice)) as ws:
        assert 'id="queue"' in str(ws.recv(timeout=10))
        if change == "password":
            new = "a brand new passphrase 42"
            admin_form(
                root,
                f"/admin/auth/user/{approver.pk}/password/",
                password1=new,
                password2=new,
            )
        else:
            admin_form(root, f"/admin/auth/user/{approver.pk}/change/", is_active=None)
        code, _ = closed_with(ws, CLOSED_WITHIN)
    alice.close()
    root.close()
    assert code == 4403


# --- fair sockets -------------------------------------------------------------------------


def test_the_21st_socket_of_one_person_is_closed_with_4429(
    server: LiveServer, approver: User
) -> None:
    alice = Approver(server, APPROVER, PASSWORD)
    cookie = session_cookie(alice)
    with ExitStack() as stack:
        sockets = [stack.enter_context(queue_socket(server, cookie)) for _ in range(20)]
        for ws in sockets:
            assert 'id="queue"' in str(ws.recv(timeout=10))
        with queue_socket(server, cookie) as one_more:
            assert closed_with(one_more, 10) == (4429, [])
        sockets[0].close()
        with queue_socket(server, cookie) as again:
            assert 'id="queue"' in str(again.recv(timeout=10))
    alice.close()


async def _drain(ws: Any) -> None:
    """Read a queue socket for ever, as a browser tab does (its pushes are not the test's)."""
    async for _ in ws:
        pass


async def _agent_waits(server: LiveServer, call_id: str, token: str, socket: bool) -> str:
    """Wait for the call's final state, on its WebSocket or on the long-poll."""
    if socket:
        async with aconnect(
            f"{server.ws_url}/ws/v1/calls/{call_id}",
            additional_headers=bearer(token),
            open_timeout=30,
        ) as ws:
            async for raw in ws:
                state = json.loads(raw)["call"]
                if state["status"] != "pending":
                    return str(state["status"])
        raise AssertionError(f"the socket of {call_id} closed before its decision")
    async with httpx.AsyncClient(base_url=server.url, headers=bearer(token), timeout=40) as http:
        while True:
            answer = await http.get(f"/api/v1/calls/{call_id}/wait?timeout=30")
            assert answer.status_code == 200, answer.status_code
            if answer.json()["status"] != "pending":
                return str(answer.json()["status"])


async def _flood_and_decide(
    server: LiveServer, cookie: str, token: str
) -> tuple[list[str], list[int]]:
    """300 queue sockets open and read; a held call every ``CALL_INTERVAL`` with an agent
    waiting on it (WebSocket and long-poll in turn), each approved through the form: what
    each agent heard, and each approval's answer."""
    queue_sockets = [
        await aconnect(
            f"{server.ws_url}/ws/v1/queue",
            origin=Origin(server.url),
            additional_headers={"Cookie": cookie},
            open_timeout=30,
        )
        for _ in range(QUEUE_SOCKETS)
    ]
    drains = [asyncio.ensure_future(_drain(ws)) for ws in queue_sockets]
    approver = Approver(server, APPROVER, PASSWORD)
    one_at_a_time = asyncio.Lock()  # the approver's one HTTP client, from one thread at a time

    async def decide(call_id: str) -> int:
        async with one_at_a_time:
            return await asyncio.to_thread(approver.decide, call_id, approve=True)

    try:
        async with httpx.AsyncClient(base_url=server.url, headers=bearer(token)) as agent:
            waiters: list[asyncio.Future[str]] = []
            decisions: list[asyncio.Future[int]] = []
            for index in range(HELD_CALLS):
                answer = await agent.post(
                    "/api/v1/calls", json={"tool": "pay", "arguments": HELD}, timeout=30
                )
                assert answer.status_code == 201, answer.status_code
                call_id = str(answer.json()["id"])
                waiters.append(
                    asyncio.ensure_future(
                        _agent_waits(server, call_id, token, socket=index % 2 == 0)
                    )
                )
                decisions.append(asyncio.ensure_future(decide(call_id)))
                await asyncio.sleep(CALL_INTERVAL)
            return list(await asyncio.gather(*waiters)), list(await asyncio.gather(*decisions))
    finally:
        approver.close()
        for drain in drains:
            drain.cancel()
        for ws in queue_sockets:
            await ws.close()


def test_300_queue_sockets_on_one_session_leave_agents_their_handshakes_and_decisions(
    held_rule: None, approver: User
) -> None:
    """Before: after ten held calls an agent's first state took 7.8 s, at 400 sockets agent
    handshakes failed. Now every agent connects and hears its decision."""
    _, token = agent_create("busy-bot")
    cap = {"COUNTERSIGN_MAX_SOCKETS_PER_USER": str(QUEUE_SOCKETS)}
    with workers(1, cap) as (server,):
        alice = Approver(server, APPROVER, PASSWORD)
        agents, decisions = asyncio.run(
            asyncio.wait_for(
                _flood_and_decide(server, session_cookie(alice), token), DELIVERY_TIMEOUT
            )
        )
        alice.close()
    assert decisions == [303] * HELD_CALLS
    assert agents == ["approved"] * HELD_CALLS


# --- origins ------------------------------------------------------------------------------


def test_the_queue_socket_refuses_another_port_of_the_same_host(
    server: LiveServer, approver: User
) -> None:
    alice = Approver(server, APPROVER, PASSWORD)
    cookie = session_cookie(alice)
    with pytest.raises(InvalidStatus) as refused:
        queue_socket(server, cookie, origin=f"http://127.0.0.1:{free_port()}")
    assert refused.value.response.status_code == 403
    with queue_socket(server, cookie) as own:
        assert 'id="queue"' in str(own.recv(timeout=10))
    alice.close()


# --- two workers ---------------------------------------------------------------------------


def test_access_taken_away_on_worker_a_closes_sockets_on_worker_b(
    postgres_and_redis: str, held_rule: None, admin: User, approver: User
) -> None:
    agent, token = agent_create("split-bot")
    row = AgentToken.objects.get(agent=agent)
    with workers(2, {"REDIS_URL": postgres_and_redis}) as (a, b):
        root = Approver(a, ADMIN, PASSWORD)
        alice = Approver(a, APPROVER, PASSWORD)  # logged in on A, her tab on B
        call_id = submit_held(b, token)
        with (
            agent_socket(b, "/ws/v1/agent", token) as stream,
            queue_socket(b, session_cookie(alice)) as queue,
        ):
            first_state(stream)
            assert 'id="queue"' in str(queue.recv(timeout=10))
            poll = LongPoll(b, call_id, token)
            assert not poll.answered_within(0.5)
            admin_action(root, "/admin/approvals/agenttoken/", "revoke", row.pk)
            stream_closed = closed_with(stream, CLOSED_WITHIN)
            answered = poll.answered_within(CLOSED_WITHIN)
            log_out(alice)
            queue_closed = closed_with(queue, CLOSED_WITHIN)
        root.close()
        alice.close()
    assert stream_closed == (4401, [])
    assert answered
    assert (poll.status, poll.body["error"]["code"]) == (401, "unauthenticated")
    assert queue_closed[0] == 4403
