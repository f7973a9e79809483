"""The notifications' admin: "Retry now" audited, channels' edits audited with their secrets
masked."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import AuditEntry
from notifications.channels import BAD_WEBHOOK_TARGET, UNKNOWN_APPRISE_SCHEME
from notifications.models import Notification, NotificationChannel
from tests.factories import user_make
from tests.outbox import HOOK, held, holding_agent, webhook_channel

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(user_make(username="root", superuser=True))
    return client


def test_admin_retry_now_tries_a_failed_message_again_audited(admin_client: Client) -> None:
    agent = holding_agent()
    webhook_channel(HOOK)
    held(agent)
    held(agent)
    message, delivered = Notification.objects.order_by("created_at")
    later = timezone.now() + timedelta(hours=2)
    Notification.objects.filter(pk=message.pk).update(
        status=Notification.Status.FAILED, next_attempt_at=later, attempts=9
    )
    Notification.objects.filter(pk=delivered.pk).update(
        status=Notification.Status.DELIVERED, delivered_at=timezone.now(), attempts=1
    )
    response = admin_client.post(
        "/admin/notifications/notification/",
        {"action": "retry_now", "_selected_action": [str(message.pk), str(delivered.pk)]},
        follow=True,
    )
    assert (
        "1 notification(s) to be tried again now. 1 already delivered" in response.content.decode()
    )
    delivered.refresh_from_db()
    assert delivered.status == Notification.Status.DELIVERED
    message.refresh_from_db()
    assert message.status == Notification.Status.PENDING
    assert message.next_attempt_at <= timezone.now()
    entry = AuditEntry.objects.get(action=AuditEntry.Action.NOTIFICATION_RETRIED)
    assert entry.object_id == str(message.pk)
    assert entry.username == "root"
    assert entry.before == "failed"
    assert entry.after == "pending"
    page = admin_client.get(f"/admin/notifications/notification/{message.pk}/change/")
    assert page.status_code == 200


def test_admin_edits_of_a_channel_are_audited_with_the_secret_masked(
    admin_client: Client,
) -> None:
    response = admin_client.post(
        "/admin/notifications/notificationchannel/add/",
        {
            "name": "ops",
            "kind": "webhook",
            "target": HOOK,
            "secret": "",
            "events": ["call.held", "call.expiring"],
            "gates": "",
            "enabled": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    channel = NotificationChannel.objects.get()
    assert channel.secret.startswith("whsec_")
    refused = admin_client.post(
        f"/admin/notifications/notificationchannel/{channel.pk}/change/",
        {
            "name": "ops",
            "kind": "webhook",
            "target": "not a url",
            "secret": channel.secret,
            "events": ["call.held"],
            "gates": "",
            "enabled": "on",
        },
    )
    assert refused.status_code == 200
    assert BAD_WEBHOOK_TARGET in refused.content.decode()
    admin_client.post(
        f"/admin/notifications/notificationchannel/{channel.pk}/delete/", {"post": "yes"}
    )
    assert NotificationChannel.objects.count() == 0
    entries = list(
        AuditEntry.objects.filter(object_type=AuditEntry.ObjectType.NOTIFICATION_CHANNEL).order_by(
            "pk"
        )
    )
    assert [entry.action for entry in entries] == [
        AuditEntry.Action.ADMIN_ADD,
        AuditEntry.Action.ADMIN_DELETE,
    ]
    for entry in entries:
        text = entry.before + entry.after
        assert channel.secret not in text
        assert "T0KEN" not in text
        assert "also-secret" not in text


def test_admin_refuses_an_apprise_target_of_an_unknown_service(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/notifications/notificationchannel/add/",
        {
            "name": "chat",
            "kind": "apprise",
            "target": "slak://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7",
            "secret": "",
            "events": ["call.held"],
            "gates": "",
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    shown = html.escape(UNKNOWN_APPRISE_SCHEME.format(scheme="slak"))
    assert shown in response.content.decode()
    assert NotificationChannel.objects.count() == 0
    channel_entries = AuditEntry.objects.filter(
        object_type=AuditEntry.ObjectType.NOTIFICATION_CHANNEL
    )
    assert not channel_entries.exists()
