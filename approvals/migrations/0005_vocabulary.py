"""The vocabulary's choices (``Call.Status``, ``Approval.Scope``, ``AuditEntry.Action`` and
``ObjectType``, the run counters' scope). Choices live in Python only: no table changes, and
no stored value is rewritten (audit entries never are)."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0004_policy_stamp"),
    ]

    operations = [
        migrations.AlterField(
            model_name="approval",
            name="scope",
            field=models.CharField(
                choices=[("once", "once"), ("run", "run"), ("always", "always")],
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
                ],
                max_length=64,
            ),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="object_type",
            field=models.CharField(
                choices=[
                    ("agent", "agent"),
                    ("agent token", "agent token"),
                    ("budget", "budget"),
                    ("call", "call"),
                    ("cap rule", "cap rule"),
                    ("gate", "gate"),
                    ("group", "group"),
                    ("ledgerentry", "ledgerentry"),
                    ("permissionrule", "permissionrule"),
                    ("toolclass", "toolclass"),
                    ("user", "user"),
                ],
                max_length=64,
            ),
        ),
        migrations.AlterField(
            model_name="runcounter",
            name="scope",
            field=models.CharField(choices=[("run", "run"), ("day", "day")], max_length=8),
        ),
    ]
