"""What an intruder with the database's own rights can do to the audit log, for the tests
that show the chain catches it: the guard's triggers off (dropped on SQLite,
``session_replication_role = replica`` on PostgreSQL), then any statement."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from approvals.audit_chain import audit_entry_hash
from approvals.models import AuditChainHead, AuditEntry

GUARD = importlib.import_module("approvals.migrations.0009_audit_guard")
TABLE = f'"{AuditEntry._meta.db_table}"'
HEAD_TABLE = f'"{AuditChainHead._meta.db_table}"'
INSERT = (
    f"INSERT INTO {TABLE} (at, username, action, object_type, object_id, before, after,"
    ' seq, prev_hash, "hash") VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)'
)


@contextmanager
def guard_off() -> Iterator[None]:
    """The guard's triggers off, as only someone with the database's own rights can."""
    if connection.vendor == "sqlite":
        GUARD.guard_drop(connection)
        try:
            yield
        finally:
            GUARD.guard_create(connection)
        return
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = DEFAULT")


def tamper(statement: str, params: Sequence[Any] | None = None) -> None:
    """Run ``statement`` with the guard off, committed (or in the test's transaction)."""
    with transaction.atomic(), guard_off(), connection.cursor() as cursor:
        cursor.execute(statement, params or [])


def rewrite_rechained(seq: int, **fields: Any) -> None:
    """Change entry ``seq``'s ``action``, ``object_id``, ``after``, ``user_id`` or
    ``username``, then make
    the chain whole again, as an intruder who knows the arithmetic would: every entry from it
    on hashed and linked anew, and the head moved to the last one. Only a signed head kept
    elsewhere, or what the entry's content itself proves, gives it away."""
    entries = list(AuditEntry.objects.filter(seq__gte=seq).order_by("seq"))
    prev_hash = entries[0].prev_hash
    with transaction.atomic(), guard_off(), connection.cursor() as cursor:
        for entry in entries:
            if entry.seq == seq:
                for name, value in fields.items():
                    setattr(entry, name, value)
            entry.prev_hash = prev_hash
            entry.hash = prev_hash = audit_entry_hash(entry)
            cursor.execute(
                f'UPDATE {TABLE} SET "action" = %s, "object_id" = %s, "after" = %s,'
                ' "user_id" = %s, "username" = %s, "prev_hash" = %s, "hash" = %s WHERE "id" = %s',
                [
                    entry.action,
                    entry.object_id,
                    entry.after,
                    entry.user_id,
                    entry.username,
                    entry.prev_hash,
                    entry.hash,
                    entry.pk,
                ],
            )
        cursor.execute(f'UPDATE {HEAD_TABLE} SET "hash" = %s', [prev_hash])
