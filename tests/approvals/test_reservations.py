"""Held calls reserve their amounts, and approval re-checks the sums (docs/rules.md, "Held
calls reserve"): a queue of calls held for another reason (the agent's mode, an ``ask`` rule,
a budget) is never approved past a cap by someone the cap's gate would not have asked."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.db.models import Sum
from django.test import Client
from django.utils import timezone

import capcore
from approvals.models import (
    Agent,
    Approval,
    Budget,
    Call,
    CapRule,
    LedgerEntry,
    LedgerReservation,
)
from approvals.selectors.calls import call_state
from approvals.services.decisions import (
    BATCH_NOT_ELIGIBLE,
    DECIDED,
    RECHECK_REFUSED,
    EditNotEligible,
    NotEligible,
    call_decide,
    calls_decide,
)
from approvals.services.lifecycle import call_cancel, calls_expire_due
from approvals.services.rules import budget_save
from approvals.web.call_page import call_page
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make

DAILY_SPEND = "daily-spend: pay arg=amount sum USD 2000 per day -> gate finance"


@pytest.fixture
def finance(db: None) -> Group:
    """The red team's cap: USD 2,000 a day, past which two of ``finance`` must approve."""
    group = Group.objects.create(name="finance")
    rule_make(line=DAILY_SPEND)
    gate_make(name="finance", group=group, required_approvals=2)
    return group


def pay(agent: Agent, amount: str = "450.00") -> Call:
    return call_make(agent=agent, arguments=payment(amount))


def decide(call: Call, user: User, *, approve: bool = True, arguments: str | None = None) -> Call:
    return call_decide(
        call_id=call.pk,
        user=user,
        approve=approve,
        comment="",
        arguments_sha256=Call.objects.get(pk=call.pk).arguments_sha256,
        arguments=arguments,
    )


def recorded(rule: str = "daily-spend") -> int:
    entries = LedgerEntry.objects.filter(ledger__rule=rule, voided_at__isnull=True)
    return entries.aggregate(total=Sum("minor"))["total"] or 0


def reserved(rule: str = "daily-spend") -> int:
    rows = LedgerReservation.objects.filter(ledger__rule=rule)
    return rows.aggregate(total=Sum("minor"))["total"] or 0


def fresh(call: Call) -> Call:
    return Call.objects.get(pk=call.pk)


def usd(minor: int) -> capcore.Limit:
    return capcore.Limit("USD", 2, minor)


def picks(calls: list[Call]) -> list[str]:
    return [f"{call.pk}:{call.arguments_sha256}" for call in calls]


@pytest.mark.parametrize("mode", ["default", "prompt"])
def test_the_red_team_batch_stays_within_the_cap_unless_finance_approves(
    finance: Group, mode: str
) -> None:
    """Six USD 450 payments held by the agent's mode; an approver outside ``finance``
    batch-approves all six. Before, the ledger reached USD 2,700 and finance was never asked."""
    agent = agent_make(mode=mode)
    calls = [pay(agent) for _ in range(6)]
    # The fifth would take recorded + reserved past 2,000: held at finance from the start.
    assert [call.gates for call in calls] == [[""]] * 4 + [["", "finance"]] * 2
    assert reserved() == 6 * 45000

    outcomes = calls_decide(
        user=user_make(username="mallory"), approve=True, comment="", calls=picks(calls)
    )
    assert [o.reason for o in outcomes] == [DECIDED] * 4 + [BATCH_NOT_ELIGIBLE] * 2
    assert [fresh(call).status for call in calls] == ["approved"] * 4 + ["pending"] * 2
    assert recorded() == 180000
    assert reserved() == 2 * 45000  # the two still held at finance

    # Past the limit only through the cap's own gate, with its quorum.
    alice = user_make(username="alice", groups=[finance])
    bob = user_make(username="bob", groups=[finance])
    assert decide(calls[4], alice).status == "pending"
    assert decide(calls[4], bob).status == "approved"
    assert recorded() == 225000


