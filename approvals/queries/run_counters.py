"""``RunCounter`` and ``RunCost`` rows: a call counted in its run's (or day's) counters."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from approvals.models import RunCost, RunCounter
from approvals.queries import sql

# Counted and read back in one statement, which also locks the counter's row, so
# concurrent calls never lose a count (SQLite 3.35 or later: approvals/checks.py).
_COUNT = sql.statement(
    """
INSERT INTO {C} ({C.agent}, {C.scope}, {C.key}, {C.calls}, {C.tokens}, {C.started_at})
VALUES (%s, %s, %s, 1, %s, %s)
ON CONFLICT ({C.agent}, {C.scope}, {C.key}) DO UPDATE SET
    {C.calls} = {C}.{C.calls} + 1,
    {C.tokens} = {C}.{C.tokens} + excluded.{C.tokens}
RETURNING {C.id}, {C.calls}, {C.tokens}, {C.started_at}
""",
    C=RunCounter,
)
_COST_READ = sql.statement(
    "SELECT {K.amount} FROM {K} WHERE {K.counter} = %s AND {K.currency} = %s", K=RunCost
)
_COST_COUNT = sql.statement(
    """
INSERT INTO {K} ({K.counter}, {K.currency}, {K.amount}) VALUES (%s, %s, %s)
ON CONFLICT ({K.counter}, {K.currency}) DO UPDATE SET {K.amount} = {K}.{K.amount} + %s
""",
    K=RunCost,
)


def run_counter_count(
    *, agent_id: int, scope: str, key: str, tokens: int, now: datetime
) -> tuple[int, int, int, datetime]:
    """Count one call and its tokens; the counter's id, calls, tokens and start, after."""
    returned = sql.fields(RunCounter, "id", "calls", "tokens", "started_at")
    started = sql.prepared(returned[3], now)
    ((counter_id, calls, tokens_after, started_at),) = sql.fetch(
        _COUNT, [agent_id, scope, key, tokens, started], returned
    )
    return counter_id, calls, tokens_after, started_at


def run_cost_read(*, counter_id: int, currency: str) -> int:
    found: list[list[Any]] = sql.fetch(
        _COST_READ, [counter_id, currency], sql.fields(RunCost, "amount")
    )
    return int(found[0][0]) if found else 0


def run_cost_count(*, counter_id: int, currency: str, amount: int) -> None:
    sql.execute(_COST_COUNT, [counter_id, currency, amount, amount])
