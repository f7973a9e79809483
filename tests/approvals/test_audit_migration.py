"""Migration 0018_audit_chain chains the entries already there, in the order they were
written (time, then id), and leaves the guard of 0009 as it found it, forwards and back
(SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from approvals.models import AUDIT_NOT_CHANGED, AuditEntry
from approvals.selectors.audit import ChainIntact, audit_chain_verify
from approvals.services.audit import audit_record

BEFORE = [("approvals", "0017_call_receipt")]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TABLE = f'"{AuditEntry._meta.db_table}"'


def _refused_update() -> None:
    with (
        pytest.raises(IntegrityError, match=AUDIT_NOT_CHANGED),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(f'UPDATE {TABLE} SET "after" = %s', ["changed"])


@pytest.mark.django_db(transaction=True)
def test_the_entries_already_there_are_chained_by_time_then_id() -> None:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("approvals")
    try:
        MigrationExecutor(connection).migrate(BEFORE)
        old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        entries = old.get_model("approvals", "AuditEntry")
        # Written out of time order, and two at the same moment: ids break the tie.
        for name, minutes in (("third", 2), ("first", 0), ("second-a", 1), ("second-b", 1)):
            entries.objects.create(
                at=T0 + timedelta(minutes=minutes),
                action="call expired",
                object_type="call",
                object_id=name,
            )
        _refused_update()  # the guard of 0009 is on before 0018
    finally:
        MigrationExecutor(connection).migrate(latest)

    chained = list(AuditEntry.objects.order_by("seq").values_list("seq", "object_id"))
    assert chained == [(1, "first"), (2, "second-a"), (3, "second-b"), (4, "third")]
    verdict = audit_chain_verify()
    assert isinstance(verdict, ChainIntact)
    assert verdict.entries == 4
    _refused_update()  # and on after it

    # The writers go on from the migrated head.
    entry = audit_record(
        action=AuditEntry.Action.CALL_EXPIRED, object_type=AuditEntry.ObjectType.CALL, object_id=5
    )
    assert (entry.seq, entry.prev_hash) == (5, verdict.hash)
    assert audit_chain_verify() == ChainIntact(5, 5, entry.hash)


@pytest.mark.django_db(transaction=True)
def test_back_to_0017_keeps_the_entries_and_the_guard() -> None:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("approvals")
    for n in range(3):
        audit_record(
            action=AuditEntry.Action.CALL_EXPIRED,
            object_type=AuditEntry.ObjectType.CALL,
            object_id=n,
        )
    try:
        MigrationExecutor(connection).migrate(BEFORE)
        old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        assert old.get_model("approvals", "AuditEntry").objects.count() == 3
        _refused_update()
    finally:
        MigrationExecutor(connection).migrate(latest)
    verdict = audit_chain_verify()
    assert isinstance(verdict, ChainIntact)
    assert verdict.entries == 3
