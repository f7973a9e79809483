"""call_decide: eligibility, quorum, deny wins, digests, scopes, and racing approvers."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection

from approvals.models import Agent, Call, LedgerEntry, PermissionRule
from approvals.realtime import pushes
from approvals.services.decisions import (
    DEFAULT_DENY_COMMENT,
    BadScope,
    Conflict,
    DecisionConflict,
    NotEligible,
    call_decide,
)
from tests.factories import call_make, gate_make, payment, rule_make, user_make


def held_call(
    *, mode: str = "danger_full_access", tool: str = "pay", amount: str = "600.00"
) -> Call:
    agent, _ = Agent.objects.get_or_create(
        name="bot", defaults={"principal": "carol", "mode": mode}
    )
    call = call_make(agent=agent, tool=tool, arguments=payment(amount))
    assert call.status == "pending"
    return call


def decide(
    call: Call, user: User, *, approve: bool = True, comment: str = "", scope: str = "once"
) -> Call:
    return call_decide(
        call_id=call.pk,
        user=user,
        approve=approve,
        comment=comment,
        arguments_sha256=call.arguments_sha256,
        scope=scope,
    )


@pytest.fixture
def two_approval_gate(db: None) -> Group:
    finance = Group.objects.create(name="finance")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate finance")
    rule_make(line="spend: pay arg=amount sum USD 10000.00 -> gate finance")
    gate_make(name="finance", group=finance, required_approvals=2)
    return finance


def test_two_approvals_from_distinct_users_approve_and_record(two_approval_gate: Group) -> None:
    call = held_call()
    alice = user_make(username="alice", groups=[two_approval_gate])
    bob = user_make(username="bob", groups=[two_approval_gate])
    assert decide(call, alice, comment="ok").status == "pending"
    with pytest.raises(DecisionConflict, match=Conflict.SECOND.value):
        decide(call, alice)
    approved = decide(call, bob, comment="paid")
    assert approved.status == "approved"
    assert approved.decided_by == bob
    assert approved.decision_comment == "paid"
    assert list(LedgerEntry.objects.filter(call=call).values_list("minor", flat=True)) == [60000]


def test_one_deny_denies_with_the_default_advice(two_approval_gate: Group) -> None:
    call = held_call()
    decide(call, user_make(username="alice", groups=[two_approval_gate]))
    denied = decide(call, user_make(username="bob", groups=[two_approval_gate]), approve=False)
    assert denied.status == "denied"
    assert denied.decision_comment == DEFAULT_DENY_COMMENT
    assert not LedgerEntry.objects.filter(call=call).exists()


def test_users_outside_the_gate_group_or_without_permission_may_not_decide(
    two_approval_gate: Group,
) -> None:
    call = held_call()
    with pytest.raises(NotEligible):
        decide(call, user_make(username="mallory"))
    with pytest.raises(NotEligible):
        decide(call, user_make(username="nobody", decide=False))
    assert Call.objects.get(pk=call.pk).approvals.count() == 0


def test_nobody_approves_their_own_request(two_approval_gate: Group) -> None:
    call = held_call()
    with pytest.raises(NotEligible):
        decide(call, user_make(username="carol", groups=[two_approval_gate]))


def test_a_stale_digest_changes_nothing(two_approval_gate: Group) -> None:
    call = held_call()
    with pytest.raises(DecisionConflict, match=Conflict.STALE.value):
        call_decide(
            call_id=call.pk,
            user=user_make(username="alice", groups=[two_approval_gate]),
            approve=True,
            comment="",
            arguments_sha256="0" * 64,
        )
    assert Call.objects.get(pk=call.pk).approvals.count() == 0


def test_cap_holds_accept_only_scope_once(two_approval_gate: Group) -> None:
    call = held_call()
    with pytest.raises(BadScope):
        decide(call, user_make(username="alice", groups=[two_approval_gate]), scope="run")
    with pytest.raises(BadScope):
        decide(call, user_make(username="bob", groups=[two_approval_gate]), scope="forever")


def test_mode_hold_approved_for_the_run_creates_a_run_scoped_allow_rule(db: None) -> None:
    call = held_call(mode="default", tool="transfer_funds", amount="1")
    decide(call, user_make(username="alice"), scope="run")
    rule = PermissionRule.objects.get()
    assert (rule.pattern, rule.decision, rule.run_id) == ("transfer_funds", "allow", "")


@pytest.mark.django_db(transaction=True)
def test_two_approvers_at_once_produce_one_outcome_and_one_notification(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    call = held_call()
    pushed: list[str] = []

    def record(pushes: list[pushes.Push]) -> None:
        pushed.extend(message["call"]["status"] for _, message in pushes)

    monkeypatch.setattr(pushes, "_send_now", record)
    users = [user_make(username="alice"), user_make(username="bob")]
    outcomes: list[str] = []
    start = threading.Barrier(2)

    def click(user: User) -> None:
        try:
            start.wait()
            outcomes.append(decide(call, user, approve=user.username == "alice").status)
        except DecisionConflict as conflict:
            outcomes.append(str(conflict))
        finally:
            connection.close()

    threads = [threading.Thread(target=click, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    final = Call.objects.get(pk=call.pk)
    assert final.status in {"approved", "denied"}
    assert sorted(outcomes) == sorted([final.status, Conflict.FINAL.value])
    assert final.approvals.count() == 1
    assert pushed == [final.status]
