"""The replay of ``manage.py backtest`` in capcore alone (docs/policy-lab.md, "Backtest a rule
set"): recorded calls judged again with other rules, against run counters and ledgers the
replay keeps from empty, held calls reserving until they actually ended."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from capcore.backtest import AgentSettings, PastCall, ReplayFailed, RuleCount, backtest
from capcore.budgets import Budget
from capcore.findings import DEFAULT_GATE
from capcore.permissions import Decision, Mode, PermissionRule
from capcore.rules import parse_rules
from capcore.verdict import Status

ALLOWED, HELD, REFUSED = Status.ALLOWED, Status.PENDING, Status.REFUSED
MONDAY = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
AGENTS = {1: AgentSettings(mode=Mode.ALLOW)}
_ids = itertools.count(1)


def call(
    amount: str,
    at: datetime,
    *,
    actual: Status = ALLOWED,
    ended: datetime | None = None,
    went_ahead: bool | None = None,
    tool: str = "pay",
    payee: str = "a@example.com",
    principal: str = "carol",
    run_id: str = "",
) -> PastCall:
    """A call as it happened: allowed or refused at once, or held until ``ended`` (``None``:
    still pending), going ahead when allowed or (held) when ``went_ahead``."""
    if went_ahead is None:
        went_ahead = actual is ALLOWED
    return PastCall(
        id=f"c{next(_ids)}",
        agent=1,
        tool=tool,
        arguments_text=json.dumps({"amount": amount, "payee": payee}),
        principal=principal,
        run_id=run_id,
        created_at=at,
        actual=actual,
        went_ahead=went_ahead,
        ended_at=at if actual is not HELD else ended,
    )


def replayed(calls: list[PastCall], rules: str) -> list[Status]:
    """Each call's replay verdict, in order (a call not reported as changed kept its own)."""
    result = backtest(calls, rules=parse_rules(rules), agents=AGENTS)
    changed = {change.call: change.replay for change in result.changed}
    return [changed.get(c.id, c.actual) for c in calls]


def test_a_sum_rule_records_what_it_allows_and_holds_past_its_limit() -> None:
    rules = "daily: pay arg=amount sum USD 100 per day -> gate"
    calls = [call(a, MONDAY + timedelta(minutes=i)) for i, a in enumerate(["60", "30", "20", "10"])]
    # 60 + 30 = 90 fits; 90 + 20 = 110 does not. The held 20 was actually allowed, so it went
    # ahead at once and is recorded: 110 + 10 is over too.
    assert replayed(calls, rules) == [ALLOWED, ALLOWED, HELD, HELD]


def test_keyed_calendar_windows_keep_one_total_per_key_and_start_again_each_day() -> None:
    rules = "per-payee: pay arg=amount sum USD 100 per day by arg=payee trim lower -> gate"
    tuesday = MONDAY + timedelta(days=1)
    calls = [
        call("80", MONDAY, payee="a@example.com"),
        call("80", MONDAY + timedelta(hours=1), payee="b@example.com"),
        call("30", MONDAY + timedelta(hours=2), payee=" A@Example.com"),
        call("30", tuesday.replace(hour=0), payee="a@example.com"),
    ]
    assert replayed(calls, rules) == [ALLOWED, ALLOWED, HELD, ALLOWED]


def test_a_rolling_window_forgets_what_was_recorded_more_than_its_length_ago() -> None:
    rules = "rolling: pay arg=amount sum USD 100 per 24h -> gate"
    calls = [
        call("90", MONDAY),
        call("20", MONDAY + timedelta(hours=24)),  # the 90 is exactly 24 h old: out
        call("85", MONDAY + timedelta(hours=25)),  # 20 + 85 = 105
    ]
    assert replayed(calls, rules) == [ALLOWED, ALLOWED, HELD]


