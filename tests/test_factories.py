"""The shared factories make what the application would: tokens that authenticate, people
with the permissions asked for, gates as set, rules and calls through the services."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from approvals.models import AgentToken, AuditEntry, Gate
from approvals.services.agents import agent_authenticate
from tests.factories import (
    agent_make,
    agent_with_token,
    call_make,
    gate_make,
    payment,
    rule_make,
    token_make,
    user_make,
)

pytestmark = pytest.mark.django_db


def test_an_agent_has_the_shared_defaults() -> None:
    agent = agent_make()
    assert (agent.name, agent.principal, agent.mode, agent.allowed_principals, agent.active) == (
        "bot",
        "carol",
        "danger_full_access",
        "",
        True,
    )


def test_an_issued_token_authenticates_and_is_audited() -> None:
    agent, token = agent_with_token(mode="prompt", allowed_principals="team-*")
    assert agent_authenticate(token=token) == agent
    assert agent.mode == "prompt"
    assert AuditEntry.objects.filter(action="token issued").count() == 1


def test_a_known_token_is_stored_as_the_service_stores_one() -> None:
    agent = agent_make()
    assert token_make(agent=agent, token="cs_known-token") == "cs_known-token"
    assert agent_authenticate(token="cs_known-token") == agent
    assert AgentToken.objects.get().prefix == "cs_known"
    assert not AuditEntry.objects.filter(action="token issued").exists()


def test_a_person_holds_exactly_the_permissions_asked_for() -> None:
    finance = Group.objects.create(name="finance")
    decider = user_make(username="alice", groups=[finance])
    viewer = user_make(username="victor", decide=False, view=True)
    assert decider.has_perm("approvals.decide_call")
    assert not decider.has_perm("approvals.view_call")
    assert list(decider.groups.all()) == [finance]
    assert decider.check_password("pw")
    assert viewer.has_perm("approvals.view_call")
    assert not viewer.has_perm("approvals.decide_call")
    assert user_make(username="root", superuser=True).is_superuser


def test_a_gate_is_set_as_asked_whether_or_not_a_rule_made_it() -> None:
    rule_make(line="wire: wire arg=amount max USD 100.00 -> gate treasury")
    treasury = Group.objects.create(name="treasury")
    gate = gate_make(name="treasury", group=treasury, required_approvals=2)
    assert (gate.group, gate.required_approvals) == (treasury, 2)
    assert gate_make(name="legal").required_approvals == 1
    assert set(Gate.objects.values_list("name", flat=True)) == {"", "treasury", "legal"}


def test_calls_get_the_rules_verdict() -> None:
    rule = rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    assert rule.enabled
    agent = agent_make()
    assert call_make(agent=agent, arguments=payment("600.00")).status == "pending"
    small = call_make(agent=agent, arguments=payment("20.00"), run_id="r1")
    assert (small.status, small.principal, small.run_id) == ("allowed", "carol", "r1")
    assert payment("20.00") == '{"amount": "20.00"}'
    assert not rule_make(line="off: pay arg=amount max USD 1.00 -> refuse", enabled=False).enabled
