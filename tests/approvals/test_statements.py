"""One way to reach a table: the ORM, and approvals/services/statements.py for the few
statements it cannot express, every one of them run through Django's cursor, so that query
logs, ``django_assert_num_queries``, execute wrappers and APM agents see them all."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

import capcore
from approvals.models import Agent, Budget, LedgerEntry, LedgerHour, RunCost, RunCounter
from approvals.services.calls import Submission, call_submit
from approvals.services.decisions import call_decide
from approvals.services.rules import cap_rule_save
from tests.factories import agent_make, user_make

ROOT = Path(__file__).resolve().parents[2]
# A statement's words, in capitals as this project writes SQL (prose never reads so).
SQL_TEXT = re.compile(r"\b(SELECT\b[^\n]*\bFROM|INSERT INTO|UPDATE \S+ SET|DELETE FROM)\b")
# Where SQL may be written out: the one module, and migrations (history, not code that runs).
SQL_HOMES = ("approvals/services/statements.py", "approvals/migrations/")
# What a connection runs besides the statements it is given: ending a transaction.
TRANSACTION_END = re.compile(r"^\s*(COMMIT|ROLLBACK)\b", re.IGNORECASE)


def _python_files() -> list[Path]:
    return [
        path
        for folder in ("approvals", "notifications", "config", "capcore")
        for path in (ROOT / folder).rglob("*.py")
        if not path.relative_to(ROOT).as_posix().startswith(SQL_HOMES)
    ]


def test_sql_is_written_out_only_in_the_statements_module() -> None:
    offenders = [
        path.relative_to(ROOT).as_posix()
        for path in _python_files()
        if SQL_TEXT.search(path.read_text())
    ]
    assert offenders == []


def test_the_sql_finder_finds_sql() -> None:
    """The test above cannot pass by finding nothing."""
    assert SQL_TEXT.search((ROOT / SQL_HOMES[0]).read_text())
    assert SQL_TEXT.search("UPDATE approvals_call SET status = %s")
    assert not SQL_TEXT.search("Select the calls from the queue; update the page and set it.")


def _world() -> tuple[Agent, User]:
    cap_rule_save(line="daily: pay arg=amount sum USD 100.00 per 24h -> gate")
    Budget.objects.create(max_cost=10**12, cost_currency="USD")
    return agent_make(principal="user-1"), user_make(username="alice")


def _submit_held_and_approve(agent: Agent, approver: User) -> None:
    """A submission that reads and writes every table a held call touches (a rolling
    window's total, the run's counter and cost), then its approval (the ledger, its hour)."""
    usage = capcore.Usage(tokens=3, cost=5, cost_currency="USD")
    call, _ = call_submit(
        agent=agent,
        submission=Submission(
            tool="pay", arguments='{"amount": "150.00"}', principal="user-1", usage=usage
        ),
    )
    assert call.status == "pending"
    call_decide(
        call_id=call.pk,
        user=approver,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
    )


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's own trace of statements")
def test_every_statement_of_a_submission_and_a_decision_goes_through_djangos_cursor(
    db: None,
) -> None:
    """What the database runs (its own trace) is what Django's execute wrappers saw."""
    through_django: list[str] = []
    run: list[str] = []

    def wrapper(execute: Any, sql: str, *args: Any) -> Any:
        through_django.append(sql)
        return execute(sql, *args)

    world = _world()  # its writes fire the policy tables' triggers, traced apart
    native = connection.connection
    native.set_trace_callback(run.append)
    try:
        with connection.execute_wrapper(wrapper):
            _submit_held_and_approve(*world)
    finally:
        native.set_trace_callback(None)
    statements = [text for text in run if not TRANSACTION_END.match(text)]
    assert len(statements) == len(through_django) > 20
    assert RunCost.objects.get().amount == 5
    assert RunCounter.objects.get().calls == 1
    assert LedgerHour.objects.get().minor == LedgerEntry.objects.get().minor == 15000


def test_the_statements_are_logged_like_every_other(db: None) -> None:
    world = _world()
    with CaptureQueriesContext(connection) as captured:
        _submit_held_and_approve(*world)
    logged = " ".join(query["sql"] for query in captured)
    for table in ("approvals_runcounter", "approvals_runcost", "approvals_ledgerhour"):
        assert f"INSERT INTO {table}" in logged
    assert "FROM approvals_policystamp" in logged


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
    (total,) = [q["sql"] for q in captured if "SUM(" in q["sql"] and "ledgerhour" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + total)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "USING COVERING INDEX ledger_entry_window_sum" in plan
