"""Run budgets: ceilings on calls, tokens, cost and duration, tripped when the total including
this call would go past them (``docs/capcore.md``, "Budgets")."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from capcore.amounts import Unit, add, assess, format_amount
from capcore.errors import AmountOverflow
from capcore.findings import REFUSE, Action, Finding, Policy

# Costs and cost counters are integers of 10⁻⁹ currency units.
COST_EXPONENT = 9


class BudgetScope(enum.Enum):
    RUN = "run"  # one agent run (agent, run_id)
    DAY = "day"  # all of the agent's calls in the current UTC day


@dataclass(frozen=True, slots=True)
class Budget:
    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost: int | None = None  # in 10⁻⁹ units of cost_currency
    cost_currency: str | None = None
    max_duration: int | None = None  # seconds since the run's first call
    scope: BudgetScope = BudgetScope.RUN
    action: Action = REFUSE

    def __post_init__(self) -> None:
        if (self.max_cost is None) != (self.cost_currency is None):
            raise ValueError("a cost ceiling needs its currency, and only it")


@dataclass(frozen=True, slots=True)
class Usage:
    """What the call reports as spent since the agent's previous call."""

    tokens: int = 0
    cost: int = 0  # in 10⁻⁹ units of cost_currency
    cost_currency: str | None = None


@dataclass(frozen=True, slots=True)
class RunCounters:
    """The totals before this call, in the budget's scope, as the server keeps them.

    ``cost`` counts only costs reported in the budget's currency; ``started_at`` is the
    first call's time (``None`` when this is the first call).
    """

    calls: int = 0
    tokens: int = 0
    cost: int = 0
    started_at: datetime | None = None


def parse_cost(text: object) -> int:
    """A reported cost (a plain decimal string, at most 9 fraction digits, not negative) in
    10⁻⁹ units; ``NotAssessable`` otherwise."""
    return assess(text, Unit.MAJOR, COST_EXPONENT)


def _past(total: int, ceiling: int | None) -> bool:
    return ceiling is not None and total > ceiling


def _scope_text(budget: Budget) -> str:
    return "in this run" if budget.scope is BudgetScope.RUN else "today"


def _total(a: int, b: int) -> int | None:
    try:
        return add(a, b)
    except AmountOverflow:
        return None


def evaluate_budget(
    budget: Budget, *, counters: RunCounters, usage: Usage, now: datetime
) -> tuple[Finding, ...]:
    """Findings for each ceiling this call would pass, in the order calls, tokens, cost,
    duration. A cost in another currency than the budget's is not assessable."""
    findings: list[Finding] = []
    scope = _scope_text(budget)

    def trip(ceiling: str, message: str) -> None:
        findings.append(Finding(Policy.BUDGET, f"budget:{ceiling}", budget.action, message))

    calls = counters.calls + 1
    if _past(calls, budget.max_calls):
        trip("calls", f"call {calls} would pass the ceiling of {budget.max_calls} calls {scope}")
    tokens = _total(counters.tokens, usage.tokens)
    if budget.max_tokens is not None and (tokens is None or tokens > budget.max_tokens):
        total = "an overflowing number of" if tokens is None else str(tokens)
        trip("tokens", f"{total} tokens would pass the ceiling of {budget.max_tokens} {scope}")
    if budget.max_cost is not None:
        currency = budget.cost_currency
        if usage.cost_currency is not None and usage.cost_currency != currency:
            trip("cost", f"not assessable: the cost is not reported in {currency}")
        else:
            cost = _total(counters.cost, usage.cost)
            if cost is None or cost > budget.max_cost:
                ceiling = format_amount(budget.max_cost, COST_EXPONENT)
                total = (
                    "an overflowing total" if cost is None else format_amount(cost, COST_EXPONENT)
                )
                trip(
                    "cost",
                    f"a cost of {currency} {total} would pass the ceiling of "
                    f"{currency} {ceiling} {scope}",
                )
    if budget.max_duration is not None and counters.started_at is not None:
        lasted = now - counters.started_at
        if lasted > timedelta(seconds=budget.max_duration):
            # Rounded up: a run one microsecond past 60 s has lasted "61 s", not "60 s".
            elapsed = -(-lasted // timedelta(seconds=1))
            trip(
                "duration",
                f"{elapsed} s since the first call passes the ceiling of {budget.max_duration} s",
            )
    return tuple(findings)