def test_a_held_call_reserves_until_it_ended_then_records_only_if_it_went_ahead() -> None:
    rules = "total: pay arg=amount sum USD 100 -> gate"
    t = [MONDAY + timedelta(minutes=m) for m in range(10)]
    approved = call("150", t[0], actual=HELD, ended=t[2], went_ahead=True)
    denied = call("150", t[3], actual=HELD, ended=t[5], went_ahead=False)
    calls = [
        approved,
        call("1", t[1]),  # 150 reserved: 151 is over
        call("1", t[3]),  # 150 recorded by the approval at t2: over
        denied,
        call("1", t[6]),  # the denial released its 150, the approved 150 is still there
    ]
    assert replayed(calls, rules) == [HELD, HELD, HELD, HELD, HELD]
    small = "total: pay arg=amount sum USD 200 -> gate"
    # Under 200 the first three fit (150 + 1 + 1); the second 150 is over and reserved until
    # its denial, then released: the last 1 fits again (153).
    assert replayed(calls, small) == [ALLOWED, ALLOWED, ALLOWED, HELD, ALLOWED]


def test_a_call_still_pending_reserves_to_the_end_of_the_replay() -> None:
    rules = "total: pay arg=amount sum USD 100 -> gate"
    calls = [
        call("120", MONDAY, actual=HELD, ended=None),
        call("1", MONDAY + timedelta(days=300)),
    ]
    assert replayed(calls, rules) == [HELD, HELD]


def test_a_call_the_replay_holds_but_was_allowed_or_refused_ended_at_once() -> None:
    rules = "total: pay arg=amount sum USD 100 -> gate"
    calls = [
        call("150", MONDAY, actual=REFUSED),  # held, released at once: nothing counts
        call("100", MONDAY + timedelta(seconds=1)),
        call("150", MONDAY + timedelta(seconds=2)),  # held, recorded at once (it went ahead)
        call("0", MONDAY + timedelta(seconds=3)),  # 100 + 150: over even with nothing
    ]
    assert replayed(calls, rules) == [HELD, ALLOWED, HELD, HELD]


def test_a_refused_call_records_nothing() -> None:
    rules = (
        "huge: pay arg=amount max USD 100 -> refuse\ntotal: pay arg=amount sum USD 150 -> gate\n"
    )
    calls = [call("120", MONDAY), call("120", MONDAY + timedelta(seconds=1))]
    assert replayed(calls, rules) == [REFUSED, REFUSED]
    calls = [call("120", MONDAY), call("90", MONDAY + timedelta(seconds=1))]
    assert replayed(calls, rules) == [REFUSED, ALLOWED]


def test_run_budgets_count_every_call_of_the_run_from_empty() -> None:
    agents = {1: AgentSettings(mode=Mode.ALLOW, budget=Budget(max_calls=2, action=DEFAULT_GATE))}
    calls = [
        call("1", MONDAY + timedelta(seconds=i), run_id=run)
        for i, run in enumerate(["r1", "r1", "r2", "r1", "r2", "r2"])
    ]
    result = backtest(calls, rules=[], agents=agents)
    assert [change.call for change in result.changed] == [calls[3].id, calls[5].id]
    assert result.replay == {ALLOWED: 4, HELD: 2, REFUSED: 0}


def test_a_permission_rule_applies_only_to_calls_made_after_it_was_created() -> None:
    grant = PermissionRule(id=7, pattern="pay", decision=Decision.ALLOW, run_id="r1")
    agents = {1: AgentSettings(mode=Mode.PROMPT, permission_rules=((MONDAY, grant),))}
    before = call("1", MONDAY - timedelta(seconds=1), run_id="r1", actual=HELD, ended=MONDAY)
    after = call("1", MONDAY + timedelta(seconds=1), run_id="r1")
    result = backtest([before, after], rules=[], agents=agents)
    assert result.changed == ()
    assert result.replay == {ALLOWED: 1, HELD: 1, REFUSED: 0}


