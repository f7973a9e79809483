"""The client against a real server (config/serve.py on the test database), decided by a
person at the approver's forms: allowed, refused, approved over the WebSocket, denied over the
long-poll when WebSockets are blocked, a restart mid-wait, the deadline (the call cancelled, so
no one can approve it after), a service lost for good, and ``gated``."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from countersign import (
    AsyncClient,
    Client,
    Conflict,
    Denied,
    NotApproved,
    NotFound,
    ServiceUnavailable,
    TimedOut,
    Unauthorized,
    errors,
    protocol,
)
from tests.countersign.world import (
    APPROVER,
    BIG_PAYMENT,
    BIG_WIRE,
    PASSWORD,
    SMALL_PAYMENT,
    TOKEN,
)
from tests.live import CSRF_INPUT, Approver, LiveServer, free_port, start_server

pytestmark = pytest.mark.django_db(transaction=True)

# Long enough for the waiting client to be connected when the decision comes.
DECISION_DELAY = 0.5
DEADLINE = 10.0


def decide(server: LiveServer, call_id: str, *, approve: bool, comment: str) -> int:
    approver = Approver(server, APPROVER, PASSWORD)
    try:
        return approver.decide(call_id, approve=approve, comment=comment)
    finally:
        approver.close()


def late_approve(server: LiveServer, state: dict[str, Any]) -> int:
    """An approver posting an approval of a call that is final already, as a page opened
    before the cancel would: with the call's digest, past the form the page no longer shows."""
    approver = Approver(server, APPROVER, PASSWORD)
    try:
        page = approver.http.get(f"/calls/{state['id']}/")
        assert "arguments_sha256" not in page.text  # no decision form on a final call
        token = CSRF_INPUT.search(page.text)
        assert token is not None
        return approver.http.post(
            f"/calls/{state['id']}/approve",
            data={
                "csrfmiddlewaretoken": token[1],
                "arguments_sha256": state["arguments_sha256"],
                "comment": "too late",
                "scope": "once",
            },
            headers={"Referer": str(page.url)},
        ).status_code
    finally:
        approver.close()


def delayed_decide(server: LiveServer, call_id: str, approve: bool, comment: str) -> int:
    time.sleep(DECISION_DELAY)
    return decide(server, call_id, approve=approve, comment=comment)


def first_pending(server: LiveServer) -> str:
    """The id of the agent's first pending call, once there is one (a gated function's)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        response = httpx.get(
            f"{server.url}/api/v1/calls",
            params={"status": "pending"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        if items := response.json()["items"]:
            return str(items[0]["id"])
        time.sleep(0.05)
    raise AssertionError("no pending call")


def no_long_poll(*args: Any) -> Any:
    raise AssertionError("the client long-polled though the WebSocket was open")


@contextmanager
def websocket_blocker() -> Iterator[tuple[str, list[str]]]:
    """A proxy that refuses every WebSocket handshake with 403, as some do: its ws:// base
    URL and the paths it refused."""
    refused: list[str] = []

    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            refused.append(self.path)
            self.send_error(403)

        def log_message(self, *args: Any) -> None:
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{proxy.server_address[1]}", refused
    finally:
        proxy.shutdown()
        proxy.server_close()


def sockets_at(monkeypatch: pytest.MonkeyPatch, base: str) -> None:
    """Send the client's WebSockets to ``base`` instead of the service."""
    monkeypatch.setattr(
        protocol, "socket_url", lambda _, call: f"{base}/ws/v1/calls/{protocol.call_id(call)}"
    )


@pytest.fixture
def client(server: LiveServer) -> Iterator[Client]:
    with Client(server.url, TOKEN, timeout=DEADLINE) as running:
        yield running


def test_an_allowed_call_is_final_at_once(client: Client) -> None:
    state = client.call("pay", SMALL_PAYMENT, run_id="run-7", context="A coffee")
    assert state["status"] == "allowed"
    assert (state["tool"], state["principal"], state["run_id"]) == ("pay", "carol", "run-7")
    assert client.get(state["id"]) == client.wait(state["id"], deadline=DEADLINE)


def test_a_refused_call_returns_the_refusal_with_its_reasons(client: Client) -> None:
    state = client.call("wire", BIG_WIRE)
    assert state["status"] == "refused"
    assert [reason["rule"] for reason in state["reasons"]] == ["wires"]


def test_gated_raises_denied_on_a_refusal_and_does_not_run(client: Client) -> None:
    ran: list[str] = []

    @client.gated("wire")
    def wire(amount: str) -> None:
        ran.append(amount)

    with pytest.raises(Denied) as raised:
        wire(BIG_WIRE["amount"])
    assert raised.value.status == "refused"
    assert raised.value.reasons[0]["rule"] == "wires"
    assert ran == []


