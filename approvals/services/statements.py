"""The few statements the ORM cannot express, written out and run through Django's cursor
(docs/architecture.md, "One way to reach a table"), and the query expressions on a call's
gate list it cannot compile on SQLite. Everything else goes through the ORM.

Both supported databases (SQLite 3.35 or later, PostgreSQL) run each statement as written.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from django.db import NotSupportedError, connection
from django.db.models import BooleanField, F, Func

from approvals.models import Gate, LedgerHour, RunCounter

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler

HOUR = timedelta(hours=1)

# (ledger id, the window's start or None for all time, whether the start itself counts)
LedgerWindow = tuple[int, datetime | None, bool]


def hour_of(moment: datetime) -> datetime:
    """The start of the UTC hour ``moment`` (aware) falls in."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _stored(moment: datetime) -> Any:
    """An aware moment as the ORM stores it in a datetime column (on SQLite: UTC text)."""
    return LedgerHour._meta.get_field("hour").get_db_prep_value(moment, connection)


# Why written out: an upsert that adds to the stored counts and returns them, in one
# statement that also locks the row; bulk_create(update_conflicts=True) can only overwrite.
_RUN_COUNTER_COUNT = """
INSERT INTO approvals_runcounter (agent_id, scope, "key", calls, tokens, started_at)
VALUES (%s, %s, %s, 1, %s, %s)
ON CONFLICT (agent_id, scope, "key") DO UPDATE SET
    calls = approvals_runcounter.calls + 1,
    tokens = approvals_runcounter.tokens + excluded.tokens
RETURNING id, calls, tokens, started_at
"""


def run_counter_count(
    *, agent_id: int, scope: str, key: str, tokens: int, now: datetime
) -> RunCounter:
    """Count one call and its tokens in its run's (or day's) counter, created if missing;
    the counter after, with ``id``, ``calls``, ``tokens`` and ``started_at`` loaded."""
    # ``raw`` runs it on Django's cursor and reads the row back through the model's fields.
    (counter,) = RunCounter.objects.raw(_RUN_COUNTER_COUNT, [agent_id, scope, key, tokens, now])
    return counter


# Why written out: an upsert that adds to the stored amount; the ORM's can only overwrite it.
_RUN_COST_ADD = """
INSERT INTO approvals_runcost (counter_id, currency, amount) VALUES (%s, %s, %s)
ON CONFLICT (counter_id, currency) DO UPDATE SET amount = approvals_runcost.amount + %s
"""


def run_cost_add(*, counter_id: int, currency: str, amount: int) -> None:
    """Add ``amount`` to the counter's cost in ``currency``, created if missing."""
    with connection.cursor() as cursor:
        cursor.execute(_RUN_COST_ADD, [counter_id, currency, amount, amount])


# Why written out: an upsert of many rows that adds to each stored total; the ORM's can only
# overwrite them.
_LEDGER_HOURS_ADD = "INSERT INTO approvals_ledgerhour (ledger_id, hour, minor) VALUES {rows}"
_LEDGER_HOURS_ADD_ROW = "(%s, %s, %s)"
_LEDGER_HOURS_ADD_END = """
ON CONFLICT (ledger_id, hour) DO UPDATE SET minor = approvals_ledgerhour.minor + excluded.minor
"""


def ledger_hours_add(changes: Iterable[tuple[int, datetime, int]]) -> None:
    """Add each ``(ledger id, moment, minor)`` to its ledger's total of the hour ``moment``
    falls in, in the caller's transaction: the one that records the entries, holding their
    ledgers' locks."""
    totals: defaultdict[tuple[int, datetime], int] = defaultdict(int)
    for ledger_id, moment, minor in changes:
        totals[ledger_id, hour_of(moment)] += minor
    if not totals:
        return
    params: list[Any] = []
    # In one order, so that two transactions never wait on each other's rows crosswise.
    for (ledger_id, hour), minor in sorted(totals.items()):
        params += [ledger_id, _stored(hour), minor]
    rows = ", ".join([_LEDGER_HOURS_ADD_ROW] * len(totals))
    with connection.cursor() as cursor:
        cursor.execute(_LEDGER_HOURS_ADD.format(rows=rows) + _LEDGER_HOURS_ADD_END, params)


