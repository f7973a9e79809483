"""The chain checked: an untouched log verifies, and whatever an intruder with the database's
rights does directly (the guard's triggers off: dropped on SQLite, ``session_replication_role
= replica`` on PostgreSQL) — an UPDATE, a DELETE, an INSERT — ``audit_verify`` fails naming
the first entry that is wrong (docs/receipts.md, "The audit chain")."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from approvals.audit_chain import GENESIS_HASH, audit_entry_hash, audit_item
from approvals.models import AuditEntry
from approvals.selectors.audit import (
    ChainBroken,
    ChainIntact,
    audit_chain_verify,
    audit_head,
    audit_items,
    audit_page,
)
from approvals.services.audit import audit_record
from tests.tamper import HEAD_TABLE, INSERT, TABLE, tamper

ENTRIES = 7


def _verify(*options: str) -> str:
    out = StringIO()
    call_command("audit_verify", *options, stdout=out)
    return out.getvalue()


def _broken(*options: str) -> str:
    with pytest.raises(CommandError) as refused:
        _verify(*options)
    return str(refused.value)


@pytest.fixture
def log(db: None) -> list[AuditEntry]:
    return [
        audit_record(
            action=AuditEntry.Action.CALL_EXPIRED,
            object_type=AuditEntry.ObjectType.CALL,
            object_id=n,
            after=f"entry {n}",
        )
        for n in range(1, ENTRIES + 1)
    ]


def test_an_untouched_log_verifies_in_one_line(log: list[AuditEntry]) -> None:
    line = _verify("--batch", "2")
    assert line == (
        f"audit chain intact: {ENTRIES} entries, head seq {ENTRIES} hash {log[-1].hash}\n"
    )
    assert audit_chain_verify() == ChainIntact(ENTRIES, ENTRIES, log[-1].hash)


def test_an_empty_log_verifies(db: None) -> None:
    assert _verify() == f"audit chain intact: 0 entries, head seq 0 hash {GENESIS_HASH}\n"


def test_the_untouched_guard_still_refuses(log: list[AuditEntry]) -> None:
    """The tampering below needs the triggers off: with them on, nothing changes."""
    with pytest.raises(Exception, match="cannot be changed"), connection.cursor() as cursor:
        cursor.execute(f'UPDATE {TABLE} SET "after" = %s WHERE "seq" = 3', ["forged"])


@pytest.mark.parametrize("batch", ["1", "3", "1000"])
def test_an_update_of_one_entry_is_named(log: list[AuditEntry], batch: str) -> None:
    tamper(f'UPDATE {TABLE} SET "after" = %s WHERE "seq" = 5', ["forged"])
    assert _broken("--batch", batch) == (
        f"audit chain broken: seq 5 (id {log[4].pk}): its hash does not match its content"
    )


@pytest.mark.parametrize(
    ("column", "value"),
    [("username", "mallory"), ("action", "call approved"), ("at", "2020-01-01 00:00:00")],
)
def test_any_column_changed_is_caught(log: list[AuditEntry], column: str, value: str) -> None:
    tamper(f'UPDATE {TABLE} SET "{column}" = %s WHERE "seq" = 2', [value])
    verdict = audit_chain_verify()
    assert isinstance(verdict, ChainBroken)
    assert verdict.seq == 2


def test_an_entry_rehashed_after_its_change_breaks_the_next_link(log: list[AuditEntry]) -> None:
    forged = log[2]
    forged.after = "forged"
    tamper(
        f'UPDATE {TABLE} SET "after" = %s, "hash" = %s WHERE "seq" = 3',
        ["forged", audit_entry_hash(forged)],
    )
    assert _broken() == (
        f"audit chain broken: seq 4 (id {log[3].pk}): its prev_hash is not the hash of seq 3"
    )


def test_a_deleted_entry_is_named(log: list[AuditEntry]) -> None:
    tamper(f'DELETE FROM {TABLE} WHERE "seq" = 4')
    assert _broken() == "audit chain broken: seq 4 is missing: the log goes from seq 3 to seq 5"


def test_the_first_entry_deleted_is_named(log: list[AuditEntry]) -> None:
    tamper(f'DELETE FROM {TABLE} WHERE "seq" = 1')
    assert _broken() == "audit chain broken: seq 1 is missing: the log goes from seq 0 to seq 2"


def test_the_last_entries_deleted_are_named_by_the_head(log: list[AuditEntry]) -> None:
    tamper(f'DELETE FROM {TABLE} WHERE "seq" >= 6')
    assert _broken() == (
        "audit chain broken: seq 6 is missing: the log ends at seq 5, its head is at seq 7"
    )


def test_an_entry_inserted_past_the_head_is_named(log: list[AuditEntry]) -> None:
    row = log[-1]
    tamper(
        INSERT,
        [row.at, "", "call approved", "call", "99", "", "", ENTRIES + 1, row.hash, "f" * 64],
    )
    assert (
        _broken()
        == f"audit chain broken: seq {ENTRIES + 1}: written past the chain's head at seq {ENTRIES}"
    )


def test_an_entry_inserted_before_the_first_is_named(log: list[AuditEntry]) -> None:
    row = log[0]
    tamper(
        INSERT,
        [row.at, "", "call approved", "call", "99", "", "", 0, GENESIS_HASH, "f" * 64],
    )
    verdict = audit_chain_verify()
    assert isinstance(verdict, ChainBroken)
    assert verdict.seq == 0
    assert "out of sequence: seq 1 was expected" in verdict.problem


def test_a_renumbered_entry_is_named_where_it_went_missing(log: list[AuditEntry]) -> None:
    tamper(f'UPDATE {TABLE} SET "seq" = 100 WHERE "seq" = 3')
    assert _broken() == "audit chain broken: seq 3 is missing: the log goes from seq 2 to seq 4"


def test_a_head_moved_away_from_the_last_entry_is_caught(log: list[AuditEntry]) -> None:
    tamper(f'UPDATE {HEAD_TABLE} SET "hash" = %s', ["e" * 64])
    assert _broken() == (
        f"audit chain broken: seq {ENTRIES} (id {log[-1].pk}): its hash is not the one the "
        "chain's head holds"
    )


def test_a_head_row_deleted_is_caught(log: list[AuditEntry]) -> None:
    tamper(f"DELETE FROM {HEAD_TABLE}")
    assert (
        _broken() == "audit chain broken: the chain's head row is missing while the log has entries"
    )


def test_a_page_is_the_entries_after_oldest_first(log: list[AuditEntry]) -> None:
    page = audit_page(after=2, limit=3)
    assert [item["seq"] for item in page] == [3, 4, 5]
    assert page[0] == audit_item(AuditEntry.objects.get(seq=3))
    assert audit_page(after=ENTRIES, limit=10) == []
    with pytest.raises(ValueError, match="0"):
        audit_page(after=0, limit=0)


def test_the_items_stop_at_the_latest_when_asked(log: list[AuditEntry]) -> None:
    seen = []
    for item in audit_items(after=0, batch=2):
        seen.append(item["seq"])
        if item["seq"] == 1:  # written after the export began: the next export's
            audit_record(
                action=AuditEntry.Action.CALL_EXPIRED,
                object_type=AuditEntry.ObjectType.CALL,
                object_id=99,
            )
    assert seen == list(range(1, ENTRIES + 1))


def test_the_head_is_the_latest_entry(log: list[AuditEntry]) -> None:
    assert audit_head() == (ENTRIES, log[-1].hash)


def test_the_head_of_an_empty_log_is_the_genesis(db: None) -> None:
    assert audit_head() == (0, GENESIS_HASH)