def test_the_report_counts_rules_changes_and_holds_per_day() -> None:
    rules = parse_rules(
        "big: pay arg=amount max USD 100 -> gate\nhuge: pay arg=amount max USD 1000 -> refuse\n"
        "unused: wire arg=amount max USD 1 -> gate\n"
    )
    calls = [
        call("50", MONDAY),
        call("500", MONDAY + timedelta(hours=1), actual=HELD, ended=MONDAY + timedelta(hours=2)),
        call("5000", MONDAY + timedelta(days=1)),
        call("150", MONDAY + timedelta(days=2)),
    ]
    result = backtest(calls, rules=rules, agents=AGENTS)
    assert result.calls == 4
    assert result.actual == {ALLOWED: 3, HELD: 1, REFUSED: 0}
    assert result.replay == {ALLOWED: 1, HELD: 2, REFUSED: 1}
    # The refused 5000 is over both; the rules stand among a refused call's reasons.
    assert result.rules == {
        "big": RuleCount(held=2, refused=1),
        "huge": RuleCount(held=0, refused=1),
        "unused": RuleCount(),
    }
    assert [(c.call, c.actual, c.replay, c.rules) for c in result.changed] == [
        (calls[2].id, ALLOWED, REFUSED, ("big", "huge")),
        (calls[3].id, ALLOWED, HELD, ("big",)),
    ]
    # Two holds over the three days from the first call's to the last one's.
    assert (result.holds_per_day_mean, result.holds_per_day_max, result.days) == (
        Decimal("0.7"),
        1,
        3,
    )
    midnight = MONDAY.replace(hour=0)
    week = backtest(
        calls, rules=rules, agents=AGENTS, since=midnight, until=midnight + timedelta(days=7)
    )
    assert (week.holds_per_day_mean, week.days) == (Decimal("0.3"), 7)


def test_the_same_history_gives_the_same_report() -> None:
    rules = parse_rules("daily: pay arg=amount sum USD 100 per day by principal -> gate")
    calls = [
        call(str(i % 70), MONDAY + timedelta(minutes=7 * i), principal=f"p{i % 3}")
        for i in range(200)
    ]
    assert backtest(calls, rules=rules, agents=AGENTS) == backtest(
        calls, rules=rules, agents=AGENTS
    )


def test_calls_out_of_creation_order_are_refused() -> None:
    calls = [call("1", MONDAY + timedelta(seconds=1)), call("1", MONDAY)]
    with pytest.raises(ValueError, match="creation order"):
        backtest(calls, rules=[], agents=AGENTS)


def test_no_calls_is_an_empty_report() -> None:
    result = backtest([], rules=parse_rules("big: pay arg=amount max USD 1 -> gate"), agents={})
    assert result.calls == 0
    assert result.changed == ()
    assert result.rules == {"big": RuleCount()}
    assert (result.holds_per_day_mean, result.holds_per_day_max) == (Decimal("0.0"), 0)


def test_a_shadow_rule_counts_what_it_would_have_done_and_changes_no_verdict() -> None:
    rules = parse_rules(
        "shadow daily: pay arg=amount sum USD 100 per day -> gate\n"
        "shadow huge: pay arg=amount max USD 1000 -> refuse\n"
    )
    calls = [call(a, MONDAY + timedelta(minutes=i)) for i, a in enumerate(["60", "50", "10"])]
    calls.append(call("5000", MONDAY + timedelta(minutes=5)))
    result = backtest(calls, rules=rules, agents=AGENTS)
    assert result.changed == ()
    assert result.replay == {ALLOWED: 4, HELD: 0, REFUSED: 0}
    # Its own ledger records every call that went ahead: 60, then 110 and 120 would be held,
    # and 5120; the 5000 is over the shadow max too.
    assert result.rules == {"daily": RuleCount(held=3), "huge": RuleCount(refused=1)}


def test_a_call_whose_evaluation_fails_stops_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("capcore.engine._evaluate", broken)
    first = call("1", MONDAY)
    with pytest.raises(ReplayFailed) as failed:
        backtest([first], rules=[], agents=AGENTS)
    assert failed.value.call == first.id
    assert isinstance(failed.value.__cause__, RuntimeError)
