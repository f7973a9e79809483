"""Shadow rules (docs/rules.md, "Shadow rules"): evaluated and recorded on every call, never
enforced. A call a shadow rule would have held or refused goes ahead as the enforced rules
say; its state, page and history name the shadow rule; a shadow ``sum`` rule keeps ledgers of
its own, recorded for the calls that went ahead."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db.models import Sum
from django.test import Client
from django.urls import reverse

import capcore.engine
from approvals.models import (
    AuditEntry,
    Call,
    CapRule,
    Ledger,
    LedgerEntry,
    LedgerReservation,
)
from approvals.selectors.calls import call_state
from approvals.services.decisions import call_decide
from approvals.services.rules import cap_rule_save, rules_export, rules_import
from approvals.services.statements import policy_stamp_read
from capcore.caps import CapAssessment, CapResult, LedgerKey, evaluate_caps
from tests.factories import (
    agent_make,
    agent_with_token,
    call_make,
    gate_make,
    payment,
    rule_make,
    user_make,
)

SHADOW_BIG = "shadow big: pay arg=amount max USD 100.00 -> gate"
SHADOW_DAILY = "shadow daily: pay arg=amount sum USD 1000.00 per day -> refuse"
DAILY_SPEND = "daily-spend: pay arg=amount sum USD 2000.00 per day -> gate finance"
HUGE = "huge: pay arg=amount max USD 5000.00 -> refuse"
LARGE = "large: pay arg=amount max USD 700.00 -> gate finance"


def recorded(rule: str) -> int:
    entries = LedgerEntry.objects.filter(ledger__rule=rule, voided_at__isnull=True)
    return entries.aggregate(total=Sum("minor"))["total"] or 0


def reserved(rule: str) -> int:
    rows = LedgerReservation.objects.filter(ledger__rule=rule)
    return rows.aggregate(total=Sum("minor"))["total"] or 0


def shadow_rules(call: Call) -> list[tuple[str, str]]:
    return [(reason["rule"], reason["action"]) for reason in call_state(call)["shadow"]]


@pytest.fixture
def finance(db: None) -> Group:
    group = Group.objects.create(name="finance")
    gate_make(name="finance", group=group)
    return group


def test_a_shadow_cap_over_its_limit_never_holds_the_call(db: None) -> None:
    rule_make(line=SHADOW_BIG)
    call = call_make(agent=agent_make(), arguments=payment("500.00"))
    assert call.status == "allowed"
    state = call_state(Call.objects.get(pk=call.pk))
    assert (state["status"], state["reasons"], state["gates"]) == ("allowed", [], [])
    (reason,) = state["shadow"]
    assert reason == {
        "policy": "cap",
        "rule": "big",
        "action": "gate",
        "gate": "",
        "message": "USD 500.00 is over the limit of USD 100.00 per call",
    }
    assert AuditEntry.objects.filter(action="call allowed").count() == 1
    assert not LedgerEntry.objects.exists()


def test_a_call_within_every_shadow_rule_has_no_shadow_reasons(db: None) -> None:
    rule_make(line=SHADOW_BIG)
    call = call_make(agent=agent_make(), arguments=payment("50.00"))
    assert (call.status, call_state(call)["shadow"]) == ("allowed", [])


def test_a_shadow_sum_rule_keeps_its_own_ledger_for_allowed_calls(finance: Group) -> None:
    rule_make(line=SHADOW_DAILY)
    rule_make(line=DAILY_SPEND)
    agent = agent_make()
    calls = [call_make(agent=agent, arguments=payment("450.00")) for _ in range(3)]
    assert [call.status for call in calls] == ["allowed"] * 3
    # The third takes the shadow total to USD 1,350: it would have been refused.
    assert [shadow_rules(call) for call in calls] == [[], [], [("daily", "refuse")]]
    assert recorded("shadow daily") == 135000
    assert recorded("daily-spend") == 135000
    assert set(Ledger.objects.values_list("rule", flat=True)) == {"daily-spend", "shadow daily"}


def test_enforced_ledgers_and_verdicts_are_as_without_the_shadow_rule(finance: Group) -> None:
    """USD 900 three times under a USD 2,000 daily cap: allowed, allowed, held, as the cap
    alone says, with stricter shadow rules beside it."""
    rule_make(line=DAILY_SPEND)
    rule_make(line=SHADOW_DAILY)
    rule_make(line="shadow tiny: pay arg=amount sum USD 1.00 per day -> gate finance")
    agent = agent_make()
    calls = [call_make(agent=agent, arguments=payment("900.00")) for _ in range(3)]
    assert [call.status for call in calls] == ["allowed", "allowed", "pending"]
    assert [call.gates for call in calls] == [[], [], ["finance"]]
    assert [reason["rule"] for reason in calls[2].reasons] == ["daily-spend"]
    assert recorded("daily-spend") == 180000
    assert reserved("daily-spend") == 90000
    assert LedgerReservation.objects.get(call=calls[2], ledger__rule="daily-spend").held_for_rule
    # Every call over the tiny shadow cap; the shadow ledgers record the two that went ahead.
    assert [("tiny", "gate") in shadow_rules(call) for call in calls] == [True] * 3
    assert recorded("shadow tiny") == 180000
    assert reserved("shadow tiny") == 90000


def test_a_refused_call_records_nothing_in_the_shadow_ledger(db: None) -> None:
    rule_make(line=SHADOW_DAILY)
    rule_make(line=HUGE)
    call = call_make(agent=agent_make(), arguments=payment("6000.00"))
    assert call.status == "refused"
    assert shadow_rules(call) == [("daily", "refuse")]
    assert recorded("shadow daily") == 0
    assert not LedgerReservation.objects.exists()


def test_a_held_call_records_in_the_shadow_ledger_when_approved(finance: Group) -> None:
    rule_make(line=SHADOW_DAILY)
    rule_make(line=LARGE)
    agent = agent_make()
    call = call_make(agent=agent, arguments=payment("800.00"))
    assert (call.status, call.gates) == ("pending", ["finance"])
    assert [reason["rule"] for reason in call.reasons] == ["large"]
    assert reserved("shadow daily") == 80000
    assert recorded("shadow daily") == 0
    fran = user_make(username="fran", groups=[finance])
    decided = call_decide(
        call_id=call.pk,
        user=fran,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
    )
    assert decided.status == "approved"
    assert recorded("shadow daily") == 80000
    assert reserved("shadow daily") == 0


def test_a_denied_call_records_nothing_in_the_shadow_ledger(finance: Group) -> None:
    rule_make(line=SHADOW_DAILY)
    rule_make(line=LARGE)
    call = call_make(agent=agent_make(), arguments=payment("800.00"))
    fran = user_make(username="fran", groups=[finance])
    decided = call_decide(
        call_id=call.pk,
        user=fran,
        approve=False,
        comment="no",
        arguments_sha256=call.arguments_sha256,
    )
    assert decided.status == "denied"
    assert recorded("shadow daily") == 0
    assert reserved("shadow daily") == 0


def test_a_shadow_rule_that_fails_is_left_out_and_logged(
    db: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rule_make(line=SHADOW_DAILY)

    def failing(
        assessments: Sequence[CapAssessment], *, spent: Mapping[LedgerKey, int]
    ) -> CapResult:
        if any(a.rule.shadow for a in assessments):
            raise RuntimeError("a bug in a shadow rule")
        return evaluate_caps(assessments, spent=spent)

    monkeypatch.setattr(capcore.engine, "evaluate_caps", failing)
    with caplog.at_level(logging.ERROR, logger="approvals.services.calls"):
        call = call_make(agent=agent_make(), arguments=payment("5000.00"))
    assert (call.status, call.reasons, call_state(call)["shadow"]) == ("allowed", [], [])
    assert recorded("shadow daily") == 0
    assert "a shadow cap rule failed" in caplog.text
    assert "a bug in a shadow rule" not in json.dumps(call_state(call))


def test_a_shadow_rule_that_no_longer_parses_refuses_nothing(db: None) -> None:
    rule = rule_make(line=SHADOW_BIG)
    CapRule.objects.filter(pk=rule.pk).update(line="big: pay arg=amount max XXX 1 -> gate")
    call = call_make(agent=agent_make(), arguments=payment("500.00"))
    assert (call.status, call.reasons, call.shadow) == ("allowed", [], [])


def test_the_rule_file_word_is_stored_as_the_flag(db: None) -> None:
    rule = rule_make(line=SHADOW_BIG)
    assert (rule.name, rule.shadow, rule.line) == ("big", True, SHADOW_BIG.removeprefix("shadow "))
    assert policy_stamp_read() is not None  # the cap rules' triggers stand after 0019


def test_import_and_export_keep_shadow_rules(db: None, tmp_path: Path) -> None:
    text = f"{SHADOW_BIG}\n{SHADOW_DAILY}\n{HUGE}\n"
    result = rules_import(text=text)
    assert result.created == ("big", "daily", "huge")
    assert dict(CapRule.objects.values_list("name", "shadow")) == {
        "big": True,
        "daily": True,
        "huge": False,
    }
    exported = rules_export()
    assert exported == f"{SHADOW_BIG}\n{SHADOW_DAILY}\n{HUGE}\n"
    again = rules_import(text=exported)
    assert again.unchanged == ("big", "daily", "huge")
    # The same line without the word enforces the rule: an update, audited.
    path = tmp_path / "rules.txt"
    path.write_text(SHADOW_BIG.removeprefix("shadow ") + "\n", encoding="utf-8")
    call_command("import_rules", str(path))
    assert CapRule.objects.get(name="big").shadow is False
    entry = AuditEntry.objects.filter(action="cap rule saved").latest("pk")
    before, after = (json.loads(text)[0]["fields"] for text in (entry.before, entry.after))
    assert (before["shadow"], after["shadow"]) == (True, False)


def test_the_admin_checkbox_makes_and_unmakes_a_shadow_rule_audited(admin_client: Client) -> None:
    line = "big: pay arg=amount max USD 100.00 -> gate"
    add = reverse("admin:approvals_caprule_add")
    response = admin_client.post(add, {"line": line, "enabled": "on", "shadow": "on"})
    assert response.status_code == 302
    rule = CapRule.objects.get()
    assert (rule.shadow, rule.line) == (True, line)
    page = admin_client.get(reverse("admin:approvals_caprule_change", args=[rule.pk]))
    assert b'name="shadow"' in page.content
    assert page.context["adminform"].form["shadow"].value() is True

    # Cleared: enforced from now on, and the audit entry says so.
    change = reverse("admin:approvals_caprule_change", args=[rule.pk])
    response = admin_client.post(change, {"line": line, "enabled": "on"})
    assert response.status_code == 302
    rule.refresh_from_db()
    assert rule.shadow is False
    entry = AuditEntry.objects.filter(action="cap rule saved").latest("pk")
    assert entry.user is not None
    assert entry.user.username == "admin"
    before, after = (json.loads(text)[0]["fields"] for text in (entry.before, entry.after))
    assert (before["shadow"], after["shadow"]) == (True, False)
    call = call_make(agent=agent_make(), arguments=payment("500.00"))
    assert (call.status, call.shadow) == ("pending", [])


def test_the_admin_takes_the_word_in_the_line_too(admin_client: Client) -> None:
    add = reverse("admin:approvals_caprule_add")
    response = admin_client.post(add, {"line": SHADOW_BIG, "enabled": "on"})
    assert response.status_code == 302
    rule = CapRule.objects.get()
    assert (rule.name, rule.shadow, rule.line) == ("big", True, SHADOW_BIG.removeprefix("shadow "))


def test_the_call_page_and_history_show_the_shadow_rule(db: None) -> None:
    rule_make(line=SHADOW_BIG)
    cap_rule_save(line="shadow no: pay arg=amount max USD 1.00 -> refuse")
    call = call_make(agent=agent_make(), arguments=payment("500.00"))
    client = Client()
    client.force_login(user_make(username="victor", decide=False, view=True))
    page = client.get(f"/calls/{call.pk}/").content.decode()
    assert "A shadow rule would have held this: <code>big</code>" in page
    assert "A shadow rule would have refused this: <code>no</code>" in page
    assert "USD 500.00 is over the limit of USD 100.00 per call" in page
    history = client.get("/history/").content.decode()
    assert 'A shadow rule would have held this: <code class="rule">big</code>' in history
    assert 'A shadow rule would have refused this: <code class="rule">no</code>' in history


def test_a_call_without_shadow_reasons_shows_no_shadow_panel(db: None) -> None:
    call = call_make(agent=agent_make(), arguments=payment("500.00"))
    client = Client()
    client.force_login(user_make(username="victor", decide=False, view=True))
    assert "shadow rule" not in client.get(f"/calls/{call.pk}/").content.decode()
    assert "shadow rule" not in client.get("/history/").content.decode()


def test_the_api_sends_the_shadow_reasons_and_simulate_records_nothing(db: None) -> None:
    agent_with_token(token="cs_shadow-test-token", name="shadow-bot", principal="carol")
    client = Client(HTTP_AUTHORIZATION="Bearer cs_shadow-test-token")
    rule_make(line=SHADOW_DAILY)
    body = json.dumps({"tool": "pay", "arguments": payment("5000.00")})
    simulated = client.post("/api/v1/calls/simulate", body, content_type="application/json")
    assert simulated.status_code == 200
    answer = simulated.json()
    assert (answer["status"], answer["reasons"]) == ("allowed", [])
    assert [reason["rule"] for reason in answer["shadow"]] == ["daily"]
    assert not Call.objects.exists()
    assert not LedgerEntry.objects.exists()

    submitted = client.post("/api/v1/calls", body, content_type="application/json")
    assert submitted.status_code == 201
    state = client.get(f"/api/v1/calls/{submitted.json()['id']}").json()
    assert state["status"] == "allowed"
    assert state["shadow"] == answer["shadow"]
    assert recorded("shadow daily") == 500000


def test_the_ledger_list_shows_a_shadow_ledger_with_its_rule_window(admin_client: Client) -> None:
    rule_make(line=SHADOW_DAILY)
    call_make(agent=agent_make(), arguments=payment("500.00"))
    page = admin_client.get(reverse("admin:approvals_ledger_changelist")).content.decode()
    assert "shadow daily" in page
    assert "USD 500.00 (per day)" in page


def test_an_edit_that_stands_gives_the_edited_calls_shadow_reasons(finance: Group) -> None:
    rule_make(line=SHADOW_BIG)
    rule_make(line=SHADOW_DAILY)
    rule_make(line=LARGE)
    call = call_make(agent=agent_make(), arguments=payment("800.00"))
    assert shadow_rules(call) == [("big", "gate")]
    fran = user_make(username="fran", groups=[finance])
    decided = call_decide(
        call_id=call.pk,
        user=fran,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
        arguments=payment("50.00"),
    )
    assert decided.status == "approved"
    assert shadow_rules(Call.objects.get(pk=call.pk)) == []
    assert recorded("shadow daily") == 5000
    assert reserved("shadow daily") == 0
