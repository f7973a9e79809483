"""Abuse and authorisation (issue 6) beyond tests/approvals/test_api.py, test_longpoll.py and
test_consumers.py, which cover each refusal in-process: here another agent tries every way in
to a call over a real server (HTTP, long-poll, both sockets), an approver's session does not
open the agent API, and a thousand guessed tokens open nothing.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import string
import threading
import time
from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from approvals.models import AgentToken, AuditEntry, Call
from approvals.services.agents import agent_token_issue
from approvals.services.rules import cap_rule_save
from config.asgi import application
from tests.asgi import asgi_response
from tests.live import Approver
from tests.scale.servers import APPROVER, PASSWORD, agent_create, bearer, workers

HELD = '{"amount": "600.00"}'


def _held_call(http: httpx.Client) -> dict[str, Any]:
    response = http.post("/api/v1/calls", json={"tool": "pay", "arguments": HELD})
    assert response.status_code == 201
    state: dict[str, Any] = response.json()
    assert state["status"] == "pending"
    return state


def _silent(url: str, token: str, seconds: float) -> list[dict[str, Any]]:
    """Every message a socket gets within ``seconds``; the socket must stay open."""
    messages = []
    with connect(url, additional_headers=bearer(token), open_timeout=10) as ws:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                messages.append(json.loads(ws.recv(timeout=left)))
            except TimeoutError:
                break
    return messages


@pytest.mark.django_db(transaction=True)
def test_another_agent_learns_and_changes_nothing_of_a_call_over_a_live_server(
    approver: User,
) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    _, owner_token = agent_create("owner")
    _, intruder_token = agent_create("intruder")
    with workers(1) as (server,):
        owner = httpx.Client(base_url=server.url, headers=bearer(owner_token), timeout=10)
        intruder = httpx.Client(base_url=server.url, headers=bearer(intruder_token), timeout=10)
        call = _held_call(owner)
        path = f"/api/v1/calls/{call['id']}"

        for response in (
            intruder.get(path),
            intruder.get(f"{path}/wait?timeout=1"),
            intruder.post(f"{path}/cancel"),
        ):
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"
        assert intruder.get("/api/v1/calls").json() == {"items": [], "count": 0}

        # The call socket: refused with 4404 before any state.
        with connect(
            f"{server.ws_url}/ws/v1/calls/{call['id']}",
            additional_headers=bearer(intruder_token),
            open_timeout=10,
        ) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=5)
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 4404

        # The agent streams, each since long ago: the owner's shows the call, the other not,
        # neither before nor after the decision.
        stream = "/ws/v1/agent?since=2000-01-01T00:00:00Z"
        heard: dict[str, list[dict[str, Any]]] = {}

        def listen(name: str, token: str) -> None:
            heard[name] = _silent(f"{server.ws_url}{stream}", token, 3)

        listeners = [
            threading.Thread(target=listen, args=(name, token), daemon=True)
            for name, token in (("owner", owner_token), ("intruder", intruder_token))
        ]
        for listener in listeners:
            listener.start()
        time.sleep(0.5)  # both streams connected and sent what they had
        people = Approver(server, APPROVER, PASSWORD)
        assert people.decide(call["id"], approve=True, comment="mine") == 303
        people.close()
        for listener in listeners:
            listener.join(10)
            assert not listener.is_alive()

        assert heard["intruder"] == []
        assert [(m["call"]["id"], m["call"]["status"]) for m in heard["owner"]] == [
            (call["id"], "pending"),
            (call["id"], "approved"),
        ]
        # Still the owner's, decided by the approver alone.
        assert intruder.get(path).status_code == 404
        assert owner.get(path).json()["decision"]["comment"] == "mine"
        owner.close()
        intruder.close()


@pytest.mark.django_db
def test_an_approvers_session_does_not_open_the_agent_api(approver: User) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    _, token = agent_create("bot")
    call = Client(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        "/api/v1/calls",
        json.dumps({"tool": "pay", "arguments": HELD}),
        content_type="application/json",
    )
    assert call.status_code == 201
    session = Client()
    session.force_login(approver)
    path = f"/api/v1/calls/{call.json()['id']}"
    for response in (
        session.get("/api/v1/calls"),
        session.get(path),
        session.post(path + "/cancel"),
        session.post(
            "/api/v1/calls", json.dumps({"tool": "pay", "arguments": "{}"}), "application/json"
        ),
    ):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == "Bearer"
    assert Call.objects.get().status == "pending"


# --- token brute force ----------------------------------------------------------------------


def _guesses(real: str, count: int) -> list[str]:
    """``count`` tokens that are not ``real``: near misses of it first (every one-character
    change, truncations, extensions, case changes, its stored digest and shown prefix), then
    random tokens of its shape."""
    alphabet = string.ascii_letters + string.digits + "-_"
    near = {real[:-1], real + "A", real.upper(), real.lower(), real.swapcase(), real[:8], "cs_"}
    near.add(hashlib.sha256(real.encode()).hexdigest())
    for index in range(len(real)):
        replacement = (
            alphabet[(alphabet.index(real[index]) + 1) % len(alphabet)]
            if (real[index] in alphabet)
            else "A"
        )
        near.add(real[:index] + replacement + real[index + 1 :])
    near.discard(real)
    guesses = sorted(near)
    while len(guesses) < count:
        guesses.append("cs_" + secrets.token_urlsafe(32))
    return guesses[:count]


@pytest.mark.django_db
def test_a_thousand_guessed_tokens_all_get_401_and_none_authenticates() -> None:
    agent, _ = agent_create("target")
    real = agent_token_issue(agent=agent)
    guesses = _guesses(real, 1000)
    assert len(set(guesses)) == 1000
    audit_before = AuditEntry.objects.count()
    started = time.monotonic()
    client = Client()  # one client: each new one loads the middleware (and WhiteNoise) again
    body = json.dumps({"tool": "pay", "arguments": "{}"})
    for guess in guesses:
        headers = {"Authorization": f"Bearer {guess}"}
        for response in (
            client.get("/api/v1/calls", headers=headers),
            client.post("/api/v1/calls", body, "application/json", headers=headers),
        ):
            assert response.status_code == 401, guess
            assert response["WWW-Authenticate"] == "Bearer"
            assert response.json()["error"]["code"] == "unauthenticated"
    assert time.monotonic() - started < 60
    assert Call.objects.count() == 0
    assert AuditEntry.objects.count() == audit_before
    # No guess counted as a use of any token.
    assert list(AgentToken.objects.values_list("last_used_at", flat=True)) == [None, None]
    # The real token does work (so the 401s above are about the guesses).
    assert Client(HTTP_AUTHORIZATION=f"Bearer {real}").get("/api/v1/calls").status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_guessed_tokens_open_neither_the_long_poll_nor_the_sockets() -> None:
    def setup() -> tuple[str, str]:
        cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
        agent, _ = agent_create("target")
        real = agent_token_issue(agent=agent)
        response = Client(HTTP_AUTHORIZATION=f"Bearer {real}").post(
            "/api/v1/calls",
            json.dumps({"tool": "pay", "arguments": HELD}),
            content_type="application/json",
        )
        return real, response.json()["id"]

    real, call_id = await database_sync_to_async(setup)()
    guesses = _guesses(real, 100)
    for guess in guesses:
        answer = await asgi_response(
            application,
            "GET",
            f"/api/v1/calls/{call_id}/wait?timeout=0",
            headers=[(b"authorization", f"Bearer {guess}".encode())],
            timeout=5,
        )
        assert answer["status"] == 401, guess
        assert (b"www-authenticate", b"Bearer") in answer["headers"]
    for path in (f"/ws/v1/calls/{call_id}", "/ws/v1/agent"):
        for guess in guesses[:50]:
            socket = WebsocketCommunicator(
                application, path, headers=[(b"authorization", f"Bearer {guess}".encode())]
            )
            connected, _ = await socket.connect(timeout=5)
            assert connected
            assert await socket.receive_output(5) == {"type": "websocket.close", "code": 4401}
            await socket.disconnect()
    last_used = await database_sync_to_async(
        lambda: list(AgentToken.objects.values_list("last_used_at", flat=True))
    )()
    assert last_used.count(None) == 1  # the test's own agent_create token, never used
