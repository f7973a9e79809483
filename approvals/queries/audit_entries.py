"""The audit table's guard: triggers with which the database itself refuses every ``UPDATE``
and ``DELETE`` of an entry, whatever sends it — the ORM, admin, a delete cascade, raw SQL
(docs/reliability.md, "The audit log is append-only").

Created by migration ``0009_audit_guard``; its reverse is the only caller of ``guard_drop`` in
the application. Both raise ``IntegrityError`` with ``AUDIT_NOT_CHANGED`` or
``AUDIT_NOT_DELETED``.

Not refused: PostgreSQL's ``TRUNCATE`` (row triggers do not see it, so ``manage.py flush``
empties the table there, with every other table) and ``DROP TABLE``/``DROP TRIGGER``. Each
needs the table owner's rights, which a server role kept apart from the migrating one lacks
(docs/reliability.md).

On SQLite, a migration that alters this table rebuilds it (a new table, the rows copied, the
old one dropped), and the triggers go with the old table: such a migration must call
``guard_create`` again (``tests/approvals/test_audit_guard.py`` fails otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from approvals.models import AUDIT_NOT_CHANGED, AUDIT_NOT_DELETED, AuditEntry
from approvals.queries import sql

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

# The names the guard's triggers go by, per vendor (tests look them up).
TRIGGERS = {
    "sqlite": ("approvals_auditentry_no_update", "approvals_auditentry_no_delete"),
    "postgresql": ("approvals_auditentry_append_only",),
}

_SQLITE_CREATE = (
    sql.statement(
        "CREATE TRIGGER approvals_auditentry_no_update BEFORE UPDATE ON {A}"
        f" BEGIN SELECT RAISE(ABORT, '{AUDIT_NOT_CHANGED}'); END",
        A=AuditEntry,
    ),
    sql.statement(
        "CREATE TRIGGER approvals_auditentry_no_delete BEFORE DELETE ON {A}"
        f" BEGIN SELECT RAISE(ABORT, '{AUDIT_NOT_DELETED}'); END",
        A=AuditEntry,
    ),
)
_SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS approvals_auditentry_no_update",
    "DROP TRIGGER IF EXISTS approvals_auditentry_no_delete",
)
# restrict_violation (23001) is an integrity error, as SQLite's RAISE(ABORT) is: the same
# exception on both databases.
_POSTGRESQL_CREATE = (
    f"""
CREATE FUNCTION approvals_auditentry_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'restrict_violation',
        MESSAGE = CASE TG_OP WHEN 'DELETE' THEN '{AUDIT_NOT_DELETED}'
                             ELSE '{AUDIT_NOT_CHANGED}' END;
END
$$
""",
    sql.statement(
        "CREATE TRIGGER approvals_auditentry_append_only BEFORE UPDATE OR DELETE ON {A}"
        " FOR EACH ROW EXECUTE FUNCTION approvals_auditentry_refuse()",
        A=AuditEntry,
    ),
)
_POSTGRESQL_DROP = (
    sql.statement("DROP TRIGGER IF EXISTS approvals_auditentry_append_only ON {A}", A=AuditEntry),
    "DROP FUNCTION IF EXISTS approvals_auditentry_refuse()",
)
_CREATE = {"sqlite": _SQLITE_CREATE, "postgresql": _POSTGRESQL_CREATE}
_DROP = {"sqlite": _SQLITE_DROP, "postgresql": _POSTGRESQL_DROP}


def _run(connection: BaseDatabaseWrapper, statements: Mapping[str, tuple[str, ...]]) -> None:
    try:
        chosen = statements[connection.vendor]
    except KeyError:
        raise NotImplementedError(connection.vendor) from None
    with connection.cursor() as cursor:
        for statement in chosen:
            cursor.execute(statement)


def guard_create(connection: BaseDatabaseWrapper) -> None:
    """Install the triggers on ``connection``'s database."""
    _run(connection, _CREATE)


def guard_drop(connection: BaseDatabaseWrapper) -> None:
    """Remove them: the migration's reverse, and the test suite's flush on SQLite."""
    _run(connection, _DROP)
