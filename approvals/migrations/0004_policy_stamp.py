"""The policy stamp and the triggers that renew it (see ``approvals.policies``).

The SQL is written out here, not imported, so that this migration stays what it was when the
code around it changes. ``approvals.policies`` checks at every read that the triggers are all
there: a later migration that rebuilds one of these tables (SQLite's way of altering a
column) drops its triggers, and the cache then stays off until they are made again.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.db import migrations, models

TABLES = (
    "approvals_caprule",
    "approvals_permissionrule",
    "approvals_toolclass",
    "approvals_budget",
)
EVENTS = ("insert", "update", "delete")

SQLITE_TRIGGER = """
CREATE TRIGGER countersign_policy_{table}_{event} AFTER {event} ON {table}
BEGIN
    INSERT INTO approvals_policystamp (id, stamp) VALUES (1, random())
    ON CONFLICT (id) DO UPDATE SET stamp = excluded.stamp;
END
"""

# Per statement, so TRUNCATE counts too. random() has 52 random bits, spread over ±9e18.
POSTGRESQL_FUNCTION = """
CREATE FUNCTION countersign_policy_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO approvals_policystamp (id, stamp)
    VALUES (1, ((random() - 0.5) * 1.8e19)::bigint)
    ON CONFLICT (id) DO UPDATE SET stamp = excluded.stamp;
    RETURN NULL;
END
$$
"""
POSTGRESQL_TRIGGER = """
CREATE TRIGGER countersign_policy_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table}
FOR EACH STATEMENT EXECUTE FUNCTION countersign_policy_changed()
"""


def create_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        statements = [
            SQLITE_TRIGGER.format(table=table, event=event) for table in TABLES for event in EVENTS
        ]
    elif vendor == "postgresql":
        statements = [POSTGRESQL_FUNCTION]
        statements += [POSTGRESQL_TRIGGER.format(table=table) for table in TABLES]
    else:
        return  # no triggers: the policies are read afresh for every call
    for statement in statements:
        schema_editor.execute(statement)
    stamp = secrets.randbits(64) - 2**63  # unlike any stamp of a database made before
    apps.get_model("approvals", "PolicyStamp").objects.create(id=1, stamp=stamp)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for table in TABLES:
            for event in EVENTS:
                schema_editor.execute(f"DROP TRIGGER IF EXISTS countersign_policy_{table}_{event}")
    elif vendor == "postgresql":
        for table in TABLES:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS countersign_policy_changed ON {table}")
        schema_editor.execute("DROP FUNCTION IF EXISTS countersign_policy_changed()")


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0003_history_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="PolicyStamp",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("stamp", models.BigIntegerField()),
            ],
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
