"""The database refuses every UPDATE and DELETE of an audit entry, whatever sends it — the
ORM, admin, a delete cascade, raw SQL (SQLite and PostgreSQL); the reverse drops the guard.

The SQL is written out here, not imported, so that this migration stays what it was when the
code around it changes. Both guards raise ``IntegrityError`` with the messages of
``approvals.models.AUDIT_NOT_CHANGED`` and ``AUDIT_NOT_DELETED``.

Not refused: PostgreSQL's ``TRUNCATE`` (row triggers do not see it, so ``manage.py flush``
empties the table there) and ``DROP TABLE``/``DROP TRIGGER``, which need the table owner's
rights. On SQLite, a migration that rebuilds this table drops the triggers with the old table:
it must call ``guard_create`` again (tests/approvals/test_audit_guard.py fails otherwise).
The test suite's flush on SQLite drops and creates the guard through ``guard_drop`` and
``guard_create`` (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.db import migrations

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

# The names the guard's triggers go by, per vendor (tests look them up).
TRIGGERS = {
    "sqlite": ("approvals_auditentry_no_update", "approvals_auditentry_no_delete"),
    "postgresql": ("approvals_auditentry_append_only",),
}

_SQLITE_CREATE = (
    'CREATE TRIGGER approvals_auditentry_no_update BEFORE UPDATE ON "approvals_auditentry"'
    " BEGIN SELECT RAISE(ABORT, 'audit entries cannot be changed'); END",
    'CREATE TRIGGER approvals_auditentry_no_delete BEFORE DELETE ON "approvals_auditentry"'
    " BEGIN SELECT RAISE(ABORT, 'audit entries cannot be deleted'); END",
)
_SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS approvals_auditentry_no_update",
    "DROP TRIGGER IF EXISTS approvals_auditentry_no_delete",
)
# restrict_violation (23001) is an integrity error, as SQLite's RAISE(ABORT) is: the same
# exception on both databases.
_POSTGRESQL_CREATE = (
    """
CREATE FUNCTION approvals_auditentry_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'restrict_violation',
        MESSAGE = CASE TG_OP WHEN 'DELETE' THEN 'audit entries cannot be deleted'
                             ELSE 'audit entries cannot be changed' END;
END
$$
""",
    'CREATE TRIGGER approvals_auditentry_append_only BEFORE UPDATE OR DELETE ON "approvals_auditentry"'
    " FOR EACH ROW EXECUTE FUNCTION approvals_auditentry_refuse()",
)
_POSTGRESQL_DROP = (
    'DROP TRIGGER IF EXISTS approvals_auditentry_append_only ON "approvals_auditentry"',
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
    """Remove them."""
    _run(connection, _DROP)


def _create(apps: Any, schema_editor: Any) -> None:
    guard_create(schema_editor.connection)


def _drop(apps: Any, schema_editor: Any) -> None:
    guard_drop(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0008_audit_actor_kept"),
    ]

    operations = [migrations.RunPython(_create, _drop)]
