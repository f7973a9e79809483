"""The live-server helper itself: a real server process on the test database."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from tests.factories import agent_with_token, rule_make, user_make
from tests.live import Approver, live_server

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_call_held_over_http_is_approved_through_the_forms() -> None:
    agent_with_token(token="cs_live")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    user_make(username="alice")
    with live_server() as server:
        agent_http = httpx.Client(base_url=server.url, headers={"Authorization": "Bearer cs_live"})
        held = agent_http.post(
            "/api/v1/calls", json={"tool": "pay", "arguments": '{"amount": "600"}'}
        )
        assert held.json()["status"] == "pending"
        approver = Approver(server, "alice", "pw")
        assert approver.decide(held.json()["id"], approve=True, comment="fine") == 303
        state = agent_http.get(f"/api/v1/calls/{held.json()['id']}/wait?timeout=5").json()
        assert (state["status"], state["decision"]["comment"]) == ("approved", "fine")


def test_an_http_1_0_client_reads_a_long_poll_answer_to_its_end() -> None:
    """A bare HTTP/1.0 waiter (no chunked encoding) reads the whole state: the long-poll's
    raw answer states its length."""
    agent_with_token(token="cs_live")
    with live_server() as server:
        call = httpx.post(
            f"{server.url}/api/v1/calls",
            headers={"Authorization": "Bearer cs_live"},
            json={"tool": "read", "arguments": "{}"},
        ).json()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as waiter:
            waiter.sendall(
                f"GET /api/v1/calls/{call['id']}/wait?timeout=0 HTTP/1.0\r\n"
                "Host: 127.0.0.1\r\nAuthorization: Bearer cs_live\r\n\r\n".encode()
            )
            answer = b""
            while chunk := waiter.recv(65536):
                answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert f"content-length: {len(body)}".encode() in head.lower()
    assert json.loads(body)["id"] == call["id"]
