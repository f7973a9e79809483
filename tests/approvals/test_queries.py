"""approvals/queries/: the one home of written-out SQL, every name in it the models' own."""

from __future__ import annotations

import importlib
import pkgutil
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import IntegrityError, connection, models, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from hypothesis import given, settings
from hypothesis import strategies as st

import approvals.queries
from approvals.models import Ledger, LedgerEntry
from approvals.queries import sql
from approvals.services.calls import call_submit
from approvals.services.rules import cap_rule_save
from approvals.services.submissions import Submission
from tests.factories import agent_make

ROOT = Path(__file__).resolve().parents[2]
QUOTED = re.compile(r'"((?:[^"]|"")+)"')
# A statement's words, in capitals as this project writes SQL (prose never reads so).
SQL_TEXT = re.compile(r"\b(SELECT\b[^\n]*\bFROM|INSERT INTO|UPDATE \S+ SET|DELETE FROM)\b")


def _statements() -> list[tuple[str, str]]:
    found = []
    for info in pkgutil.iter_modules(approvals.queries.__path__):
        module = importlib.import_module(f"approvals.queries.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, str) and SQL_TEXT.search(value):
                found.append((f"{info.name}.{name}", value))
            elif isinstance(value, dict):
                found += [
                    (f"{info.name}.{name}", text)
                    for text in value.values()
                    if isinstance(text, str)
                ]
    return found


def _known_names() -> set[str]:
    names = set()
    for model in apps.get_models(include_auto_created=True):
        names.add(model._meta.db_table)
        names.update(field.column for field in model._meta.concrete_fields)
    return names


def test_the_queries_hold_statements() -> None:
    assert len(_statements()) >= 15


def test_every_quoted_name_in_every_statement_is_a_table_or_column_of_a_model() -> None:
    known = _known_names()
    for where, text in _statements():
        for name in QUOTED.findall(text):
            assert name.replace('""', '"') in known, f"{where}: {name!r} is no model's"


def test_a_name_that_is_not_a_field_is_refused_when_the_statement_is_built() -> None:
    assert sql.statement("SELECT {L.rule} FROM {L}", L=Ledger) == (
        'SELECT "rule" FROM "approvals_ledger"'
    )
    with pytest.raises(FieldDoesNotExist):
        sql.statement("SELECT {L.no_such_column} FROM {L}", L=Ledger)


def _python_files_outside_queries() -> list[Path]:
    files = []
    for folder in ("approvals", "config", "capcore", "countersign"):
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            # Migrations keep the SQL they were written with: history, not code that runs.
            if relative.startswith(("approvals/queries/", "approvals/migrations/")):
                continue
            files.append(path)
    return files


def test_no_sql_is_written_out_anywhere_else() -> None:
    offenders = [
        path.relative_to(ROOT).as_posix()
        for path in _python_files_outside_queries()
        if SQL_TEXT.search(path.read_text())
    ]
    assert offenders == []


def test_the_sql_finder_finds_sql() -> None:
    """The test above cannot pass by finding nothing."""
    assert SQL_TEXT.search('_READ = "SELECT id, rule FROM approvals_ledger WHERE id = %s"')
    assert SQL_TEXT.search("INSERT INTO approvals_runcost (counter_id) VALUES (%s)")
    assert SQL_TEXT.search("UPDATE approvals_call SET status = %s")
    assert not SQL_TEXT.search("Select the calls from the queue; update the page and set it.")


def test_the_orm_hooks_the_runner_reads_values_through_are_there() -> None:
    """Early warning: ``sql.converted`` reads rows through the ORM's own converters, found by
    undocumented (not private) names; an upgrade that renames them fails here first."""
    field = Ledger._meta.get_field("rule")
    column = field.get_col(Ledger._meta.db_table)
    assert callable(connection.ops.get_db_converters)
    assert callable(column.get_db_converters)
    assert sql.converted(["daily"], [field]) == ["daily"]


def test_a_foreign_key_to_a_uuid_is_read_as_a_uuid() -> None:
    """As the ORM reads it: on SQLite the column holds the key as text."""
    call_id = uuid.uuid4()
    stored = sql.prepared(LedgerEntry._meta.get_field("call"), call_id)
    assert sql.converted([stored], [LedgerEntry._meta.get_field("call")]) == [call_id]


def test_values_are_prepared_alike_through_the_connection_or_its_proxy() -> None:
    """``on=sql.database()`` is a shortcut, never another preparation."""
    moment = datetime(2026, 12, 6, 12, 30, 15, 250, tzinfo=UTC)
    field = LedgerEntry._meta.get_field("recorded_at")
    assert sql.prepared(field, moment, on=sql.database()) == field.get_db_prep_save(
        moment, connection
    )


class _Shouting(models.CharField):  # type: ignore[type-arg]
    """A subclass of a field the shortcuts know, preparing otherwise: it is not shortcut."""

    def get_prep_value(self, value: object) -> object:
        return str(super().get_prep_value(value)).upper()


_PREPARED_FIELDS = [
    models.CharField(max_length=10),
    models.TextField(),
    models.DateTimeField(),
    models.UUIDField(),
    models.IntegerField(),
    _Shouting(max_length=10),
]
_VALUES = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5))])),
    st.uuids(),
    st.integers(min_value=-(2**31), max_value=2**31),
)


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(_PREPARED_FIELDS), value=_VALUES)
def test_every_value_is_prepared_as_its_field_prepares_it(
    field: models.Field[Any, Any], value: object
) -> None:
    """The shortcuts of ``sql.prepared`` give exactly what the field gives, or the field's
    own error for a value it refuses."""
    try:
        expected = field.get_db_prep_save(value, connection)
    except (TypeError, ValueError, ValidationError) as refused:
        with pytest.raises(type(refused)):
            sql.prepared(field, value)
        return
    got = sql.prepared(field, value)
    assert got == expected
    assert type(got) is type(expected)


