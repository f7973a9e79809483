"""The live-server helper itself: a real server process on the test database."""

from __future__ import annotations

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
