"""approvals/queries/notifications.py: messages written, a run read with its channel, and the
attempts that end them, against the database."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import DeliveryAttempt, Notification
from approvals.queries.notifications import (
    AttemptEnd,
    notification_attempts_end,
    notification_leases_end,
    notifications_add,
    notifications_claim,
    notifications_run_read,
)
from tests.outbox import SECRET, Event, held, holding_agent, webhook_channel

pytestmark = pytest.mark.django_db
HOOK = "https://hooks.example.test/countersign"
Status = Notification.Status


def test_a_message_is_written_for_each_channel_pending_and_due_at_once() -> None:
    call = held(holding_agent())
    first, second = webhook_channel(HOOK + "/1"), webhook_channel(HOOK + "/2")
    now = timezone.now()
    with transaction.atomic():
        notifications_add(
            channel_ids=[first.pk, second.pk],
            call_id=call.pk,
            event=Event.DECIDED,
            payload='{"type": "call.decided"}',
            now=now,
        )
    rows = list(Notification.objects.filter(event=Event.DECIDED).order_by("channel_id"))
    assert [row.channel_id for row in rows] == [first.pk, second.pk]
    assert len({row.pk for row in rows}) == 2
    for row in rows:
        assert row.call_id == call.pk
        assert row.payload == '{"type": "call.decided"}'
        assert row.status == Status.PENDING
        assert row.created_at == row.next_attempt_at == now
        assert (row.attempts, row.lease_until, row.delivered_at) == (0, None, None)


def test_a_run_is_read_in_its_order_with_its_channel_and_only_while_pending() -> None:
    channel = webhook_channel(HOOK)
    agent = holding_agent()
    for _ in range(3):
        held(agent)
    first, second, third = Notification.objects.order_by("created_at")
    Notification.objects.filter(pk=second.pk).update(status=Status.DELIVERED)
    read = notifications_run_read(notification_ids=[third.pk, second.pk, first.pk, uuid.uuid4()])
    assert read is not None
    got_channel, run = read
    assert [message.id for message in run] == [third.pk, first.pk]
    assert (got_channel.pk, got_channel.kind, got_channel.target, got_channel.secret) == (
        channel.pk,
        "webhook",
        HOOK,
        SECRET,
    )
    message = run[1]
    assert (message.call_id, message.event, message.payload) == (
        first.call_id,
        first.event,
        first.payload,
    )
    assert (message.created_at, message.attempts) == (first.created_at, 0)
    assert notifications_run_read(notification_ids=[second.pk]) is None


@pytest.mark.skipif(connection.vendor != "sqlite", reason="reads SQLite's query plan")
def test_a_runs_messages_are_looked_up_by_id_not_among_every_pending_message() -> None:
    """A run's read and its letting go find its messages by their ids: through the status
    index they were searched for among every pending message, a backlog's thousands (SQLite
    takes that index for three ids or more)."""
    webhook_channel(HOOK)
    agent = holding_agent()
    for _ in range(5):
        held(agent)
    ids = [message.pk for message in Notification.objects.all()]
    with CaptureQueriesContext(connection) as captured:
        assert notifications_run_read(notification_ids=ids) is not None
        notification_leases_end(ids)
    assert len(captured) == 2
    for query in captured:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
        assert "sqlite_autoindex_approvals_notification_1 (id=?)" in plan
        assert "notification_due" not in plan


def test_a_run_let_go_is_due_again_at_once_and_keeps_its_status() -> None:
    webhook_channel(HOOK)
    agent = holding_agent()
    held(agent), held(agent)
    leased, delivered = Notification.objects.order_by("created_at")
    until = timezone.now() + timedelta(seconds=30)
    Notification.objects.update(lease_until=until)
    Notification.objects.filter(pk=delivered.pk).update(status=Status.DELIVERED)
    with transaction.atomic():
        notification_leases_end([leased.pk, delivered.pk])
    leased.refresh_from_db()
    delivered.refresh_from_db()
    assert (leased.status, leased.lease_until) == (Status.PENDING, None)
    assert delivered.status == Status.DELIVERED
    with transaction.atomic():
        claimed = notifications_claim(now=timezone.now(), lease_until=until, channels=1, run=10)
    assert [ids for _, ids in claimed] == [[leased.pk]]


def test_attempts_are_kept_and_end_their_messages_while_pending() -> None:
    webhook_channel(HOOK)
    agent = holding_agent()
    held(agent), held(agent), held(agent)
    delivered, retried, taken_by_another = Notification.objects.order_by("created_at")
    Notification.objects.filter(pk=taken_by_another.pk).update(status=Status.DELIVERED)
    now = timezone.now()
    later = now + timedelta(seconds=7)
    Notification.objects.update(lease_until=now + timedelta(seconds=30))

    def end(message: Notification, ok: bool, next_at: object = None) -> AttemptEnd:
        return AttemptEnd(
            notification_id=message.pk,
            at=now,
            duration_ms=12,
            ok=ok,
            status_code=204 if ok else 503,
            error="" if ok else "HTTP 503",
            status=Status.DELIVERED if ok else Status.PENDING,
            attempts=1,
            next_attempt_at=None if ok else later,
            delivered_at=now if ok else None,
        )

    with transaction.atomic():
        notification_attempts_end(
            ends=[end(delivered, True), end(retried, False), end(taken_by_another, False)]
        )
    delivered.refresh_from_db()
    assert (delivered.status, delivered.attempts, delivered.delivered_at) == (
        Status.DELIVERED,
        1,
        now,
    )
    assert delivered.next_attempt_at == delivered.created_at  # as it was
    assert delivered.lease_until is None
    retried.refresh_from_db()
    assert (retried.status, retried.attempts, retried.next_attempt_at) == (
        Status.PENDING,
        1,
        later,
    )
    assert (retried.lease_until, retried.delivered_at) == (None, None)
    taken_by_another.refresh_from_db()
    assert (taken_by_another.status, taken_by_another.attempts) == (Status.DELIVERED, 0)
    attempts = {
        attempt.notification_id: attempt for attempt in DeliveryAttempt.objects.order_by("pk")
    }
    assert len(attempts) == 3  # every attempt kept, that of a message another loop ended too
    assert (attempts[delivered.pk].ok, attempts[delivered.pk].status_code) == (True, 204)
    assert attempts[retried.pk].error == "HTTP 503"
    assert attempts[retried.pk].at == now
    assert attempts[retried.pk].duration_ms == 12


def test_a_claims_order_check_reads_only_the_calls_messages_of_the_channel() -> None:
    """The check that an earlier message of the same channel and call is not pending is a
    search of ``notification_call_channel`` by both, not of every pending message or every
    message of the channel (a backlog would make each claim read it whole, once a message)."""
    statements: list[tuple[str, Any]] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith("SELECT"):
            statements.append((sql, params))
        return execute(sql, params, many, context)

    now = timezone.now()
    with connection.execute_wrapper(keep), transaction.atomic():
        notifications_claim(now=now, lease_until=now + timedelta(seconds=30), channels=2, run=4)
    [(claim, params)] = statements
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + claim, params)
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
            assert (
                "SEARCH e USING INDEX notification_call_channel (call_id=? AND channel_id=?)"
                in plan
            )
        else:
            cursor.execute("SET LOCAL enable_seqscan = off")  # as on a table of many rows
            cursor.execute("EXPLAIN " + claim.replace(" FOR UPDATE OF n SKIP LOCKED", ""), params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Index Scan using notification_call_channel on approvals_notification e" in plan
