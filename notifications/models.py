"""The notifications' tables: the channels, the outbox and each delivery attempt. They keep
the table names they were created under in the approvals app (its migration 0011)."""

from __future__ import annotations

import uuid

from django.db import models

from approvals.models import Call


class NotificationChannel(models.Model):
    """Where notifications go (docs/notifications.md): edited in admin or ``add_channel``."""

    class Kind(models.TextChoices):
        EMAIL = "email", "email"
        WEBHOOK = "webhook", "webhook"
        APPRISE = "apprise", "apprise"

    class Event(models.TextChoices):
        HELD = "call.held", "call.held"
        DECIDED = "call.decided", "call.decided"
        EXPIRED = "call.expired", "call.expired"
        CANCELLED = "call.cancelled", "call.cancelled"
        EXPIRING = "call.expiring", "call.expiring"

    name = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    target = models.TextField(
        help_text="email: 'approvers' or comma-separated addresses; webhook: an http(s) URL; "
        "apprise: an Apprise URL."
    )
    secret = models.CharField(
        max_length=200, blank=True, help_text="Webhook only: the signing secret, 'whsec_…'."
    )
    events = models.JSONField(default=list, help_text="The events sent: call.held, ….")
    gates = models.JSONField(default=list, blank=True, help_text="Gate names; empty = every gate.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "approvals_notificationchannel"

    def __str__(self) -> str:
        return self.name or f"{self.kind} channel {self.pk}"


class Notification(models.Model):
    """The outbox: one message of one channel about one event of a call, written in the
    transaction of the change it reports and delivered by the delivery loop."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed"

    # The webhook-id is f"msg_{id.hex}", stable across retries.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    channel = models.ForeignKey(
        NotificationChannel, on_delete=models.CASCADE, related_name="notifications"
    )
    # Indexed first in ``notification_call_channel``: an index of its own would be one more
    # written with every message, in the transaction of the change the message reports.
    call = models.ForeignKey(
        Call, on_delete=models.PROTECT, related_name="notifications", db_index=False
    )
    event = models.CharField(max_length=16, choices=NotificationChannel.Event.choices)
    payload = models.TextField(help_text="The JSON body exactly as committed.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField()
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "approvals_notification"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="notification_due"),
            # A call's messages (its deletion's check too), and a claim's order check: the
            # earlier messages of a channel and call.
            models.Index(
                fields=["call", "channel", "created_at"], name="notification_call_channel"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} of call {self.call_id} ({self.status})"


class DeliveryAttempt(models.Model):
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="delivery_attempts"
    )
    at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    ok = models.BooleanField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, help_text="Short; never a secret or credentials.")

    class Meta:
        db_table = "approvals_deliveryattempt"

    def __str__(self) -> str:
        return f"attempt at {self.at:%Y-%m-%d %H:%M:%S} ({'ok' if self.ok else 'failed'})"
