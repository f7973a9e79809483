"""A ledger's window total read from its hours (``LedgerHour``) and the entries of the hour
its window starts in: equal to the sum of its entries in the window, as capcore's
``in_window`` decides, for every kind of window, start and void (hypothesis)."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import capcore
from approvals.models import Call, Ledger, LedgerEntry, LedgerHour
from approvals.selectors.ledgers import ledger_spent
from approvals.services.calls import ledger_record
from approvals.services.ledgers import NO_SUCH_HOUR, ledger_entry_void, ledger_hour_take
from capcore.caps import in_window
from tests.factories import agent_make, call_make

pytestmark = pytest.mark.django_db
KEY = capcore.LedgerKey("daily", "USD", None)
CALLS = 12
# Inside an hour, and on one: a rolling window's start falls between hours or on one.
NOWS = (
    datetime(2026, 12, 6, 10, 17, 23, 456789, tzinfo=UTC),
    datetime(2026, 12, 6, 10, 0, tzinfo=UTC),
)
WINDOWS = st.one_of(
    st.none(),
    st.builds(capcore.Window, rolling_seconds=st.integers(1, 4 * 1440).map(lambda m: m * 60)),
    st.sampled_from([capcore.Window(calendar=unit) for unit in capcore.Calendar]),
)


class _Rollback(Exception):
    """Ends an example's transaction without keeping anything."""


@pytest.fixture
def calls() -> list[Call]:
    agent = agent_make(principal="user-1")
    return [call_make(agent=agent) for _ in range(CALLS)]


def moments(now: datetime) -> st.SearchStrategy[datetime]:
    """Any second in the days around ``now``, or exactly on an hour (midnights included),
    or exactly at a rolling window's start."""
    return st.one_of(
        st.integers(-4 * 86400, 7200).map(lambda seconds: now + timedelta(seconds=seconds)),
        st.integers(-100, 3).map(
            lambda hours: now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours)
        ),
        st.integers(1, 4 * 1440).map(lambda minutes: now - timedelta(minutes=minutes)),
    )


@st.composite
def ledgers_history(draw: st.DrawFn) -> tuple[datetime, list[tuple[datetime, int, bool]]]:
    now = draw(st.sampled_from(NOWS))
    entries = draw(
        st.lists(st.tuples(moments(now), st.integers(0, 10**12), st.booleans()), max_size=CALLS)
    )
    return now, entries


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=ledgers_history(), windows=st.lists(WINDOWS, min_size=1, max_size=4))
def test_a_window_total_is_the_sum_of_its_entries_not_voided(
    calls: list[Call],
    history: tuple[datetime, list[tuple[datetime, int, bool]]],
    windows: list[capcore.Window | None],
) -> None:
    now, entries = history
    try:
        with transaction.atomic():
            ledger = Ledger.objects.create(rule=KEY.rule, currency=KEY.currency, key_digest="")
            for call, (at, minor, voided) in zip(calls, entries, strict=False):
                record = capcore.LedgerRecord(ledger=KEY, minor=minor)
                ledger_record(call=call, records=[record], ledgers={KEY: ledger}, now=at)
                if voided:
                    entry = LedgerEntry.objects.get(ledger=ledger, call=call)
                    ledger_entry_void(entry_id=entry.pk, reason="failed", by_user=None, now=now)
            for window in windows:
                expected = sum(
                    minor
                    for at, minor, voided in entries
                    if not voided and in_window(window, at, now)
                )
                assert ledger_spent(ledger=ledger, window=window, now=now) == expected
            raise _Rollback
    except _Rollback:
        pass


def test_a_calendar_window_reads_no_entry_and_a_rolling_one_only_its_first_hour(
    calls: list[Call],
) -> None:
    ledger = Ledger.objects.create(rule=KEY.rule, currency=KEY.currency, key_digest="")
    now = NOWS[0]
    for call, hours_ago in zip(calls, range(CALLS), strict=False):
        record = capcore.LedgerRecord(ledger=KEY, minor=100)
        at = now - timedelta(hours=hours_ago)
        ledger_record(call=call, records=[record], ledgers={KEY: ledger}, now=at)
    assert LedgerHour.objects.filter(ledger=ledger).count() == CALLS
    with CaptureQueriesContext(connection) as day:
        assert (
            ledger_spent(
                ledger=ledger, window=capcore.Window(calendar=capcore.Calendar.DAY), now=now
            )
            == 1100
        )
    with CaptureQueriesContext(connection) as rolling:
        three_hours = capcore.Window(rolling_seconds=3 * 3600)
        assert ledger_spent(ledger=ledger, window=three_hours, now=now) == 300
    [day_sql], [rolling_sql] = ([query["sql"] for query in captured] for captured in (day, rolling))
    assert LedgerEntry._meta.db_table not in day_sql
    # The entries read: those from the window's start to the next whole hour, no more.
    assert rolling_sql.count(LedgerEntry._meta.db_table) == 1
    assert "recorded_at <" in rolling_sql


def test_taking_more_than_an_hour_holds_or_from_an_hour_without_a_total_is_refused(
    calls: list[Call],
) -> None:
    ledger = Ledger.objects.create(rule=KEY.rule, currency=KEY.currency, key_digest="")
    record = capcore.LedgerRecord(ledger=KEY, minor=500)
    ledger_record(call=calls[0], records=[record], ledgers={KEY: ledger}, now=NOWS[0])
    with pytest.raises(IntegrityError), transaction.atomic():
        ledger_hour_take(ledger_id=ledger.pk, moment=NOWS[0], minor=501)
    with pytest.raises(IntegrityError, match=NO_SUCH_HOUR), transaction.atomic():
        ledger_hour_take(ledger_id=ledger.pk, moment=NOWS[0] - timedelta(hours=1), minor=1)
    assert ledger_spent(ledger=ledger, window=None, now=NOWS[0]) == 500


def test_the_migration_fills_the_hours_of_the_entries_already_recorded(
    calls: list[Call],
) -> None:
    ledger = Ledger.objects.create(rule=KEY.rule, currency=KEY.currency, key_digest="")
    now = NOWS[0]
    for call, minutes_ago in zip(calls, range(0, 40 * CALLS, 40), strict=False):
        record = capcore.LedgerRecord(ledger=KEY, minor=minutes_ago + 1)
        at = now - timedelta(minutes=minutes_ago)
        ledger_record(call=call, records=[record], ledgers={KEY: ledger}, now=at)
    voided = LedgerEntry.objects.filter(ledger=ledger).order_by("pk")[3]
    ledger_entry_void(entry_id=voided.pk, reason="failed", by_user=None, now=now)
    kept = sorted(LedgerHour.objects.values_list("ledger", "hour", "minor"))
    LedgerHour.objects.all().delete()
    migration = importlib.import_module("approvals.migrations.0013_ledger_hours")
    migration.hours_from_entries(apps, None)
    assert sorted(LedgerHour.objects.values_list("ledger", "hour", "minor")) == kept
    assert len(kept) > 1
