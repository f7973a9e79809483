"""``LedgerHour`` rows: each ledger's total per UTC hour, changed with its entries."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError

from approvals.models import LedgerHour
from approvals.queries import sql

HOUR = timedelta(hours=1)
NO_SUCH_HOUR = "a voided entry's hour has no total to take it from"

_ADD = sql.statement("INSERT INTO {H} ({H.ledger}, {H.hour}, {H.minor}) VALUES ", H=LedgerHour)
_ADD_ROW = "(%s, %s, %s)"
_ADD_END = sql.statement(
    " ON CONFLICT ({H.ledger}, {H.hour})"
    " DO UPDATE SET {H.minor} = {H}.{H.minor} + excluded.{H.minor}",
    H=LedgerHour,
)
# Not an upsert of a negative amount: SQLite checks the row to insert against the table's
# CHECK before it finds the conflict, and would refuse every void.
_TAKE = sql.statement(
    "UPDATE {H} SET {H.minor} = {H.minor} - %s WHERE {H.ledger} = %s AND {H.hour} = %s",
    H=LedgerHour,
)


def hour_of(moment: datetime) -> datetime:
    """The start of the UTC hour ``moment`` (aware) falls in."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ledger_hours_add(changes: Iterable[tuple[int, datetime, int]]) -> None:
    """Add each ``(ledger id, moment, minor)`` to its ledger's total of the hour ``moment``
    falls in, in the caller's transaction: the one that records the entries, holding their
    ledgers' locks."""
    totals: defaultdict[tuple[int, datetime], int] = defaultdict(int)
    for ledger_id, moment, minor in changes:
        totals[ledger_id, hour_of(moment)] += minor
    if not totals:
        return
    hour = sql.fields(LedgerHour, "hour")[0]
    params: list[object] = []
    # In one order, so that two transactions never wait on each other's rows crosswise.
    for (ledger_id, start), minor in sorted(totals.items()):
        params += [ledger_id, sql.prepared(hour, start), minor]
    sql.execute(_ADD + ", ".join([_ADD_ROW] * len(totals)) + _ADD_END, params)


def ledger_hour_take(*, ledger_id: int, moment: datetime, minor: int) -> None:
    """Take ``minor`` from the ledger's total of the hour ``moment`` falls in (an entry of
    that hour voided), in the caller's transaction. An hour without that much, or without a
    row, raises ``IntegrityError``: the entry then still counts."""
    hour = sql.fields(LedgerHour, "hour")[0]
    changed = sql.execute(_TAKE, [minor, ledger_id, sql.prepared(hour, hour_of(moment))])
    if changed != 1:
        raise IntegrityError(NO_SUCH_HOUR)
