"""The database refuses every UPDATE and DELETE of an audit entry: the triggers of
``approvals/queries/audit_entries.py`` (SQLite and PostgreSQL); the reverse drops them."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from approvals.queries.audit_entries import guard_create, guard_drop


def _create(apps: Any, schema_editor: Any) -> None:
    guard_create(schema_editor.connection)


def _drop(apps: Any, schema_editor: Any) -> None:
    guard_drop(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0008_audit_actor_kept"),
    ]

    operations = [migrations.RunPython(_create, _drop)]
