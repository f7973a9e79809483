"""Run budgets (``docs/capcore.md``, "Budgets"): ceilings on calls, tokens, cost and duration
that trip when the total including this call would go past them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from capcore import INT64_MAX, JSONNumber
from capcore.budgets import (
    COST_EXPONENT,
    Budget,
    BudgetScope,
    RunCounters,
    Usage,
    evaluate_budget,
    parse_cost,
)
from capcore.errors import (
    AmountSyntax,
    AmountType,
    FractionDigits,
    NegativeAmount,
    NotAssessable,
)
from capcore.findings import REFUSE, Action, ActionKind, Finding, Policy

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
FINANCE = Action(ActionKind.GATE, "finance")


def evaluate(
    budget: Budget,
    *,
    counters: RunCounters | None = None,
    usage: Usage | None = None,
    now: datetime = NOW,
) -> tuple[Finding, ...]:
    return evaluate_budget(
        budget, counters=counters or RunCounters(), usage=usage or Usage(), now=now
    )


def rules_of(findings: tuple[Finding, ...]) -> list[str | None]:
    return [finding.rule for finding in findings]


def only(findings: tuple[Finding, ...]) -> Finding:
    (finding,) = findings
    return finding


# --- parse_cost -----------------------------------------------------------------------------


def test_cost_exponent_is_nine() -> None:
    assert COST_EXPONENT == 9


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0.0042", 4_200_000, id="spec-example"),
        pytest.param("0", 0, id="zero"),
        pytest.param("1", 1_000_000_000, id="one-unit"),
        pytest.param("0.000000001", 1, id="nine-fraction-digits"),
        pytest.param("12.5", 12_500_000_000, id="short-fraction"),
        pytest.param(JSONNumber("0.5"), 500_000_000, id="json-number"),
    ],
)
def test_cost_parse_gives_units_of_1e_minus_9(text: str, expected: int) -> None:
    assert parse_cost(text) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param("1e-3", AmountSyntax, id="exponent-notation"),
        pytest.param("", AmountSyntax, id="empty"),
        pytest.param(" 1", AmountSyntax, id="leading-blank"),
        pytest.param("+1", AmountSyntax, id="plus-sign"),
        pytest.param("NaN", AmountSyntax, id="nan"),
        pytest.param("-1", NegativeAmount, id="negative"),
        pytest.param("-0", NegativeAmount, id="negative-zero"),
        pytest.param("0.0000000001", FractionDigits, id="ten-fraction-digits"),
        pytest.param(1, AmountType, id="python-int"),
        pytest.param(0.5, AmountType, id="python-float"),
        pytest.param(None, AmountType, id="none"),
        pytest.param(True, AmountType, id="bool"),
    ],
)
def test_cost_parse_refuses(value: object, error: type[NotAssessable]) -> None:
    with pytest.raises(error):
        parse_cost(value)


# --- Budget construction --------------------------------------------------------------------


def test_budget_defaults_to_run_scope_and_refuse() -> None:
    budget = Budget()
    assert budget.scope is BudgetScope.RUN
    assert budget.action == REFUSE


def test_budget_refuses_max_cost_without_currency() -> None:
    with pytest.raises(ValueError, match="currency"):
        Budget(max_cost=1_000_000_000)


def test_budget_with_cost_and_currency_is_fine() -> None:
    assert Budget(max_cost=1, cost_currency="USD").cost_currency == "USD"


def test_empty_budget_never_trips() -> None:
    counters = RunCounters(
        calls=10**6, tokens=10**12, cost=10**15, started_at=NOW - timedelta(days=9)
    )
    usage = Usage(tokens=10**9, cost=10**12, cost_currency="EUR")
    assert evaluate(Budget(), counters=counters, usage=usage) == ()


# --- calls ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("calls_before", "trips"),
    [
        pytest.param(0, False, id="call-1"),
        pytest.param(1, False, id="call-2"),
        pytest.param(2, False, id="call-3"),
        pytest.param(3, True, id="call-4"),
        pytest.param(10, True, id="call-11"),
    ],
)
def test_max_calls_trips_past_the_ceiling(calls_before: int, trips: bool) -> None:
    findings = evaluate(Budget(max_calls=3), counters=RunCounters(calls=calls_before))
    assert bool(findings) is trips
    if trips:
        finding = only(findings)
        assert finding.policy is Policy.BUDGET
        assert finding.rule == "budget:calls"
        assert finding.action == REFUSE
        assert str(calls_before + 1) in finding.message
        assert "3" in finding.message


def test_calls_message_names_the_call_and_the_ceiling() -> None:
    finding = only(evaluate(Budget(max_calls=3), counters=RunCounters(calls=3)))
    assert finding.message == "call 4 would pass the ceiling of 3 calls in this run"


def test_max_calls_zero_trips_the_first_call() -> None:
    assert rules_of(evaluate(Budget(max_calls=0))) == ["budget:calls"]


# --- tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "reported", "trips"),
    [
        pytest.param(900, 100, False, id="reaches-ceiling"),
        pytest.param(900, 101, True, id="one-past-ceiling"),
        pytest.param(1000, 0, False, id="at-ceiling-no-usage"),
        pytest.param(1001, 0, True, id="already-past"),
        pytest.param(0, 1001, True, id="this-call-alone-past"),
        pytest.param(0, 0, False, id="nothing"),
    ],
)
def test_tokens_total_includes_this_call(before: int, reported: int, trips: bool) -> None:
    findings = evaluate(
        Budget(max_tokens=1000), counters=RunCounters(tokens=before), usage=Usage(tokens=reported)
    )
    assert bool(findings) is trips
    if trips:
        finding = only(findings)
        assert finding.rule == "budget:tokens"
        assert str(before + reported) in finding.message
        assert "1000" in finding.message


def test_tokens_total_that_overflows_trips() -> None:
    findings = evaluate(
        Budget(max_tokens=INT64_MAX),
        counters=RunCounters(tokens=INT64_MAX),
        usage=Usage(tokens=1),
    )
    assert rules_of(findings) == ["budget:tokens"]


# --- cost -----------------------------------------------------------------------------------

ONE_DOLLAR = Budget(max_cost=parse_cost("1"), cost_currency="USD")


@pytest.mark.parametrize(
    ("before", "reported", "trips"),
    [
        pytest.param("0.9958", "0.0042", False, id="reaches-ceiling"),
        pytest.param("0.9958", "0.004200001", True, id="one-unit-past"),
        pytest.param("1", "0", False, id="at-ceiling"),
        pytest.param("0", "1.000000001", True, id="this-call-alone-past"),
    ],
)
def test_cost_total_includes_this_call(before: str, reported: str, trips: bool) -> None:
    findings = evaluate(
        ONE_DOLLAR,
        counters=RunCounters(cost=parse_cost(before)),
        usage=Usage(cost=parse_cost(reported), cost_currency="USD"),
    )
    assert bool(findings) is trips
    if trips:
        assert rules_of(findings) == ["budget:cost"]


def test_cost_message_has_the_limit_and_the_total_as_decimals() -> None:
    finding = only(
        evaluate(
            ONE_DOLLAR,
            counters=RunCounters(cost=parse_cost("0.9958")),
            usage=Usage(cost=parse_cost("0.004200001"), cost_currency="USD"),
        )
    )
    assert "USD 1.000000000" in finding.message  # the limit
    assert "USD 1.000000001" in finding.message  # the total
    assert finding.message == (
        "a cost of USD 1.000000001 would pass the ceiling of USD 1.000000000 in this run"
    )


def test_cost_without_reported_currency_counts_in_the_budget_currency() -> None:
    # No cost reported at all (the default usage) must not trip anything.
    assert evaluate(ONE_DOLLAR, counters=RunCounters(cost=parse_cost("0.5"))) == ()


@pytest.mark.parametrize(
    "action",
    [pytest.param(REFUSE, id="refuse"), pytest.param(FINANCE, id="gate-finance")],
)
@pytest.mark.parametrize("currency", ["EUR", "usd", "ZQXJ"])
def test_cost_in_another_currency_is_not_assessable(action: Action, currency: str) -> None:
    budget = Budget(max_cost=parse_cost("1"), cost_currency="USD", action=action)
    finding = only(evaluate(budget, usage=Usage(cost=1, cost_currency=currency)))
    assert finding.policy is Policy.BUDGET
    assert finding.rule == "budget:cost"
    assert finding.action == action
    assert finding.message.startswith("not assessable")
    # The reported currency is agent text: it is never echoed.
    assert currency not in finding.message


def test_cost_in_another_currency_without_a_cost_ceiling_is_ignored() -> None:
    usage = Usage(cost=10**12, cost_currency="EUR")
    assert evaluate(Budget(max_calls=5), usage=usage) == ()


# --- duration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed", "trips"),
    [
        pytest.param(timedelta(0), False, id="just-started"),
        pytest.param(timedelta(seconds=59, microseconds=999_999), False, id="under"),
        pytest.param(timedelta(seconds=60), False, id="exactly-at-ceiling"),
        pytest.param(timedelta(seconds=60, microseconds=1), True, id="one-microsecond-past"),
        pytest.param(timedelta(hours=2), True, id="long-past"),
    ],
)
def test_duration_since_the_first_call(elapsed: timedelta, trips: bool) -> None:
    counters = RunCounters(calls=1, started_at=NOW - elapsed)
    findings = evaluate(Budget(max_duration=60), counters=counters)
    assert bool(findings) is trips
    if trips:
        finding = only(findings)
        assert finding.rule == "budget:duration"
        assert "60 s" in finding.message


def test_duration_message_has_the_elapsed_seconds_and_the_ceiling() -> None:
    counters = RunCounters(calls=1, started_at=NOW - timedelta(hours=2))
    finding = only(evaluate(Budget(max_duration=60), counters=counters))
    assert "7200" in finding.message
    assert "60" in finding.message


def test_first_call_has_no_duration_finding() -> None:
    assert evaluate(Budget(max_duration=0), counters=RunCounters(started_at=None)) == ()


def test_duration_uses_aware_times_in_any_zone() -> None:
    plus5 = timezone(timedelta(hours=5))
    started = (NOW - timedelta(seconds=61)).astimezone(plus5)
    findings = evaluate(Budget(max_duration=60), counters=RunCounters(calls=1, started_at=started))
    assert rules_of(findings) == ["budget:duration"]


# --- several ceilings, action and scope -----------------------------------------------------

EVERYTHING_PAST = (
    RunCounters(calls=5, tokens=500, cost=parse_cost("2"), started_at=NOW - timedelta(hours=1)),
    Usage(tokens=1, cost=1, cost_currency="USD"),
)


@pytest.mark.parametrize(
    "action",
    [
        pytest.param(REFUSE, id="refuse"),
        pytest.param(FINANCE, id="gate-finance"),
        pytest.param(Action(ActionKind.GATE, ""), id="default-gate"),
    ],
)
def test_findings_in_order_calls_tokens_cost_duration_with_the_budget_action(
    action: Action,
) -> None:
    budget = Budget(
        max_calls=5,
        max_tokens=500,
        max_cost=parse_cost("2"),
        cost_currency="USD",
        max_duration=60,
        action=action,
    )
    counters, usage = EVERYTHING_PAST
    findings = evaluate(budget, counters=counters, usage=usage)
    assert rules_of(findings) == [
        "budget:calls",
        "budget:tokens",
        "budget:cost",
        "budget:duration",
    ]
    assert all(finding.action == action for finding in findings)
    assert all(finding.policy is Policy.BUDGET for finding in findings)


def test_only_the_ceilings_passed_are_findings() -> None:
    budget = Budget(max_calls=100, max_tokens=500, max_duration=60)
    counters, usage = EVERYTHING_PAST
    findings = evaluate(budget, counters=counters, usage=usage)
    assert rules_of(findings) == ["budget:tokens", "budget:duration"]


@pytest.mark.parametrize(
    ("scope", "text"),
    [
        pytest.param(BudgetScope.RUN, "in this run", id="run"),
        pytest.param(BudgetScope.DAY, "today", id="day"),
    ],
)
def test_messages_name_the_scope(scope: BudgetScope, text: str) -> None:
    budget = Budget(
        max_calls=5, max_tokens=500, max_cost=parse_cost("2"), cost_currency="USD", scope=scope
    )
    counters, usage = EVERYTHING_PAST
    findings = evaluate(budget, counters=counters, usage=usage)
    assert len(findings) == 3
    for finding in findings:
        assert finding.message.endswith(text)
        other = "today" if scope is BudgetScope.RUN else "in this run"
        assert other not in finding.message


def test_finding_as_reason_for_a_budget() -> None:
    finding = only(evaluate(Budget(max_calls=3, action=FINANCE), counters=RunCounters(calls=3)))
    assert finding.as_reason() == {
        "policy": "budget",
        "rule": "budget:calls",
        "action": "gate",
        "gate": "finance",
        "message": "call 4 would pass the ceiling of 3 calls in this run",
    }


def test_duration_message_rounds_the_elapsed_time_up() -> None:
    counters = RunCounters(calls=1, started_at=NOW - timedelta(seconds=60, microseconds=1))
    finding = only(evaluate(Budget(max_duration=60), counters=counters))
    assert finding.message == "61 s since the first call passes the ceiling of 60 s"
