"""Audit entries keep their actor's username as text as well as the link, filled in for the
entries already there (before ``0009_audit_guard`` makes every entry unchangeable); a person or
agent with entries can no longer be deleted (``PROTECT``, no column changes)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def _usernames(apps: Any, schema_editor: Any) -> None:
    entries = apps.get_model("approvals", "AuditEntry")
    users = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    # The historical model has the plain manager: its update is allowed, once, here.
    entries.objects.using(schema_editor.connection.alias).filter(user__isnull=False).update(
        username=Subquery(users.objects.filter(pk=OuterRef("user_id")).values("username")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0007_audit_actions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="username",
            field=models.CharField(blank=True, max_length=150),
        ),
        migrations.RunPython(_usernames, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="auditentry",
            name="agent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                to="approvals.agent",
            ),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="user",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
