"""Grants that say what they grant (docs/ui.md, "Grants"): a permission rule may be bound to
one digest of the arguments, and an approval's grant keeps its call, who granted it and when;
the scopes ``run_same`` and ``hour``; the audit action ``standing rule revoked``.

The grants made before are filled in from their ``standing rule created`` entries. SQLite adds
the NOT NULL digest column by rebuilding the table, which drops the triggers of
``0004_policy_stamp`` on the permission rules: they are made again after it (PostgreSQL keeps
them through ALTER TABLE). The SQL is 0004's own, so both stay alike.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

POLICY_STAMP = importlib.import_module("approvals.migrations.0004_policy_stamp")
TABLE = "approvals_permissionrule"


def create_permission_rule_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    for event in POLICY_STAMP.EVENTS:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS countersign_policy_{TABLE}_{event}")
        schema_editor.execute(POLICY_STAMP.SQLITE_TRIGGER.format(table=TABLE, event=event))


def grants_from_audit(apps: Any, schema_editor: Any) -> None:
    """Each rule an approval created gets its call, approver and time from its entry."""
    rules = apps.get_model("approvals", "PermissionRule")
    calls = apps.get_model("approvals", "Call")
    entries = apps.get_model("approvals", "AuditEntry").objects.filter(
        action="standing rule created", object_type="permissionrule"
    )
    for entry in entries.order_by("seq").iterator():
        try:
            call_id = json.loads(entry.after).get("call")
        except (ValueError, AttributeError):
            call_id = None
        rules.objects.filter(pk=entry.object_id, granted_at__isnull=True).update(
            granted_at=entry.at,
            granted_by_id=entry.user_id,
            call_id=calls.objects.filter(pk=call_id).values_list("pk", flat=True).first()
            if call_id
            else None,
        )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0019_cap_rule_shadow"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # Backwards this runs last, after the column is removed (another rebuild).
        migrations.RunPython(migrations.RunPython.noop, create_permission_rule_triggers),
        migrations.AddField(
            model_name="permissionrule",
            name="arguments_sha256",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="Empty = any arguments.",
                max_length=64,
            ),
        ),
        migrations.AddField(
            model_name="permissionrule",
            name="call",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="grants",
                to="approvals.call",
            ),
        ),
        migrations.AddField(
            model_name="permissionrule",
            name="granted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="permissionrule",
            name="granted_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="grants",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(create_permission_rule_triggers, migrations.RunPython.noop),
        migrations.RunPython(grants_from_audit, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="approval",
            name="scope",
            field=models.CharField(
                choices=[
                    ("once", "once"),
                    ("run_same", "run_same"),
                    ("run", "run"),
                    ("hour", "hour"),
                    ("always", "always"),
                ],
                default="once",
                max_length=8,
            ),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="action",
            field=models.CharField(
                choices=[
                    ("call allowed", "call allowed"),
                    ("call refused", "call refused"),
                    ("call pending", "call pending"),
                    ("call approved", "call approved"),
                    ("call denied", "call denied"),
                    ("call expired", "call expired"),
                    ("call cancelled", "call cancelled"),
                    ("call extended", "call extended"),
                    ("call edited", "call edited"),
                    ("agent created", "agent created"),
                    ("agent updated", "agent updated"),
                    ("token issued", "token issued"),
                    ("token revoked", "token revoked"),
                    ("gate created", "gate created"),
                    ("cap rule saved", "cap rule saved"),
                    ("cap rule disabled", "cap rule disabled"),
                    ("ledger entry voided", "ledger entry voided"),
                    ("admin add", "admin add"),
                    ("admin change", "admin change"),
                    ("admin delete", "admin delete"),
                    ("user created", "user created"),
                    ("user deleted", "user deleted"),
                    ("user activated", "user activated"),
                    ("user deactivated", "user deactivated"),
                    ("user changed", "user changed"),
                    ("password set", "password set"),
                    ("user groups changed", "user groups changed"),
                    ("user permissions changed", "user permissions changed"),
                    ("group created", "group created"),
                    ("group deleted", "group deleted"),
                    ("group permissions changed", "group permissions changed"),
                    ("standing rule created", "standing rule created"),
                    ("standing rule revoked", "standing rule revoked"),
                    ("login locked out", "login locked out"),
                    ("login unlocked", "login unlocked"),
                    ("notification retried", "notification retried"),
                ],
                max_length=64,
            ),
        ),
    ]