def test_a_rule_added_while_calls_are_held_is_checked_again_at_approval(db: None) -> None:
    """No reservation counts for a rule written after the calls were held: the re-check
    under the ledger's lock holds the call that would go past the limit at the rule's gate,
    and the approval already given keeps counting at its own gate."""
    agent = agent_make(mode="prompt")
    calls = [pay(agent) for _ in range(6)]
    group = Group.objects.create(name="finance")
    rule_make(line=DAILY_SPEND)
    gate_make(name="finance", group=group, required_approvals=2)
    mallory = user_make(username="mallory")

    assert [decide(call, mallory).status for call in calls] == ["approved"] * 4 + ["pending"] * 2
    assert recorded() == 180000
    held = fresh(calls[4])
    assert held.gates == ["", "finance"]
    assert held.reasons[-1]["rule"] == "daily-spend"
    assert "USD 2,250.00 would exceed the limit of USD 2,000.00" in held.reasons[-1]["message"]
    (approval,) = held.approvals.all()
    assert (approval.user, approval.gates, approval.voided_at) == (mallory, [""], None)
    assert LedgerReservation.objects.get(call=held).held_for_rule
    # The outsider may no longer decide it; the call page shows the default gate met.
    with pytest.raises(NotEligible):
        decide(calls[5], user_make(username="trent"))
    alice = user_make(username="alice", groups=[group])
    page = call_page(call_id=held.pk, user=alice)
    assert page is not None
    assert [(g.name, g.approvals, g.required) for g in page.gates] == [
        ("", 1, 1),
        ("finance", 0, 2),
    ]

    assert decide(held, alice).status == "pending"  # finance: 1 of 2
    assert decide(held, user_make(username="bob", groups=[group])).status == "approved"
    assert recorded() == 225000
    assert not LedgerReservation.objects.filter(call=held).exists()


def test_a_refusing_rule_added_while_held_refuses_the_call_at_approval(db: None) -> None:
    agent = agent_make(mode="prompt")
    first, second = pay(agent), pay(agent)
    rule_make(line="ceiling: pay arg=amount sum USD 500 -> refuse")
    alice = user_make(username="alice")
    assert decide(first, alice).status == "approved"
    refused = decide(second, alice)
    assert refused.status == "refused"
    assert refused.reasons[-1]["rule"] == "ceiling"
    assert refused.reasons[-1]["action"] == "refuse"
    assert refused.decision_comment == RECHECK_REFUSED.format(rules="cap rule ceiling")
    decision = call_state(refused)["decision"]
    assert (decision["by"], decision["comment"]) == (None, refused.decision_comment)
    assert recorded("ceiling") == 45000
    assert not LedgerReservation.objects.exists()


def test_an_approval_that_did_not_see_a_finding_at_its_own_gate_is_void(db: None) -> None:
    """A rule at the default gate, newly over: the approval given without its finding no
    longer counts there, so its approver decides again, this time with the finding shown."""
    agent = agent_make(mode="prompt")
    first, second = pay(agent), pay(agent)
    rule_make(line="spend: pay arg=amount sum USD 500 -> gate")
    alice = user_make(username="alice")
    assert decide(first, alice).status == "approved"
    held = decide(second, alice)
    assert (held.status, held.gates, held.reasons[-1]["rule"]) == ("pending", [""], "spend")
    assert Approval.objects.get(call=second).voided_at is not None
    assert decide(second, alice).status == "approved"
    assert recorded("spend") == 90000


def test_calls_held_at_the_caps_gate_do_not_hold_the_others_in_the_queue(finance: Group) -> None:
    """Approving a queue of calls within the limit does not cascade into needing the cap's
    gate for each: a re-check leaves out what calls held at that gate reserve."""
    agent = agent_make(mode="prompt")
    within = [pay(agent) for _ in range(4)]
    over = [pay(agent, "900.00") for _ in range(3)]  # held at finance
    assert all(call.gates == ["", "finance"] for call in over)
    mallory = user_make(username="mallory")
    assert [decide(call, mallory).status for call in within] == ["approved"] * 4
    assert recorded() == 180000


def test_ask_rules_and_budgets_reserve_like_the_mode(finance: Group) -> None:
    agent = agent_make(mode="danger_full_access")
    agent.permissionrule_set.create(pattern="pay", decision="ask")
    asked = [pay(agent) for _ in range(6)]
    assert [call.gates for call in asked] == [[""]] * 4 + [["", "finance"]] * 2
    outcomes = calls_decide(
        user=user_make(username="mallory"), approve=True, comment="", calls=picks(asked)
    )
    assert [o.reason for o in outcomes] == [DECIDED] * 4 + [BATCH_NOT_ELIGIBLE] * 2
    assert recorded() == 180000


