"""``LedgerEntry`` rows: the spent totals of ledgers within their windows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from approvals.models import LedgerEntry
from approvals.queries import sql

# (ledger id, the window's start or None for all time, whether the start itself counts)
LedgerWindow = tuple[int, datetime | None, bool]

_TOTALS = sql.statement(
    "SELECT {E.ledger}, COALESCE(SUM({E.minor}), 0) FROM {E} WHERE {E.voided_at} IS NULL AND (",
    E=LedgerEntry,
)
_LEDGER = sql.statement("{E.ledger} = %s", E=LedgerEntry)
_FROM = {
    True: sql.statement(" AND {E.recorded_at} >= %s", E=LedgerEntry),
    False: sql.statement(" AND {E.recorded_at} > %s", E=LedgerEntry),
}
_GROUP = sql.statement(") GROUP BY {E.ledger}", E=LedgerEntry)


def ledger_entry_totals(windows: Sequence[LedgerWindow]) -> dict[int, int]:
    """Each ledger's total of entries not voided, recorded from its window's start on
    (entries dated after now included); a ledger without such entries is absent."""
    if not windows:
        return {}
    recorded_at = sql.fields(LedgerEntry, "recorded_at")[0]
    conditions, params = [], []
    for ledger_id, start, inclusive in windows:
        if start is None:
            conditions.append(_LEDGER)
            params.append(ledger_id)
        else:
            conditions.append(f"({_LEDGER}{_FROM[inclusive]})")
            params += [ledger_id, sql.prepared(recorded_at, start)]
    found = sql.rows(_TOTALS + " OR ".join(conditions) + _GROUP, params)
    return {int(ledger_id): int(total) for ledger_id, total in found}
