"""What an intruder with the database's own rights can do to the audit log, for the tests
that show the chain catches it: the guard's triggers off (dropped on SQLite,
``session_replication_role = replica`` on PostgreSQL), then any statement."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

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
