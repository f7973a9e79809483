"""Edit, then approve: call_decide with edited arguments — evaluated again by every policy,
refused or kept from a gate without changing anything, or standing with the ledgers, the
approvals and the call state of the edited version."""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection

from approvals import errors
from approvals.models import Agent, Approval, AuditEntry, Budget, Call, LedgerEntry, RunCounter
from approvals.selectors.calls import call_state
from approvals.services.decisions import (
    EDIT_NOT_ELIGIBLE,
    EDIT_NOT_STRICT,
    EDIT_REFUSED,
    BadArguments,
    Conflict,
    DecisionConflict,
    EditNotEligible,
    EditRefused,
    call_decide,
)
from capcore.strictjson import DUPLICATE_NAME, NOT_AN_OBJECT
from tests.factories import call_make, gate_make, payment, rule_make, user_make


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def held(amount: str = "600.00", *, run_id: str = "") -> Call:
    agent, _ = Agent.objects.get_or_create(
        name="bot", defaults={"principal": "carol", "mode": "danger_full_access"}
    )
    call = call_make(agent=agent, arguments=payment(amount), run_id=run_id)
    assert call.status == "pending"
    return call


def edit(
    call: Call, user: User, arguments: str | None, *, shown: str | None = None, comment: str = ""
) -> Call:
    """``user`` approves ``call`` with ``arguments``, having been shown the version ``shown``
    (by default the call's current one, read again)."""
    if shown is None:
        shown = Call.objects.get(pk=call.pk).arguments_sha256
    return call_decide(
        call_id=call.pk,
        user=user,
        approve=True,
        comment=comment,
        arguments_sha256=shown,
        arguments=arguments,
    )


def unchanged(call: Call) -> None:
    """Nothing an edit would change has changed."""
    now = Call.objects.get(pk=call.pk)
    assert (now.status, now.arguments, now.arguments_sha256) == (
        "pending",
        call.arguments,
        call.arguments_sha256,
    )
    assert (now.original_arguments, now.original_arguments_sha256) == ("", "")
    assert (now.gates, now.reasons, now.pending_records) == (
        call.gates,
        call.reasons,
        call.pending_records,
    )
    assert not Approval.objects.filter(call=call).exists()
    assert not LedgerEntry.objects.filter(call=call).exists()
    assert not AuditEntry.objects.filter(action=AuditEntry.Action.CALL_EDITED).exists()


def minors(call: Call) -> list[int]:
    return list(LedgerEntry.objects.filter(call=call).values_list("minor", flat=True))


@pytest.fixture
def capped(db: None) -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="spend: pay arg=amount sum USD 10000.00 -> gate")


def test_an_edit_under_the_cap_is_approved_at_once_with_the_edited_amount(capped: None) -> None:
    call = held("600.00")
    original = call.arguments
    alice = user_make(username="alice")
    edited_text = '{"amount": "400.00", "memo": "paid in part"}'
    approved = edit(call, alice, edited_text, comment="400 for now")
    assert approved.status == "approved"
    assert approved.decided_by == alice
    assert minors(call) == [40000]
    stored = Call.objects.get(pk=call.pk)
    assert stored.arguments == edited_text
    assert stored.arguments_sha256 == digest(edited_text)
    assert (stored.original_arguments, stored.original_arguments_sha256) == (
        original,
        digest(original),
    )
    assert stored.reasons == []
    state = call_state(stored)
    assert state["status"] == "approved"
    assert state["arguments"] == edited_text
    assert state["arguments_sha256"] == digest(edited_text)
    assert state["edited"] is True
    assert state["original_arguments_sha256"] == digest(original)
    assert state["approvals"] == [{"by": "alice", "at": state["approvals"][0]["at"]}]
    (approval,) = Approval.objects.filter(call=call)
    assert approval.arguments_sha256 == digest(edited_text)
    (entry,) = AuditEntry.objects.filter(action=AuditEntry.Action.CALL_EDITED)
    assert entry.user == alice
    assert entry.object_id == str(call.pk)
    assert json.loads(entry.before) == {"arguments": original, "arguments_sha256": digest(original)}
    after = json.loads(entry.after)
    assert (after["arguments"], after["arguments_sha256"]) == (edited_text, digest(edited_text))
    assert AuditEntry.objects.filter(
        action=AuditEntry.Action.CALL_APPROVED, object_id=str(call.pk), user=alice
    ).exists()


def test_the_same_text_is_an_ordinary_approval(capped: None) -> None:
    call = held("600.00")
    approved = edit(call, user_make(username="alice"), call.arguments)
    assert approved.status == "approved"
    assert minors(call) == [60000]
    state = call_state(Call.objects.get(pk=call.pk))
    assert (state["edited"], state["arguments"], state["original_arguments_sha256"]) == (
        False,
        None,
        None,
    )
    assert not AuditEntry.objects.filter(action=AuditEntry.Action.CALL_EDITED).exists()


def test_an_edit_a_rule_refuses_is_a_conflict_naming_the_rule_and_changes_nothing(db: None) -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="huge: pay arg=amount max USD 1000.00 -> refuse")
    call = held("600.00")
    with pytest.raises(EditRefused) as refused:
        edit(call, user_make(username="alice"), payment("2000.00"))
    assert isinstance(refused.value, errors.Conflict)
    assert str(refused.value) == EDIT_REFUSED.format(rules="cap rule huge")
    assert "2000" not in str(refused.value)
    unchanged(call)


