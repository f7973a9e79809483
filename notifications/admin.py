"""Notifications: channels edited and audited (secrets masked), the outbox read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest

from approvals.admin.base import AuditedAdmin, ReadOnlyAdmin, ReadOnlyInline, signed_in_user
from notifications.attempts import NotRetried, notification_retry
from notifications.channels import (
    ChannelInvalid,
    channel_check,
    channel_delete,
    channel_save,
    webhook_secret_new,
)
from notifications.masking import secret_masked, target_masked
from notifications.models import DeliveryAttempt, Notification, NotificationChannel

# In the pages of people who may not change channels, each field holding secrets is shown
# by a method that masks them.
MASKED_FIELDS = {"target": "target_masked", "secret": "secret_masked"}


class NotificationChannelForm(forms.ModelForm):  # type: ignore[type-arg]
    events = forms.MultipleChoiceField(
        choices=NotificationChannel.Event.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=list(NotificationChannel.Event.values),
    )
    gates = forms.CharField(
        required=False,
        help_text="Comma-separated gate names: only calls held at one of them. Empty = every gate.",
    )
    secret = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"size": 60, "autocomplete": "off"}),
        help_text="Webhook only: 'whsec_' and base64; empty on a new webhook = a new secret.",
    )

    class Meta:
        model = NotificationChannel
        fields = ["name", "kind", "target", "secret", "events", "gates", "enabled"]
        widgets = {"target": forms.TextInput(attrs={"size": 100, "autocomplete": "off"})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["gates"] = ", ".join(self.instance.gates)

    def clean_gates(self) -> list[str]:
        text = self.cleaned_data.get("gates") or ""
        return [gate.strip() for gate in text.split(",") if gate.strip()]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        kind, target = cleaned.get("kind"), cleaned.get("target")
        if kind is None or target is None or "events" not in cleaned:
            return cleaned
        secret = cleaned.get("secret") or ""
        if kind == NotificationChannel.Kind.WEBHOOK and not secret and self.instance.pk is None:
            secret = cleaned["secret"] = webhook_secret_new()
        try:
            channel_check(
                kind=kind,
                target=target,
                events=cleaned["events"],
                gates=cleaned.get("gates") or [],
                secret=secret,
            )
        except ChannelInvalid as error:
            raise ValidationError(str(error)) from None
        return cleaned


class DeliveryAttemptInline(ReadOnlyInline):
    model = DeliveryAttempt
    fields = ("at", "ok", "status_code", "error", "duration_ms")
    readonly_fields = fields
    ordering = ("-at",)


@admin.register(NotificationChannel)
class NotificationChannelAdmin(AuditedAdmin):
    """Audited like every model, with the secret and the target's credentials masked in the
    entries (``channel_snapshot``). Shown whole only on a channel's page, to people who may
    change channels; the list, and every page of people who may only view them, show each
    secret as ``••••`` (``notifications.masking``)."""

    form = NotificationChannelForm
    list_display = ("__str__", "kind", "target_masked", "events_shown", "gates_shown", "enabled")
    list_filter = ("kind", "enabled")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fields = list(super().get_fields(request, obj))
        if obj is None or self.has_change_permission(request, obj):
            return fields
        return [
            MASKED_FIELDS.get(field, field) if isinstance(field, str) else field for field in fields
        ]

    @admin.display(description="target")
    def target_masked(self, obj: NotificationChannel) -> str:
        return target_masked(obj.kind, obj.target)

    @admin.display(description="secret")
    def secret_masked(self, obj: NotificationChannel) -> str:
        return secret_masked(obj.secret)

    @admin.display(description="events")
    def events_shown(self, obj: NotificationChannel) -> str:
        return ", ".join(obj.events)

    @admin.display(description="gates")
    def gates_shown(self, obj: NotificationChannel) -> str:
        return ", ".join(obj.gates) or "all"

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        channel_save(channel=obj, user=signed_in_user(request))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        channel_delete(channel=obj, user=signed_in_user(request))


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    """The outbox: each message with its attempts; "Retry now" tries one again at once."""

    list_display = ("created_at", "event", "channel", "call", "status", "attempts", "delivered_at")
    list_filter = ("status", "event", "channel")
    readonly_fields = (
        "id",
        "channel",
        "call",
        "event",
        "status",
        "created_at",
        "next_attempt_at",
        "lease_until",
        "attempts",
        "delivered_at",
        "payload",
    )
    inlines = [DeliveryAttemptInline]
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    actions = ["retry_now"]

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("notifications.change_notification")

    @admin.action(description="Retry now", permissions=["retry"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        retried = 0
        for notification in queryset:
            try:
                notification_retry(notification=notification, user=signed_in_user(request))
            except NotRetried:
                continue
            retried += 1
        skipped = queryset.count() - retried
        message = f"{retried} notification(s) to be tried again now."
        if skipped:
            message += f" {skipped} already delivered: left alone."
        self.message_user(request, message, messages.SUCCESS if retried else messages.WARNING)
