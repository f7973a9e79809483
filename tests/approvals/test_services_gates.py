"""A gate that rules, budgets or held calls name keeps its name and stays (renaming or
deleting it would drop its group and quorum for them), in the services and in admin; a call
held at a gate that is gone anyway waits for a superuser. Requiring a passkey at a gate in
admin is audited."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from approvals.models import AuditEntry, Budget, CapRule, Gate
from approvals.services.decisions import NotEligible, call_decide
from approvals.services.gates import DEFAULT_GATE_STAYS, GateInUse, gate_delete, gate_save
from approvals.services.rules import budget_save, cap_rule_save
from approvals.web.call_page import call_page
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make

FINANCE_RULE = "big: pay arg=amount max USD 500 -> gate finance"
IN_USE = (
    "Gate 'finance' is named by {what}. Renaming or deleting it would drop its group and "
    "quorum for them: change those first."
)


@pytest.fixture
def finance(db: None) -> Gate:
    return gate_make(name="finance", group=Group.objects.create(name="finance"))


def renamed(gate: Gate, name: str) -> Gate:
    gate.name = name
    return gate


def test_a_gate_named_by_rules_is_neither_renamed_nor_deleted(finance: Gate) -> None:
    rule_make(line=FINANCE_RULE)
    rule_make(line="daily: pay arg=amount sum USD 900 per day -> gate finance", enabled=False)
    message = IN_USE.format(what="cap rules big, daily (disabled)")
    with pytest.raises(GateInUse, match=r"cap rules big, daily \(disabled\)") as refused:
        gate_save(gate=renamed(Gate.objects.get(pk=finance.pk), "treasury"))
    assert refused.value.message == message
    with pytest.raises(GateInUse) as refused:
        gate_delete(gate=Gate.objects.get(pk=finance.pk))
    assert refused.value.message == message
    stored = Gate.objects.get(pk=finance.pk)
    assert (stored.name, stored.group) == ("finance", finance.group)
    # Its other settings still change.
    stored.required_approvals = 2
    gate_save(gate=stored)
    assert Gate.objects.get(pk=finance.pk).required_approvals == 2


def test_budgets_and_held_calls_name_a_gate_too(finance: Gate) -> None:
    budget_save(budget=Budget(max_calls=1, action=Budget.Action.GATE, gate="finance"))
    with pytest.raises(GateInUse, match="budget for all agents"):
        gate_delete(gate=finance)
    Budget.objects.all().delete()
    rule_make(line=FINANCE_RULE)
    held = call_make(agent=agent_make(), arguments=payment("600.00"))
    assert held.gates == ["finance"]
    CapRule.objects.all().delete()
    with pytest.raises(GateInUse, match="1 held call"):
        gate_delete(gate=finance)


def test_a_gate_nothing_names_may_be_renamed_and_deleted(finance: Gate) -> None:
    gate_save(gate=renamed(finance, "treasury"))
    assert Gate.objects.filter(name="treasury").exists()
    gate_delete(gate=Gate.objects.get(name="treasury"))
    assert not Gate.objects.filter(pk=finance.pk).exists()


def test_the_default_gate_keeps_its_name(db: None) -> None:
    default = gate_make(name="")
    with pytest.raises(GateInUse, match=DEFAULT_GATE_STAYS):
        gate_save(gate=renamed(default, "ops"))
    with pytest.raises(GateInUse, match=DEFAULT_GATE_STAYS):
        gate_delete(gate=Gate.objects.get(name=""))
    assert Gate.objects.filter(name="").exists()


def test_admin_refuses_the_rename_with_the_rules_listed(
    admin_client: Client, finance: Gate
) -> None:
    rule_make(line=FINANCE_RULE)
    change = reverse("admin:approvals_gate_change", args=[finance.pk])
    response = admin_client.post(change, {"name": "treasury", "required_approvals": "1"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["name"] == [IN_USE.format(what="cap rule big")]
    assert Gate.objects.get(pk=finance.pk).name == "finance"


def test_requiring_a_passkey_in_admin_is_audited_both_ways(
    admin_client: Client, admin_user: User, finance: Gate
) -> None:
    change = reverse("admin:approvals_gate_change", args=[finance.pk])
    form = {"name": "finance", "group": str(finance.group_id), "required_approvals": "1"}
    seen: list[tuple[bool, bool]] = []
    for required in (True, False):
        response = admin_client.post(change, form | ({"require_passkey": "on"} if required else {}))
        assert response.status_code == 302
        assert Gate.objects.get(pk=finance.pk).require_passkey is required
        entry = AuditEntry.objects.order_by("-seq").first()
        assert entry is not None
        assert (entry.action, entry.object_type, entry.object_id, entry.user_id) == (
            AuditEntry.Action.ADMIN_CHANGE,
            AuditEntry.ObjectType.GATE,
            str(finance.pk),
            admin_user.pk,
        )
        before, after = (json.loads(side)[0]["fields"] for side in (entry.before, entry.after))
        assert {name for name in after if after[name] != before[name]} == {"require_passkey"}
        seen.append((before["require_passkey"], after["require_passkey"]))
    assert seen == [(False, True), (True, False)]


def test_admin_refuses_the_delete_with_the_rules_listed(
    admin_client: Client, finance: Gate
) -> None:
    rule_make(line=FINANCE_RULE)
    delete = reverse("admin:approvals_gate_delete", args=[finance.pk])
    page = admin_client.get(delete)
    assert IN_USE.format(what="cap rule big").replace("'", "&#x27;") in page.content.decode()
    assert page.context["protected"]
    response = admin_client.post(delete, {"post": "yes"})
    assert response.status_code == 200
    assert Gate.objects.filter(pk=finance.pk).exists()


def test_a_call_held_at_a_gate_that_is_gone_waits_for_a_superuser(finance: Gate) -> None:
    cap_rule_save(line=FINANCE_RULE)
    call = call_make(agent=agent_make(), arguments=payment("600.00"))
    Gate.objects.filter(pk=finance.pk).delete()  # behind the services' back
    assert finance.group is not None
    member = user_make(username="fiona", groups=[finance.group])
    for user in (member, user_make(username="anyone")):
        with pytest.raises(NotEligible):
            call_decide(
                call_id=call.pk,
                user=user,
                approve=True,
                comment="",
                arguments_sha256=call.arguments_sha256,
            )
    admin = user_make(username="root", superuser=True)
    page = call_page(call_id=call.pk, user=admin)
    assert page is not None
    assert [(gate.name, gate.missing) for gate in page.gates] == [("finance", True)]
    assert page.may_decide
    client = Client()
    client.force_login(admin)
    html = client.get(f"/calls/{call.pk}/").content.decode()
    assert "<strong>no such gate</strong>: only a superuser may decide" in html
    approved = call_decide(
        call_id=call.pk,
        user=admin,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
    )
    assert approved.status == "approved"


def test_the_default_gate_without_its_row_still_lets_deciders_decide(db: None) -> None:
    Gate.objects.filter(name="").delete()
    call = call_make(agent=agent_make(mode="prompt"), arguments=payment("1.00"))
    assert call.gates == [""]
    approved = call_decide(
        call_id=call.pk,
        user=user_make(username="anyone"),
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
    )
    assert approved.status == "approved"
