"""The outbox's writes: messages in the transaction of the change, the channels' filters, no
query without channels, the expiring notice, and the delivery loop woken after commit."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import Call
from approvals.selectors.calls import call_state
from approvals.services import calls as calls_service
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import call_cancel, call_extend, calls_expire_due
from notifications import wake
from notifications.channels import channel_add
from notifications.models import Notification, NotificationChannel
from notifications.outbox import calls_expiring_notify
from tests.factories import user_make
from tests.outbox import HOOK, SECRET, Event, held, holding_agent, webhook_channel

pytestmark = pytest.mark.django_db


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
    monkeypatch.setattr(wake, "delivery_wake", lambda: woken.append(1))
    agent = holding_agent()
    with django_capture_on_commit_callbacks(execute=True):
        held(agent)
    assert woken == []
    webhook_channel(HOOK)
    with django_capture_on_commit_callbacks(execute=True):
        held(agent)
    assert woken == [1]