@pytest.mark.parametrize(
    ("text", "category"),
    [('{"amount": "1", "amount": "2"}', DUPLICATE_NAME), ('["amount", "1"]', NOT_AN_OBJECT)],
)
def test_an_edit_that_is_not_a_strict_json_object_is_invalid_and_changes_nothing(
    capped: None, text: str, category: str
) -> None:
    call = held("600.00")
    with pytest.raises(BadArguments) as bad:
        edit(call, user_make(username="alice"), text)
    assert isinstance(bad.value, errors.Invalid)
    assert str(bad.value) == EDIT_NOT_STRICT.format(category=category)
    unchanged(call)


def test_an_edit_held_at_a_gate_the_editor_is_not_in_is_not_permitted(db: None) -> None:
    treasury = Group.objects.create(name="treasury")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="vast: pay arg=amount max USD 5000.00 -> gate treasury")
    gate_make(name="treasury", group=treasury)
    call = held("600.00")
    with pytest.raises(EditNotEligible) as kept_out:
        edit(call, user_make(username="alice"), payment("6000.00"))
    assert isinstance(kept_out.value, errors.NotPermitted)
    assert str(kept_out.value) == EDIT_NOT_ELIGIBLE.format(gates="the default gate, gate treasury")
    unchanged(call)
    # A member of both gates may make the same edit.
    approved = edit(call, user_make(username="trent", groups=[treasury]), payment("6000.00"))
    assert approved.status == "approved"
    assert Call.objects.get(pk=call.pk).gates == ["", "treasury"]


def test_two_of_two_the_edit_voids_earlier_approvals_and_binds_the_new_digest(db: None) -> None:
    finance = Group.objects.create(name="finance")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate finance")
    rule_make(line="spend: pay arg=amount sum USD 10000.00 -> gate finance")
    gate_make(name="finance", group=finance, required_approvals=2)
    call = held("600.00")
    first_digest = call.arguments_sha256
    alice, bob, dave = (user_make(username=n, groups=[finance]) for n in ("alice", "bob", "dave"))
    assert edit(call, alice, None).status == "pending"  # an ordinary approval of the original

    assert edit(call, bob, payment("550.00")).status == "pending"
    stored = Call.objects.get(pk=call.pk)
    assert stored.arguments_sha256 == digest(payment("550.00"))
    assert stored.expires_at == call.expires_at  # the deadline stays
    assert stored.gates == ["finance"]
    state = call_state(stored)
    assert [a["by"] for a in state["approvals"]] == ["bob"]
    voided = Approval.objects.get(call=call, user=alice)
    assert voided.voided_at is not None
    assert voided.arguments_sha256 == first_digest

    # Approving what was shown before the edit changes nothing.
    with pytest.raises(DecisionConflict, match=Conflict.STALE.value):
        edit(call, alice, None, shown=first_digest)
    # Editing it again keeps the agent's original.
    assert edit(call, dave, payment("520.00")).status == "pending"
    stored = Call.objects.get(pk=call.pk)
    assert stored.original_arguments == call.arguments
    assert stored.original_arguments_sha256 == first_digest
    assert [a["by"] for a in call_state(stored)["approvals"]] == ["dave"]

    approved = edit(call, alice, None, comment="fine")
    assert approved.status == "approved"
    assert minors(call) == [52000]
    assert [
        (a.user.username, a.arguments_sha256, a.voided_at is None)
        for a in Approval.objects.filter(call=call).order_by("created_at", "pk")
    ] == [
        ("alice", first_digest, False),
        ("bob", digest(payment("550.00")), False),
        ("dave", digest(payment("520.00")), True),
        ("alice", digest(payment("520.00")), True),
    ]
    # Each approval that left the call waiting, the edits' own included, is recorded as such.
    decisions = AuditEntry.objects.filter(object_id=str(call.pk), user__isnull=False).exclude(
        action=AuditEntry.Action.CALL_EDITED
    )
    assert list(decisions.order_by("pk").values_list("username", "action", "after")) == [
        ("alice", "call pending", "approval recorded (1 of 2)"),
        ("bob", "call pending", "approval recorded (1 of 2)"),
        ("dave", "call pending", "approval recorded (1 of 2)"),
        ("alice", "call approved", "fine"),
    ]


def test_an_edit_does_not_count_the_call_again_in_its_run(capped: None) -> None:
    Budget.objects.create(max_calls=1, action=Budget.Action.REFUSE)
    call = held("600.00", run_id="run-1")
    assert edit(call, user_make(username="alice"), payment("100.00")).status == "approved"
    assert RunCounter.objects.get(key="run-1").calls == 1
    # A second call in the run is over the ceiling, as it always was.
    assert call_make(agent=call.agent, arguments=payment("1"), run_id="run-1").status == ("refused")


@pytest.mark.django_db(transaction=True)
def test_an_edit_and_another_approval_at_once_produce_one_outcome() -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="spend: pay arg=amount sum USD 10000.00 -> gate")
    call = held("600.00")
    alice, bob = user_make(username="alice"), user_make(username="bob")
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def click(user: User, arguments: str | None) -> None:
        try:
            start.wait()
            decided = call_decide(
                call_id=call.pk,
                user=user,
                approve=True,
                comment="",
                arguments_sha256=call.arguments_sha256,
                arguments=arguments,
            )
            outcomes.append(decided.status)
        except DecisionConflict as conflict:
            outcomes.append(str(conflict))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=click, args=(alice, payment("400.00"))),
        threading.Thread(target=click, args=(bob, None)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    final = Call.objects.get(pk=call.pk)
    assert final.status == "approved"
    assert sorted(outcomes) == sorted(["approved", Conflict.FINAL.value])
    winner: Any = final.decided_by
    assert Approval.objects.filter(call=call).count() == 1
    if winner == alice:
        assert (final.arguments, minors(call)) == (payment("400.00"), [40000])
    else:
        assert (final.arguments, minors(call)) == (payment("600.00"), [60000])
