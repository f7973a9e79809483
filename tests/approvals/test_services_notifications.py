"""The outbox's writes: messages in the transaction of the change, the channels' filters, no
query without channels, the expiring notice, add_channel and admin."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals import delivery
from approvals.models import AuditEntry, Call, Notification, NotificationChannel
from approvals.selectors.calls import call_state
from approvals.services import calls as calls_service
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import call_cancel, call_extend, calls_expire_due
from approvals.services.notifications import (
    BAD_SECRET,
    BAD_WEBHOOK_TARGET,
    SECRET_NOT_WEBHOOK,
    UNKNOWN_EVENT,
    UNKNOWN_GATE,
    UNKNOWN_KIND,
    calls_expiring_notify,
    channel_add,
)
from tests.factories import user_make
from tests.outbox import SECRET, Event, held, holding_agent, webhook_channel

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example.test/countersign/T0KEN-in-the-path?key=also-secret"


def messages(**filters: Any) -> list[tuple[str, int]]:
    return sorted(
        Notification.objects.filter(**filters).values_list("event", "channel_id").order_by()
    )


def test_a_hold_writes_a_message_for_each_channel_that_takes_it(settings: Any) -> None:
    settings.COUNTERSIGN_PUBLIC_URL = "https://countersign.example.test"
    agent = holding_agent()
    every = webhook_channel(HOOK)
    finance = webhook_channel(HOOK, gates=["finance"])
    channel_add(kind="webhook", target=HOOK, secret=SECRET, gates=["finance"], events=["call.held"])
    decided_only = webhook_channel(HOOK, events=[Event.DECIDED])
    other_gate = webhook_channel(HOOK, gates=[""])  # the default gate only
    disabled = webhook_channel(HOOK)
    NotificationChannel.objects.filter(pk=disabled.pk).update(enabled=False)

    call = held(agent)

    rows = list(Notification.objects.filter(call=call))
    taken = {row.channel_id for row in rows}
    assert every.pk in taken
    assert finance.pk in taken
    assert len(taken) == 3
    assert decided_only.pk not in taken
    assert other_gate.pk not in taken
    assert disabled.pk not in taken
    body = json.loads(rows[0].payload)
    assert body["type"] == "call.held"
    assert body["data"]["call"] == call_state(Call.objects.get(pk=call.pk))
    assert body["data"]["url"] == f"https://countersign.example.test/calls/{call.pk}/"
    assert {row.status for row in rows} == {Notification.Status.PENDING}


def test_a_message_is_written_pending_due_at_once_and_untried() -> None:
    agent = holding_agent()
    first, second = webhook_channel(HOOK), webhook_channel(HOOK + "&second")
    call = held(agent)
    rows = list(Notification.objects.filter(call=call).order_by("channel_id"))
    assert [row.channel_id for row in rows] == [first.pk, second.pk]
    assert rows[0].pk != rows[1].pk
    assert rows[0].payload == rows[1].payload
    for row in rows:
        assert (row.event, row.status) == (Event.HELD, Notification.Status.PENDING)
        assert row.next_attempt_at == row.created_at
        assert (row.attempts, row.lease_until, row.delivered_at) == (0, None, None)


def test_a_rolled_back_change_writes_no_message() -> None:
    agent = holding_agent()
    webhook_channel(HOOK)

    def hold_then_fail() -> None:
        with transaction.atomic():
            held(agent)
            assert Notification.objects.count() == 1
            raise RuntimeError("the change fails after the hold")

    with pytest.raises(RuntimeError):
        hold_then_fail()
    assert Notification.objects.count() == 0
    assert Call.objects.count() == 0


def test_decisions_expiries_and_cancellations_each_write_theirs() -> None:
    agent = holding_agent()
    channel = webhook_channel(HOOK)
    approver = user_make(username="alice")
    approved, denied, expired, cancelled = (held(agent) for _ in range(4))
    for call, approve in ((approved, True), (denied, False)):
        call_decide(
            call_id=call.pk,
            user=approver,
            approve=approve,
            comment="ok" if approve else "no",
            arguments_sha256=call.arguments_sha256,
        )
    call_cancel(agent=agent, call_id=cancelled.pk)
    Call.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert calls_expire_due() == 1

    def events(call: Call) -> list[str]:
        return list(
            Notification.objects.filter(call=call, channel=channel)
            .order_by("created_at")
            .values_list("event", flat=True)
        )

    assert events(approved) == [Event.HELD, Event.DECIDED]
    assert events(denied) == [Event.HELD, Event.DECIDED]
    assert events(expired) == [Event.HELD, Event.EXPIRED]
    assert events(cancelled) == [Event.HELD, Event.CANCELLED]
    decided = json.loads(Notification.objects.get(call=denied, event=Event.DECIDED).payload)
    assert decided["data"]["call"]["status"] == "denied"
    assert decided["data"]["call"]["decision"]["by"] == "alice"
    assert decided["data"]["call"]["decision"]["comment"] == "no"
    approval = json.loads(Notification.objects.get(call=approved, event=Event.DECIDED).payload)
    assert [a["by"] for a in approval["data"]["call"]["approvals"]] == ["alice"]


def test_a_channel_made_or_disabled_later_is_seen_by_the_next_call() -> None:
    agent = holding_agent()
    held(agent)  # the channel list is read, and kept, with none in it
    channel = webhook_channel(HOOK)
    held(agent)
    assert messages() == [(Event.HELD, channel.pk)]
    channel.enabled = False
    channel.save()
    held(agent)
    assert len(messages()) == 1


def test_a_hold_costs_no_query_without_channels_and_one_insert_with_one(
    monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    """The same held submission, counted without the outbox, with it and no channel, and
    with one channel."""
    agent = holding_agent()
    held(agent)  # the policy and the channel list are cached
    with monkeypatch.context() as patched:
        patched.setattr(calls_service, "notifications_enqueue", lambda **_: 0)
        with CaptureQueriesContext(connection) as captured:
            held(agent)
    without_outbox = len(captured.captured_queries)
    with django_assert_num_queries(without_outbox):
        held(agent)
    webhook_channel(HOOK)
    held(agent)  # the channel list is read again under the new stamp
    with django_assert_num_queries(without_outbox + 1):
        held(agent)
    assert Notification.objects.count() == 2


def test_the_expiring_notice_is_written_once_per_deadline(settings: Any) -> None:
    settings.COUNTERSIGN_EXPIRING_NOTICE = 300
    agent = holding_agent()
    channel = webhook_channel(HOOK, events=[Event.EXPIRING])
    call = held(agent)
    assert call.expires_at is not None
    deadline = call.expires_at
    assert calls_expiring_notify(now=deadline - timedelta(seconds=301)) == 0
    assert calls_expiring_notify(now=deadline - timedelta(seconds=299)) == 1
    assert calls_expiring_notify(now=deadline - timedelta(seconds=200)) == 0
    assert messages() == [(Event.EXPIRING, channel.pk)]
    extended = call_extend(
        call_id=call.pk, user=user_make(username="alice"), now=deadline - timedelta(seconds=100)
    )
    assert extended.expires_at is not None
    assert extended.expires_at > deadline
    assert calls_expiring_notify(now=deadline - timedelta(seconds=50)) == 0
    assert calls_expiring_notify(now=extended.expires_at - timedelta(seconds=10)) == 1
    assert calls_expiring_notify(now=extended.expires_at - timedelta(seconds=5)) == 0
    assert messages() == [(Event.EXPIRING, channel.pk)] * 2
    payload = json.loads(Notification.objects.order_by("created_at").last().payload)  # type: ignore[union-attr]
    assert payload["data"]["call"]["expires_at"].startswith(extended.expires_at.isoformat()[:19])


def test_a_commit_that_wrote_messages_wakes_the_delivery_loop(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    woken: list[int] = []
    monkeypatch.setattr(delivery, "delivery_wake", lambda: woken.append(1))
    agent = holding_agent()
    with django_capture_on_commit_callbacks(execute=True):
        held(agent)
    assert woken == []
    webhook_channel(HOOK)
    with django_capture_on_commit_callbacks(execute=True):
        held(agent)
    assert woken == [1]


# --- add_channel ----------------------------------------------------------------------------


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


# --- admin ----------------------------------------------------------------------------------


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
        "/admin/approvals/notification/",
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
    page = admin_client.get(f"/admin/approvals/notification/{message.pk}/change/")
    assert page.status_code == 200


def test_admin_edits_of_a_channel_are_audited_with_the_secret_masked(
    admin_client: Client,
) -> None:
    response = admin_client.post(
        "/admin/approvals/notificationchannel/add/",
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
        f"/admin/approvals/notificationchannel/{channel.pk}/change/",
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
    admin_client.post(f"/admin/approvals/notificationchannel/{channel.pk}/delete/", {"post": "yes"})
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
