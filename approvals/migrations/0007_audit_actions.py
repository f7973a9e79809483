"""The audit log's new actions: users, passwords, groups and permissions, standing rules
created by an approval's scope, login lockouts; and the ``login`` object type. Choices only: no
table changes."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0006_ledger_entries_plural"),
    ]

    operations = [
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
                    ("login locked out", "login locked out"),
                    ("login unlocked", "login unlocked"),
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
                    ("login", "login"),
                    ("permissionrule", "permissionrule"),
                    ("toolclass", "toolclass"),
                    ("user", "user"),
                ],
                max_length=64,
            ),
        ),
    ]
