"""hold_seconds: a held call waits the smallest timeout of its gates, the default for a gate
that has none."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Agent, Call
from approvals.selectors.gates import hold_seconds
from approvals.services.calls import Submission, call_submit
from approvals.services.rules import cap_rule_save
from tests.factories import agent_make, gate_make


@pytest.fixture
def agent(db: None) -> Agent:
    cap_rule_save(line="big: pay arg=amount max USD 100.00 -> gate finance")
    cap_rule_save(line="huge: pay arg=amount max USD 1000.00 -> gate treasury")
    return agent_make(principal="user-1")


def held(agent: Agent, amount: str) -> Call:
    call, _ = call_submit(
        agent=agent,
        submission=Submission(
            tool="pay", arguments=f'{{"amount": "{amount}"}}', principal="user-1"
        ),
    )
    assert call.status == Call.Status.PENDING
    return call


def test_a_call_held_at_two_gates_waits_the_smaller_timeout(agent: Agent) -> None:
    gate_make(name="finance", timeout_seconds=600)
    gate_make(name="treasury", timeout_seconds=60)
    call = held(agent, "5000.00")
    assert sorted(call.gates) == ["finance", "treasury"]
    assert call.expires_at == call.created_at + timedelta(seconds=60)


def test_a_gate_without_a_timeout_waits_the_default(agent: Agent) -> None:
    gate_make(name="treasury", timeout_seconds=settings.COUNTERSIGN_HOLD_TIMEOUT + 1)
    call = held(agent, "5000.00")
    assert call.expires_at == call.created_at + timedelta(seconds=settings.COUNTERSIGN_HOLD_TIMEOUT)
    assert hold_seconds(gates=["treasury"]) == settings.COUNTERSIGN_HOLD_TIMEOUT + 1


def test_a_gate_nobody_configured_or_no_gate_waits_the_default(db: None) -> None:
    gate_make(name="finance", timeout_seconds=60)
    assert hold_seconds(gates=["nobody-made-this"]) == settings.COUNTERSIGN_HOLD_TIMEOUT
    assert hold_seconds(gates=[]) == settings.COUNTERSIGN_HOLD_TIMEOUT
    assert hold_seconds(gates=["nobody-made-this", "finance"]) == 60


def test_a_held_submission_reads_no_approvals_and_its_gates_timeouts_once(
    agent: Agent,
) -> None:
    """A new call has no approvals to read for its push; its gates' timeouts are one
    statement."""
    gate_make(name="finance", timeout_seconds=600)
    with CaptureQueriesContext(connection) as captured:
        held(agent, "500.00")
    statements = [query["sql"] for query in captured]
    assert not [text for text in statements if "approvals_approval" in text]
    reading_gates = [text for text in statements if 'FROM "approvals_gate"' in text]
    assert len(reading_gates) == 1
    assert '"timeout_seconds"' in reading_gates[0]
