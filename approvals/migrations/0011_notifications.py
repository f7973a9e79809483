"""The outbox of notifications, and the triggers by which a change to the channels renews
the policy stamp: each process keeps the channel list under it, as it keeps agents' policies
(``notifications.outbox``). The SQL is written out here, not imported, so that
this migration stays what it was when the code around it changes."""

from __future__ import annotations

import uuid
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

TABLE = "approvals_notificationchannel"
EVENTS = ("insert", "update", "delete")
SQLITE_TRIGGER = """
CREATE TRIGGER countersign_channels_{event} AFTER {event} ON approvals_notificationchannel
BEGIN
    INSERT INTO approvals_policystamp (id, stamp) VALUES (1, random())
    ON CONFLICT (id) DO UPDATE SET stamp = excluded.stamp;
END
"""
# The function of migration 0004, under a trigger name of its own (the policy cache counts
# its own four).
POSTGRESQL_TRIGGER = """
CREATE TRIGGER countersign_channels_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON approvals_notificationchannel
FOR EACH STATEMENT EXECUTE FUNCTION countersign_policy_changed()
"""


def create_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for event in EVENTS:
            schema_editor.execute(SQLITE_TRIGGER.format(event=event))
    elif vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_TRIGGER)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for event in EVENTS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS countersign_channels_{event}")
    elif vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS countersign_channels_changed ON {TABLE}")


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0010_call_edits"),
    ]

    operations = [
        migrations.CreateModel(
            name="NotificationChannel",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(blank=True, max_length=100)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("email", "email"),
                            ("webhook", "webhook"),
                            ("apprise", "apprise"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "target",
                    models.TextField(
                        help_text="email: 'approvers' or comma-separated addresses; webhook: an http(s) URL; apprise: an Apprise URL."
                    ),
                ),
                (
                    "secret",
                    models.CharField(
                        blank=True,
                        help_text="Webhook only: the signing secret, 'whsec_…'.",
                        max_length=200,
                    ),
                ),
                (
                    "events",
                    models.JSONField(default=list, help_text="The events sent: call.held, …."),
                ),
                (
                    "gates",
                    models.JSONField(
                        blank=True, default=list, help_text="Gate names; empty = every gate."
                    ),
                ),
                ("enabled", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.AddField(
            model_name="call",
            name="expiring_noticed_for",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="Notification",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "event",
                    models.CharField(
                        choices=[
                            ("call.held", "call.held"),
                            ("call.decided", "call.decided"),
                            ("call.expired", "call.expired"),
                            ("call.cancelled", "call.cancelled"),
                            ("call.expiring", "call.expiring"),
                        ],
                        max_length=16,
                    ),
                ),
                ("payload", models.TextField(help_text="The JSON body exactly as committed.")),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "pending"),
                            ("delivered", "delivered"),
                            ("failed", "failed"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField()),
                ("next_attempt_at", models.DateTimeField()),
                ("lease_until", models.DateTimeField(blank=True, null=True)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
                (
                    "call",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="notifications",
                        to="approvals.call",
                    ),
                ),
                (
                    "channel",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notifications",
                        to="approvals.notificationchannel",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="DeliveryAttempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField()),
                ("duration_ms", models.PositiveIntegerField()),
                ("ok", models.BooleanField()),
                ("status_code", models.PositiveSmallIntegerField(blank=True, null=True)),
                (
                    "error",
                    models.TextField(blank=True, help_text="Short; never a secret or credentials."),
                ),
                (
                    "notification",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="delivery_attempts",
                        to="approvals.notification",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(fields=["status", "next_attempt_at"], name="notification_due"),
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                fields=["channel", "call", "created_at"], name="notification_channel_call"
            ),
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
