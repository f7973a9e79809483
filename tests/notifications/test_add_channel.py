"""``manage.py add_channel``: a channel made and audited, its secret shown once, bad input
refused with nothing made."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from approvals.models import AuditEntry
from notifications.channels import (
    APPRISE_UNAVAILABLE,
    BAD_APPRISE_TARGET,
    BAD_APPRISE_URL,
    BAD_SECRET,
    BAD_WEBHOOK_TARGET,
    PRIVATE_TARGET,
    SECRET_NOT_WEBHOOK,
    UNKNOWN_APPRISE_SCHEME,
    UNKNOWN_EVENT,
    UNKNOWN_GATE,
    UNKNOWN_KIND,
    ChannelInvalid,
    channel_add,
    channel_save,
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


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nosuchservice://token/abc", UNKNOWN_APPRISE_SCHEME.format(scheme="nosuchservice")),
        ("slack://only-one-part", BAD_APPRISE_URL.format(scheme="slack")),
        ("tgram://notatoken/123", BAD_APPRISE_URL.format(scheme="tgram")),
        ("dbus://desktop", APPRISE_UNAVAILABLE.format(scheme="dbus")),
        ("hooks.slack.com/services/x", BAD_APPRISE_TARGET),
        ("b\u00e4d://x/y", BAD_APPRISE_TARGET),
    ],
    ids=[
        "unknown-scheme",
        "slack-missing-tokens",
        "telegram-bad-token",
        "unavailable",
        "no-scheme",
        "not-a-scheme",
    ],
)
def test_an_apprise_target_its_own_parser_refuses_is_refused_when_saved(
    target: str, message: str
) -> None:
    """Refused at once, with the reason, instead of an attempt failing for a day."""
    with pytest.raises(CommandError) as refused:
        run("apprise", target)
    assert str(refused.value) == message
    assert NotificationChannel.objects.count() == 0


def test_apprise_targets_its_parser_takes_are_kept() -> None:
    for target in (
        "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7/#approvals",
        "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7",
        "ntfys://approvals-topic",
        "json://127.0.0.1:9/hook",
    ):
        run("apprise", target)
    assert NotificationChannel.objects.count() == 4


@pytest.mark.parametrize(
    ("kind", "target", "address"),
    [
        ("webhook", "http://127.0.0.1:9/hook", "loopback"),
        ("webhook", "https://[::1]/hook", "loopback"),
        ("webhook", "http://localhost/hook", "loopback"),
        ("webhook", "http://169.254.169.254/latest/meta-data", "link-local"),
        ("webhook", "http://10.0.0.7/hook", "private"),
        ("apprise", "json://192.168.1.20/hook", "private"),
        ("apprise", "ntfy://localhost/approvals", "loopback"),
    ],
)
def test_with_private_targets_off_a_private_target_is_refused_when_saved(
    settings: Any, kind: str, target: str, address: str
) -> None:
    settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS = False
    with pytest.raises(CommandError) as refused:
        run(kind, target)
    assert str(refused.value) == PRIVATE_TARGET.format(kind=address)
    assert NotificationChannel.objects.count() == 0
    settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS = True  # the default: kept
    run(kind, target)
    assert NotificationChannel.objects.count() == 1


def test_the_service_refuses_to_save_a_channel_changed_into_a_bad_one() -> None:
    channel = channel_add(kind="apprise", target="json://127.0.0.1:9/hook")
    channel.target = "nosuchservice://x"
    with pytest.raises(ChannelInvalid, match="Apprise knows no service nosuchservice://"):
        channel_save(channel=channel, user=None)
    channel.refresh_from_db()
    assert channel.target == "json://127.0.0.1:9/hook"
    assert AuditEntry.objects.count() == 1  # its creation only