def test_a_budget_hold_reserves_too(finance: Group) -> None:
    budget_save(budget=Budget(max_calls=1, action=Budget.Action.GATE, gate=""))
    agent = agent_make(mode="danger_full_access")
    assert pay(agent, "1000.00").status == "allowed"  # the run's first call
    held = [pay(agent) for _ in range(4)]  # past the budget: held at the default gate
    assert [call.gates for call in held] == [[""]] * 2 + [["", "finance"]] * 2
    outcomes = calls_decide(
        user=user_make(username="mallory"), approve=True, comment="", calls=picks(held)
    )
    assert [o.reason for o in outcomes] == [DECIDED] * 2 + [BATCH_NOT_ELIGIBLE] * 2
    assert recorded() == 190000


def test_an_edit_counts_what_the_other_held_calls_reserve(finance: Group) -> None:
    agent = agent_make(mode="prompt")
    first, second = pay(agent, "900.00"), pay(agent, "900.00")
    mallory = user_make(username="mallory")
    # 900 reserved by the other + 1,200 would pass 2,000: the edited call would need finance.
    with pytest.raises(EditNotEligible):
        decide(first, mallory, arguments=payment("1200.00"))
    assert fresh(first).arguments == payment("900.00")
    assert decide(first, mallory, arguments=payment("1000.00")).status == "approved"
    assert recorded() == 100000
    assert decide(second, user_make(username="trent")).status == "approved"
    assert recorded() == 190000


def test_an_edit_that_stays_held_reserves_its_new_amount(finance: Group) -> None:
    gate_make(name="", required_approvals=2)
    agent = agent_make(mode="prompt")
    call = pay(agent, "900.00")
    assert decide(call, user_make(username="alice"), arguments=payment("1500.00")).status == (
        "pending"
    )
    assert reserved() == 150000
    assert pay(agent, "600.00").gates == ["", "finance"]  # 1,500 + 600 > 2,000


def test_every_end_but_approval_releases_the_reservation(finance: Group) -> None:
    agent = agent_make(mode="prompt")
    denied, cancelled, expiring = pay(agent), pay(agent), pay(agent)
    assert reserved() == 3 * 45000
    decide(denied, user_make(username="alice"), approve=False)
    call_cancel(agent=agent, call_id=cancelled.pk)
    assert reserved() == 45000
    assert calls_expire_due(now=timezone.now() + timedelta(days=1)) == 1
    assert reserved() == 0
    assert fresh(expiring).status == "expired"
    assert recorded() == 0


def test_the_call_page_shows_recorded_reserved_and_the_total_after(finance: Group) -> None:
    agent = agent_make(mode="prompt")
    first, *others = [pay(agent) for _ in range(4)]
    over = pay(agent)  # held at finance: reserved, but only finance can record it
    decide(first, user_make(username="mallory"))
    alice = user_make(username="alice", groups=[finance])
    page = call_page(call_id=others[0].pk, user=alice)
    assert page is not None
    (cap,) = page.caps
    assert (cap.spent, cap.reserved, cap.reserved_at_gate, cap.after) == (
        usd(45000),
        usd(90000),
        usd(45000),
        usd(180000),
    )
    assert cap.reserved_by == 3
    assert set(cap.reserved_first) == {others[1].pk, others[2].pk, over.pk}
    assert not cap.over
    client = Client()
    client.force_login(alice)
    html = client.get(f"/calls/{others[0].pk}/").content.decode()
    for linked in (others[1], others[2], over):
        assert f'<a href="/calls/{linked.pk}/">' in html
    assert "by 3 held calls" in html
    assert "USD 450.00 of theirs is held at this rule's gate" in html


def test_a_rule_that_no_longer_parses_refuses_the_call_at_approval(finance: Group) -> None:
    call = pay(agent_make(mode="prompt"))
    CapRule.objects.update(line="daily-spend: no longer a rule")
    refused = decide(call, user_make(username="alice"))
    assert refused.status == "refused"
    assert refused.reasons[-1]["message"] == "policy error"
    assert not LedgerReservation.objects.exists()
