"""The channels, the outbox and the delivery attempts, taken over from the approvals app
(its migration 0015) with their tables as they are: created in this app's state only. The
tables, their indexes and the channels' triggers are approvals' migrations 0011 and 0014."""

from __future__ import annotations

import uuid

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("approvals", "0015_notifications_app"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="NotificationChannel",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
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
                            models.JSONField(
                                default=list, help_text="The events sent: call.held, …."
                            ),
                        ),
                        (
                            "gates",
                            models.JSONField(
                                blank=True,
                                default=list,
                                help_text="Gate names; empty = every gate.",
                            ),
                        ),
                        ("enabled", models.BooleanField(default=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={"db_table": "approvals_notificationchannel"},
                ),
                migrations.CreateModel(
                    name="Notification",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
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
                        (
                            "payload",
                            models.TextField(help_text="The JSON body exactly as committed."),
                        ),
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
                                db_index=False,
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
                                to="notifications.notificationchannel",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "approvals_notification",
                        "indexes": [
                            models.Index(
                                fields=["status", "next_attempt_at"], name="notification_due"
                            ),
                            models.Index(
                                fields=["call", "channel", "created_at"],
                                name="notification_call_channel",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="DeliveryAttempt",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("at", models.DateTimeField()),
                        ("duration_ms", models.PositiveIntegerField()),
                        ("ok", models.BooleanField()),
                        ("status_code", models.PositiveSmallIntegerField(blank=True, null=True)),
                        (
                            "error",
                            models.TextField(
                                blank=True, help_text="Short; never a secret or credentials."
                            ),
                        ),
                        (
                            "notification",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="delivery_attempts",
                                to="notifications.notification",
                            ),
                        ),
                    ],
                    options={"db_table": "approvals_deliveryattempt"},
                ),
            ],
        ),
    ]
