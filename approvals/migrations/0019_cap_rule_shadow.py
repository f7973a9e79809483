"""Shadow cap rules (docs/rules.md, "Shadow rules"): ``CapRule.shadow``, on each call the
reasons shadow rules would have given, and room in a ledger's rule for ``shadow <name>`` (a
shadow rule's ledgers are its own).

SQLite adds a NOT NULL column with a default by rebuilding the table, which drops the
triggers of ``0004_policy_stamp`` on the cap rules: they are made again after it (PostgreSQL
keeps them through ALTER TABLE). The SQL is 0004's own, so both stay alike.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.db import migrations, models

POLICY_STAMP = importlib.import_module("approvals.migrations.0004_policy_stamp")
TABLE = "approvals_caprule"


def create_cap_rule_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    for event in POLICY_STAMP.EVENTS:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS countersign_policy_{TABLE}_{event}")
        schema_editor.execute(POLICY_STAMP.SQLITE_TRIGGER.format(table=TABLE, event=event))


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0018_audit_chain"),
    ]

    operations = [
        # Backwards this runs last, after the column is removed (another rebuild).
        migrations.RunPython(migrations.RunPython.noop, create_cap_rule_triggers),
        migrations.AddField(
            model_name="caprule",
            name="shadow",
            field=models.BooleanField(
                default=False,
                help_text="Shadow: evaluated and recorded on every call, never holds or "
                "refuses one.",
            ),
        ),
        migrations.AddField(
            model_name="call",
            name="shadow",
            field=models.JSONField(default=list),
        ),
        migrations.AlterField(
            model_name="ledger",
            name="rule",
            field=models.CharField(
                help_text="The rule's name, casefolded; 'shadow name' for a shadow rule.",
                max_length=72,
            ),
        ),
        migrations.RunPython(create_cap_rule_triggers, migrations.RunPython.noop),
    ]
