"""``LedgerEntry`` rows: the spent totals of ledgers within their windows.

A total is read from the ledger's hours (``LedgerHour``) from the first whole hour in the
window on, and from the entries themselves only in the hour the window starts in, when it
starts inside one: a rolling window's start is any moment, a calendar window's a midnight.
So a total reads at most an hour of entries, however many the window holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from approvals.models import LedgerEntry, LedgerHour
from approvals.queries import sql
from approvals.queries.ledger_hours import HOUR, hour_of

# (ledger id, the window's start or None for all time, whether the start itself counts)
LedgerWindow = tuple[int, datetime | None, bool]

_TOTALS = "SELECT ledger, COALESCE(SUM(minor), 0) FROM ({parts}) counted GROUP BY ledger"
_HOURS = sql.statement(
    "SELECT {H.ledger} AS ledger, {H.minor} AS minor FROM {H} WHERE ", H=LedgerHour
)
_HOURS_OF = sql.statement("{H.ledger} = %s", H=LedgerHour)
_HOURS_FROM = sql.statement("({H.ledger} = %s AND {H.hour} >= %s)", H=LedgerHour)
_ENTRIES = sql.statement(
    "SELECT {E.ledger} AS ledger, {E.minor} AS minor FROM {E} WHERE {E.voided_at} IS NULL AND (",
    E=LedgerEntry,
)
_ENTRIES_BETWEEN = {
    True: sql.statement(
        "({E.ledger} = %s AND {E.recorded_at} >= %s AND {E.recorded_at} < %s)", E=LedgerEntry
    ),
    False: sql.statement(
        "({E.ledger} = %s AND {E.recorded_at} > %s AND {E.recorded_at} < %s)", E=LedgerEntry
    ),
}


def ledger_entry_totals(windows: Sequence[LedgerWindow]) -> dict[int, int]:
    """Each ledger's total of entries not voided, recorded from its window's start on
    (entries dated after now included); a ledger without such entries is absent."""
    if not windows:
        return {}
    moment = sql.fields(LedgerEntry, "recorded_at")[0]
    hours, hour_params, entries, entry_params = [], [], [], []
    for ledger_id, start, inclusive in windows:
        if start is None:
            hours.append(_HOURS_OF)
            hour_params.append(ledger_id)
            continue
        whole = start if inclusive and hour_of(start) == start else hour_of(start) + HOUR
        hours.append(_HOURS_FROM)
        hour_params += [ledger_id, sql.prepared(moment, whole)]
        if whole != start:
            entries.append(_ENTRIES_BETWEEN[inclusive])
            entry_params += [ledger_id, sql.prepared(moment, start), sql.prepared(moment, whole)]
    parts = _HOURS + " OR ".join(hours)
    if entries:
        parts += " UNION ALL " + _ENTRIES + " OR ".join(entries) + ")"
    found = sql.rows(_TOTALS.format(parts=parts), hour_params + entry_params)
    return {int(ledger_id): int(total) for ledger_id, total in found}