def test_gated_runs_an_allowed_function(client: Client) -> None:
    @client.gated("pay", run_id="run-7")
    def pay(amount: str) -> str:
        return f"paid {amount}"

    assert pay(SMALL_PAYMENT["amount"]) == "paid 12.50"


def test_wait_gets_an_approval_pushed_over_the_websocket(
    server: LiveServer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Client, "_poll", no_long_poll)
    held = client.submit("pay", BIG_PAYMENT)
    assert held["status"] == "pending"
    with ThreadPoolExecutor(1) as pool:
        decision = pool.submit(delayed_decide, server, held["id"], True, "fine")
        state = client.wait(held, deadline=DEADLINE)
    assert decision.result() == 303
    assert state["status"] == "approved"
    assert (state["decision"]["by"], state["decision"]["comment"]) == (APPROVER, "fine")


def test_wait_falls_back_to_long_poll_when_the_websocket_cannot_connect(
    server: LiveServer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    sockets_at(monkeypatch, f"ws://127.0.0.1:{free_port()}")  # nothing listens there
    held = client.submit("pay", BIG_PAYMENT)
    with ThreadPoolExecutor(1) as pool:
        decision = pool.submit(delayed_decide, server, held["id"], False, "too much")
        state = client.wait(held, deadline=DEADLINE)
    assert decision.result() == 303
    assert (state["status"], state["decision"]["comment"]) == ("denied", "too much")


def test_a_deadline_cancels_the_call_so_no_one_can_approve_it_after(
    server: LiveServer, client: Client
) -> None:
    held = client.submit("pay", BIG_PAYMENT)
    started = time.monotonic()
    with pytest.raises(TimedOut) as raised:
        client.wait(held, deadline=1.0)
    assert 1.0 <= time.monotonic() - started < 2.5
    assert str(raised.value) == errors.DEADLINE_CANCELLED.format(seconds=1.0)
    assert (raised.value.call_id, raised.value.cancelled) == (held["id"], True)
    assert late_approve(server, held) != 303
    assert client.get(held)["status"] == "cancelled"


def test_a_wait_told_not_to_cancel_leaves_the_call_pending(client: Client) -> None:
    held = client.submit("pay", BIG_PAYMENT)
    with pytest.raises(TimedOut, match="still pending"):
        client.wait(held, deadline=0.5, cancel=False)
    assert client.get(held)["status"] == "pending"


def test_a_gated_call_whose_agent_gives_up_is_cancelled_and_cannot_be_approved(
    server: LiveServer, client: Client
) -> None:
    ran: list[str] = []

    @client.gated("pay", deadline=1.0)
    def pay(amount: str) -> None:
        ran.append(amount)

    with pytest.raises(NotApproved) as raised:
        pay(BIG_PAYMENT["amount"])
    assert isinstance(raised.value, TimedOut)
    assert "Traceback" not in str(raised.value)
    state = client.get(raised.value.call_id)
    assert state["status"] == "cancelled"
    assert late_approve(server, state) != 303
    assert client.get(state)["status"] == "cancelled"
    assert ran == []


def test_a_deadline_bounds_the_long_poll_too(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    sockets_at(monkeypatch, f"ws://127.0.0.1:{free_port()}")
    held = client.submit("pay", BIG_PAYMENT)
    started = time.monotonic()
    with pytest.raises(TimedOut):
        client.wait(held, deadline=1.5)
    assert 1.5 <= time.monotonic() - started < 3.0


def test_a_wait_gives_up_on_a_service_lost_for_longer_than_reconnect_for(world: None) -> None:
    server = start_server()
    try:
        with Client(server.url, TOKEN, timeout=DEADLINE, reconnect_for=1.0) as client:
            held = client.submit("pay", BIG_PAYMENT)
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(client.wait, held, deadline=DEADLINE)
                time.sleep(DECISION_DELAY)
                server.stop()
                started = time.monotonic()
                with pytest.raises(ServiceUnavailable) as raised:
                    waiting.result(timeout=DEADLINE)
    finally:
        server.stop()
    assert time.monotonic() - started < 1.0 + 4.0  # the limit, and at most one backoff more
    assert errors.LOST_WHILE_WAITING.format(seconds=1.0) in str(raised.value)


def test_gated_raises_denied_with_the_reviewers_comment_and_does_not_run(
    server: LiveServer, client: Client
) -> None:
    ran: list[str] = []

    @client.gated("pay", deadline=DEADLINE)
    def pay(amount: str) -> None:
        ran.append(amount)

    with ThreadPoolExecutor(1) as pool:
        attempt = pool.submit(pay, BIG_PAYMENT["amount"])
        call_id = first_pending(server)
        assert decide(server, call_id, approve=False, comment="Use the other card.") == 303
        with pytest.raises(Denied) as raised:
            attempt.result(timeout=DEADLINE)
    assert (raised.value.status, raised.value.comment) == ("denied", "Use the other card.")
    assert "Use the other card." in str(raised.value)
    assert ran == []


def test_cancel_withdraws_a_pending_call_once(client: Client) -> None:
    held = client.submit("pay", BIG_PAYMENT)
    assert client.cancel(held)["status"] == "cancelled"
    with pytest.raises(Conflict) as raised:
        client.cancel(held)
    assert raised.value.code == "already_final"
    assert client.wait(held["id"], deadline=DEADLINE)["status"] == "cancelled"


def test_unknown_calls_and_tokens(server: LiveServer, client: Client) -> None:
    with pytest.raises(NotFound):
        client.get(str(uuid.uuid4()))
    held = client.submit("pay", BIG_PAYMENT)
    with Client(server.url, "cs_not-a-token") as stranger:
        with pytest.raises(Unauthorized):
            stranger.submit("pay", SMALL_PAYMENT)
        with pytest.raises(Unauthorized):  # the socket's 4401 close
            stranger.wait(held, deadline=DEADLINE)


def test_wait_reconnects_after_a_restart_and_gets_the_decision_made_meanwhile(
    world: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sockets: list[str] = []

    def counted(url: str, **options: Any) -> Any:
        sockets.append(url)
        return connect(url, **options)

    monkeypatch.setattr("countersign.client.connect_sync", counted)
    server = start_server()
    try:
        with Client(server.url, TOKEN, timeout=DEADLINE) as client, ThreadPoolExecutor(1) as pool:
            held = client.submit("pay", BIG_PAYMENT)
            waiting = pool.submit(client.wait, held, deadline=DEADLINE)
            time.sleep(DECISION_DELAY)  # the socket is open and has sent the pending state
            server.stop()
            # Decided on another server while nothing listens where the client is waiting.
            elsewhere = start_server()
            try:
                assert decide(elsewhere, held["id"], approve=True, comment="while away") == 303
            finally:
                elsewhere.stop()
            assert not waiting.done()
            server = start_server(port=server.port)
            state = waiting.result(timeout=DEADLINE)
    finally:
        server.stop()
    assert (state["status"], state["decision"]["comment"]) == ("approved", "while away")
    assert len(sockets) >= 2


@pytest.mark.asyncio
async def test_the_async_client_gets_an_approval_over_the_websocket(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(AsyncClient, "_poll", no_long_poll)
    async with AsyncClient(server.url, TOKEN, timeout=DEADLINE) as client:
        held = await client.submit("pay", BIG_PAYMENT)
        decision = asyncio.ensure_future(
            asyncio.to_thread(delayed_decide, server, held["id"], True, "fine")
        )
        state = await client.wait(held, deadline=DEADLINE)
    assert await decision == 303
    assert (state["status"], state["decision"]["comment"]) == ("approved", "fine")


@pytest.mark.asyncio
async def test_the_async_client_long_polls_when_a_proxy_refuses_websockets(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with websocket_blocker() as (blocked, refused):
        sockets_at(monkeypatch, blocked)
        async with AsyncClient(server.url, TOKEN, timeout=DEADLINE) as client:
            held = await client.submit("pay", BIG_PAYMENT)
            decision = asyncio.ensure_future(
                asyncio.to_thread(delayed_decide, server, held["id"], False, "not today")
            )
            state = await client.wait(held, deadline=DEADLINE)
    assert await decision == 303
    assert (state["status"], state["decision"]["comment"]) == ("denied", "not today")
    assert refused == [f"/ws/v1/calls/{held['id']}"]  # refused once: long-poll from then on


@pytest.mark.asyncio
async def test_async_gated_raises_denied_with_the_comment(
    server: LiveServer,
) -> None:
    ran: list[str] = []
    async with AsyncClient(server.url, TOKEN, timeout=DEADLINE) as client:

        @client.gated("pay", deadline=DEADLINE)
        async def pay(amount: str) -> None:
            ran.append(amount)

        attempt = asyncio.ensure_future(pay(BIG_PAYMENT["amount"]))
        call_id = await asyncio.to_thread(first_pending, server)
        assert await asyncio.to_thread(decide, server, call_id, approve=False, comment="no") == 303
        with pytest.raises(Denied) as raised:
            await attempt
    assert (raised.value.status, raised.value.comment) == ("denied", "no")
    assert ran == []