def test_a_column_is_read_as_each_of_its_values_alone() -> None:
    call_field = LedgerEntry._meta.get_field("call")
    rule_field = Ledger._meta.get_field("rule")
    stored = [sql.prepared(call_field, uuid.uuid4()) for _ in range(3)]
    assert sql.converted_column(stored, call_field) == [
        sql.converted([value], [call_field])[0] for value in stored
    ]
    assert sql.converted_column(["daily", "weekly"], rule_field) == ["daily", "weekly"]
    assert sql.converted_column([], call_field) == []


def test_a_field_is_read_through_its_own_converters_even_where_another_had_its_id() -> None:
    """Converters are kept by the field's id; a plan kept under that id for another field
    (one gone, whose id was given again) is not used for it."""
    call_field = LedgerEntry._meta.get_field("call")
    rule_field = Ledger._meta.get_field("rule")
    call_id = uuid.uuid4()
    stored = sql.prepared(call_field, call_id)
    assert sql.converted([stored], [call_field]) == [call_id]
    known = sql._converters_of(sql.database())
    known[id(rule_field)] = known[id(call_field)]
    assert sql.converted(["daily"], [rule_field]) == ["daily"]
    assert sql.converted([stored], [call_field]) == [call_id]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="reads SQLite's query plan")
def test_a_ledger_windows_total_is_read_from_the_index_alone(db: None) -> None:
    """A submission sums the entries of the hour its ledgers' rolling windows start in; the
    entries' rows are never visited for it."""
    agent = agent_make(principal="user-1")
    cap_rule_save(line="daily: pay arg=amount sum USD 1000.00 per 24h -> gate")
    with CaptureQueriesContext(connection) as captured:
        call_submit(
            agent=agent,
            submission=Submission(tool="pay", arguments='{"amount": "1.00"}', principal="user-1"),
        )
    (total,) = [query["sql"] for query in captured if "SUM(" in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + total)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "USING COVERING INDEX ledger_entry_window_sum" in plan


# --- Running statements -----------------------------------------------------------------------


def _through_django(text: str, params: list[Any]) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(text, params)
        return list(cursor.fetchall())


def test_a_statement_runs_as_through_djangos_cursor(db: None) -> None:
    """Placeholders, a literal ``%`` written ``%%``, and no parameters, alike; twice, as the
    turned text is kept."""
    cases: list[tuple[str, list[Any]]] = [
        ("SELECT %s || '%%', %s", ["a", 2]),
        ("SELECT 'x' WHERE 1 = %s", [2]),
        ("SELECT '100%%'", []),
    ]
    for text, params in cases:
        assert sql.rows(text, params) == _through_django(text, params)
        assert sql.rows(text, params) == _through_django(text, params)


def test_a_statement_that_fails_raises_djangos_error(db: None) -> None:
    cap_rule_save(line="daily: pay arg=amount max USD 1000.00 -> gate")
    (rule_id,) = sql.rows('SELECT "id" FROM "approvals_caprule"', [])[0]
    duplicate = 'INSERT INTO "approvals_caprule" SELECT * FROM "approvals_caprule" WHERE "id" = %s'
    with pytest.raises(IntegrityError), transaction.atomic():
        sql.execute(duplicate, [rule_id])
    assert sql.rows('SELECT count(*) FROM "approvals_caprule"', []) == [(1,)]


def test_no_statement_runs_in_a_block_marked_for_rollback(db: None) -> None:
    """As through Django's cursor: what the block did is to be undone, so nothing more."""
    with transaction.atomic():
        transaction.set_rollback(True)
        with pytest.raises(TransactionManagementError):
            sql.rows("SELECT 1", [])


def test_statements_are_logged_where_django_logs_them_and_wrappers_run(db: None) -> None:
    seen: list[str] = []

    def wrapper(execute: Any, text: str, *args: Any) -> Any:
        seen.append(text)
        return execute(text, *args)

    with CaptureQueriesContext(connection) as captured:
        assert sql.rows("SELECT %s", [7]) == [(7,)]
    assert [query["sql"] for query in captured] == ["SELECT 7"]
    with connection.execute_wrapper(wrapper):
        assert sql.execute("UPDATE approvals_caprule SET line = line WHERE 1 = %s", [0]) == 0
    assert seen == ["UPDATE approvals_caprule SET line = line WHERE 1 = %s"]


@pytest.mark.django_db(transaction=True)
def test_a_closed_connection_is_opened_again() -> None:
    connection.close()
    assert connection.connection is None
    assert sql.rows("SELECT %s", [1]) == [(1,)]