# Why written out: one total per ledger over two tables (its hours, and the entries of the
# hour its window starts in) in one statement; the ORM sums one table per query.
_TOTALS = "SELECT ledger, COALESCE(SUM(minor), 0) FROM ({parts}) counted GROUP BY ledger"
_HOURS = "SELECT ledger_id AS ledger, minor FROM approvals_ledgerhour WHERE "
_HOURS_OF = "ledger_id = %s"
_HOURS_FROM = "(ledger_id = %s AND hour >= %s)"
_ENTRIES = (
    "SELECT ledger_id AS ledger, minor FROM approvals_ledgerentry WHERE voided_at IS NULL AND ("
)
_ENTRIES_BETWEEN = {
    True: "(ledger_id = %s AND recorded_at >= %s AND recorded_at < %s)",
    False: "(ledger_id = %s AND recorded_at > %s AND recorded_at < %s)",
}


def ledger_window_totals(windows: Sequence[LedgerWindow]) -> dict[int, int]:
    """Each ledger's total of entries not voided, recorded from its window's start on
    (entries dated after now included); a ledger without such entries is absent.

    A total is read from the ledger's hours from the first whole hour in the window on, and
    from the entries themselves only in the hour the window starts in, when it starts inside
    one: so it reads at most an hour of entries, however many the window holds."""
    if not windows:
        return {}
    hours: list[str] = []
    hour_params: list[Any] = []
    entries: list[str] = []
    entry_params: list[Any] = []
    for ledger_id, start, inclusive in windows:
        if start is None:
            hours.append(_HOURS_OF)
            hour_params.append(ledger_id)
            continue
        whole = start if inclusive and hour_of(start) == start else hour_of(start) + HOUR
        hours.append(_HOURS_FROM)
        hour_params += [ledger_id, _stored(whole)]
        if whole != start:
            entries.append(_ENTRIES_BETWEEN[inclusive])
            entry_params += [ledger_id, _stored(start), _stored(whole)]
    parts = _HOURS + " OR ".join(hours)
    if entries:
        parts += " UNION ALL " + _ENTRIES + " OR ".join(entries) + ")"
    with connection.cursor() as cursor:
        cursor.execute(_TOTALS.format(parts=parts), hour_params + entry_params)
        return {int(ledger_id): int(total) for ledger_id, total in cursor.fetchall()}


# Why written out: it reads the database's own catalog of triggers, which no model maps. The
# count is of the triggers that renew the stamp: one per table on PostgreSQL, one per table
# and event on SQLite, for the four policy tables (migration 0004) and the notification
# channels (0011).
_POLICY_STAMP_SQLITE = r"""
SELECT stamp, (SELECT count(*) FROM sqlite_master
               WHERE type = 'trigger'
               AND (name LIKE 'countersign\_policy\_%' ESCAPE '\'
                    OR name LIKE 'countersign\_channels\_%' ESCAPE '\'))
FROM approvals_policystamp WHERE id = 1
"""
_POLICY_STAMP_SQLITE_TRIGGERS = 15
_POLICY_STAMP_POSTGRESQL = """
SELECT stamp, (SELECT count(*) FROM pg_trigger
               WHERE tgname IN ('countersign_policy_changed', 'countersign_channels_changed')
               AND tgenabled <> 'D')
FROM approvals_policystamp WHERE id = 1
"""
_POLICY_STAMP_POSTGRESQL_TRIGGERS = 5


