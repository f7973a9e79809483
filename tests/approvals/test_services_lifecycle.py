"""Cancel, expire and extend: the ways a held call ends or waits longer without a decision."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from approvals.models import Agent, AuditEntry, Call
from approvals.services.lifecycle import (
    CANCELLED_COMMENT,
    EXPIRED_COMMENT,
    AlreadyFinal,
    call_cancel,
    call_extend,
    calls_expire_due,
)
from tests.factories import agent_make, call_make, payment, rule_make, user_make


def held(agent: Agent) -> Call:
    call = call_make(agent=agent, arguments=payment("600.00"))
    assert call.status == "pending"
    return call


@pytest.fixture
def agent(db: None) -> Agent:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    return agent_make()


def test_cancel_ends_a_pending_call_once(agent: Agent) -> None:
    call = held(agent)
    cancelled = call_cancel(agent=agent, call_id=call.pk)
    assert cancelled is not None
    assert (cancelled.status, cancelled.decision_comment) == ("cancelled", CANCELLED_COMMENT)
    with pytest.raises(AlreadyFinal):
        call_cancel(agent=agent, call_id=call.pk)


def test_cancel_of_another_agents_call_finds_nothing(agent: Agent) -> None:
    call = held(agent)
    other = agent_make(name="other", principal="x")
    assert call_cancel(agent=other, call_id=call.pk) is None
    assert Call.objects.get(pk=call.pk).status == "pending"


def test_expiry_with_an_injected_clock(agent: Agent) -> None:
    call, later = held(agent), held(agent)
    assert call.expires_at is not None
    Call.objects.filter(pk=later.pk).update(expires_at=call.expires_at + timedelta(hours=1))
    assert calls_expire_due(now=call.expires_at - timedelta(seconds=1)) == 0
    assert calls_expire_due(now=call.expires_at) == 1
    expired = Call.objects.get(pk=call.pk)
    assert (expired.status, expired.decision_comment) == ("expired", EXPIRED_COMMENT)
    assert Call.objects.get(pk=later.pk).status == "pending"
    assert calls_expire_due(now=call.expires_at) == 0


def test_a_call_past_its_deadline_cannot_be_cancelled(agent: Agent) -> None:
    call = held(agent)
    assert call.expires_at is not None
    with pytest.raises(AlreadyFinal):
        call_cancel(agent=agent, call_id=call.pk, now=call.expires_at)


def test_extend_adds_the_smallest_gate_timeout_once(agent: Agent) -> None:
    call = held(agent)
    user = user_make(username="alice", decide=False)
    assert call.expires_at is not None
    extended = call_extend(call_id=call.pk, user=user)
    assert extended.expires_at == call.expires_at + timedelta(seconds=3600)
    with pytest.raises(AlreadyFinal):
        call_extend(call_id=call.pk, user=user)


@pytest.mark.django_db(transaction=True)
def test_sweeps_racing_on_several_workers_expire_each_call_once() -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_make()
    calls = [held(agent) for _ in range(20)]
    Call.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    counts: list[int] = []
    start = threading.Barrier(4)

    def sweep() -> None:
        try:
            start.wait()
            counts.append(calls_expire_due())
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(counts) == len(calls)
    assert Call.objects.filter(status="expired").count() == len(calls)
    assert AuditEntry.objects.filter(action="call expired").count() == len(calls)
