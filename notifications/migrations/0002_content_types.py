"""The content types of the three models taken over from approvals now name this app, so that
the permissions given on them (``notifications.change_notification``, …) and admin's history
of their rows stay attached."""

from __future__ import annotations

from typing import Any

from django.db import migrations

MODELS = ("notificationchannel", "notification", "deliveryattempt")


def _relabel(apps: Any, schema_editor: Any, *, old: str, new: str) -> None:
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(
        schema_editor.connection.alias
    )
    for model in MODELS:
        # A content type already made under the new label (post_migrate makes them) is kept.
        if not content_types.filter(app_label=new, model=model).exists():
            content_types.filter(app_label=old, model=model).update(app_label=new)


def relabel_forward(apps: Any, schema_editor: Any) -> None:
    _relabel(apps, schema_editor, old="approvals", new="notifications")


def relabel_back(apps: Any, schema_editor: Any) -> None:
    _relabel(apps, schema_editor, old="notifications", new="approvals")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("notifications", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(relabel_forward, relabel_back),
    ]
