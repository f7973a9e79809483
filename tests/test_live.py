"""The live-server helper itself: a real daphne process on the test database."""

from __future__ import annotations

import hashlib

import httpx
import pytest
from django.contrib.auth.models import Permission, User

from approvals.models import Agent, AgentToken
from approvals.services.rules import cap_rule_save
from tests.live import Approver, live_server

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_call_held_over_http_is_approved_through_the_forms() -> None:
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    AgentToken.objects.create(
        agent=agent, digest=hashlib.sha256(b"cs_live").hexdigest(), prefix="cs_live"
    )
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    alice = User.objects.create_user("alice", password="pw")
    alice.user_permissions.add(Permission.objects.get(codename="decide_call"))
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
