"""``manage.py add_channel``: a channel made and audited, its secret shown once, bad input
refused with nothing made."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from approvals.models import AuditEntry
from notifications.channels import (
    BAD_SECRET,
    BAD_WEBHOOK_TARGET,
    SECRET_NOT_WEBHOOK,
    UNKNOWN_EVENT,
    UNKNOWN_GATE,
    UNKNOWN_KIND,
)
from notifications.models import NotificationChannel
from tests.outbox import HOOK, SECRET, holding_agent

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("add_channel", *args, stdout=out)
    return out.getvalue()


def test_add_channel_makes_a_webhook_with_a_new_secret_shown_once() -> None:
    out = run("webhook", HOOK, "--events", "call.held,call.decided", "--name", "ops")
    lines = out.rstrip("\n").split("\n")
    channel = NotificationChannel.objects.get()
    assert lines[-1] == str(channel.pk)
    assert channel.secret.startswith("whsec_")
    assert channel.secret in out
    assert channel.events == ["call.held", "call.decided"]
    assert channel.gates == []
    assert channel.kind == "webhook"
    assert channel.target == HOOK
    entry = AuditEntry.objects.get(object_type=AuditEntry.ObjectType.NOTIFICATION_CHANNEL)
    assert entry.action == AuditEntry.Action.ADMIN_ADD
    assert entry.object_id == str(channel.pk)
    for secret in (channel.secret, "T0KEN", "also-secret"):
        assert secret not in entry.after
    assert "hooks.example.test" in entry.after


def test_add_channel_defaults_to_every_event_and_keeps_a_given_secret() -> None:
    holding_agent()
    out = run("webhook", HOOK, "--secret", SECRET, "--gates", "finance")
    channel = NotificationChannel.objects.get()
    assert SECRET not in out
    assert channel.secret == SECRET
    assert channel.events == list(NotificationChannel.Event.values)
    assert channel.gates == ["finance"]
    run("email", "approvers")
    run("apprise", "json://127.0.0.1:9/hook")
    assert NotificationChannel.objects.count() == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("sms", "+15550100"), UNKNOWN_KIND.format(kind="sms")),
        (("webhook", "ftp://example.test/"), BAD_WEBHOOK_TARGET),
        (
            ("webhook", HOOK, "--events", "call.held,call.lost"),
            UNKNOWN_EVENT.format(event="call.lost"),
        ),
        (("webhook", HOOK, "--gates", "nowhere"), UNKNOWN_GATE.format(gate="nowhere")),
        (("webhook", HOOK, "--secret", "hunter2"), BAD_SECRET),
        (("email", "approvers", "--secret", SECRET), SECRET_NOT_WEBHOOK),
    ],
)
def test_add_channel_refuses_bad_input_and_creates_nothing(
    args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CommandError) as refused:
        run(*args)
    assert str(refused.value) == message
    assert NotificationChannel.objects.count() == 0
    assert AuditEntry.objects.count() == 0