def policy_stamp_read() -> int | None:
    """The current policy stamp, or None when it cannot vouch for a cached policy: no stamp
    row, a trigger missing or disabled, or a database other than SQLite or PostgreSQL."""
    if connection.vendor == "sqlite":
        query, triggers = _POLICY_STAMP_SQLITE, _POLICY_STAMP_SQLITE_TRIGGERS
    elif connection.vendor == "postgresql":
        query, triggers = _POLICY_STAMP_POSTGRESQL, _POLICY_STAMP_POSTGRESQL_TRIGGERS
    else:
        return None
    with connection.cursor() as cursor:
        cursor.execute(query)  # no parameters: its ``%`` are the text's own
        found = cursor.fetchone()
    if found is None or found[1] != triggers:
        return None
    return int(found[0])


# Why written out: Django has no API for SET CONSTRAINTS. The audit chain's writer runs it
# just before it locks the chain's head (services/audit.py): the foreign keys Django defers
# to the commit are checked now, so the row locks those checks take are never waited for
# while the head is held, where a writer holding one of those rows and waiting for the head
# would deadlock with it. Only PostgreSQL defers them; SQLite writers take turns anyway.
_DEFERRED_CONSTRAINTS_NOW = "SET CONSTRAINTS ALL IMMEDIATE"


def deferred_constraints_check() -> None:
    """Check the transaction's deferred constraints now, and the rest of it as it goes
    (PostgreSQL; elsewhere nothing)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(_DEFERRED_CONSTRAINTS_NOW)


# Why written out: Django's JSONField lookups cannot ask whether a list holds any of some
# strings on SQLite (``contains`` is unsupported there and ``has_any_keys`` reads an object's
# keys, not a list's items). A query expression: the ORM compiles it into its queries.
class HeldAtAny(Func):
    """Whether a call's ``gates`` (a JSON list of names) holds any of ``names``."""

    output_field = BooleanField()

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__(F("gates"))
        self.names = names

    def as_sql(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotSupportedError("the queue reads gate lists on SQLite and PostgreSQL only")

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (gates_column,) = self.get_source_expressions()
        gates, params = compiler.compile(gates_column)
        marks = ", ".join(["%s"] * len(self.names))
        # Only the compiled column and placeholders go into the text; the names are parameters.
        text = f"EXISTS (SELECT 1 FROM json_each({gates}) AS held WHERE held.value IN ({marks}))"  # noqa: S608
        return text, (*params, *self.names)

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        # jsonb's ?| matches a list's string items as well as an object's keys.
        (gates_column,) = self.get_source_expressions()
        gates, params = compiler.compile(gates_column)
        return f"({gates} ?| %s)", (*params, list(self.names))


class HeldAtMissingGate(Func):
    """Whether a call's ``gates`` holds a name that no gate has (one renamed or deleted
    behind its rules' back): such a call waits for a superuser (docs/policies.md). The
    default gate always exists: without its row, it has the defaults."""

    output_field = BooleanField()

    def __init__(self) -> None:
        super().__init__(F("gates"))

    def as_sql(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotSupportedError("the queue reads gate lists on SQLite and PostgreSQL only")

    def _names(self, connection: BaseDatabaseWrapper) -> str:
        table = connection.ops.quote_name(Gate._meta.db_table)
        return f"SELECT {connection.ops.quote_name('name')} FROM {table}"  # noqa: S608

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (gates_column,) = self.get_source_expressions()
        gates, params = compiler.compile(gates_column)
        names = self._names(connection)
        text = (
            f"EXISTS (SELECT 1 FROM json_each({gates}) AS held "  # noqa: S608
            f"WHERE held.value <> '' AND held.value NOT IN ({names}))"
        )
        return text, tuple(params)

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        (gates_column,) = self.get_source_expressions()
        gates, params = compiler.compile(gates_column)
        names = self._names(connection)
        text = (
            f"EXISTS (SELECT 1 FROM jsonb_array_elements_text({gates}) AS held(value) "  # noqa: S608
            f"WHERE held.value <> '' AND held.value NOT IN ({names}))"
        )
        return text, tuple(params)
