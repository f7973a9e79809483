"""Delivery's side of the outbox: claiming the due messages under a lease and renewing it,
keeping what each attempt came to (retried with backoff, or failed for good), an admin's
retry, and pruning old messages."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from approvals.errors import Conflict
from approvals.models import AuditEntry
from approvals.services.audit import audit_record
from config.runtime.sqlite_writers import write_transaction
from notifications import metrics, wake
from notifications.models import DeliveryAttempt, Notification

if TYPE_CHECKING:
    from notifications.senders.result import SendResult

# Backoff of failed attempts: the first retry 5 s after (±20 %: within 10 s), then doubling,
# at most an hour apart.
FIRST_RETRY_SECONDS = 5.0
LONGEST_RETRY_SECONDS = 3600.0
JITTER = 0.2
NOT_RETRIED = "only a message not yet delivered can be retried"
# Messages deleted per transaction by a prune.
PRUNE_BATCH = 500


class NotRetried(Conflict):
    """The message was delivered already: nothing to retry."""


PENDING = Notification.Status.PENDING
# What an attempt changes of its message.
ATTEMPT_ENDS = ("status", "attempts", "next_attempt_at", "lease_until", "delivered_at")


def _due(now: datetime) -> Q:
    """Pending, its next attempt due, and under no unexpired lease: a loop killed while
    sending leaves its messages to be taken over once their lease expires."""
    return Q(status=PENDING, next_attempt_at__lte=now) & (
        Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    )


def notifications_due_any(*, now: datetime) -> bool:
    """Whether any message may be due now: the idle loop's cheap look, taking no lock."""
    return Notification.objects.filter(_due(now)).exists()


def notifications_claim(
    *,
    now: datetime,
    lease_until: datetime,
    channels: int,
    run: int,
    busy: Collection[int] = (),
) -> list[tuple[int, list[uuid.UUID]]]:
    """Lease the due messages of up to ``channels`` channels, none of them ``busy``, up to
    ``run`` of each: each channel with its messages' ids, the longest due first. A message
    waits while an earlier one of its channel and call is pending. Run it in a write
    transaction."""
    earlier_pending = Notification.objects.filter(
        Q(created_at__lt=OuterRef("created_at"))
        | Q(created_at=OuterRef("created_at"), pk__lt=OuterRef("pk")),
        channel=OuterRef("channel"),
        call=OuterRef("call"),
        status=PENDING,
    )
    due = Notification.objects.filter(_due(now), ~Exists(earlier_pending))
    if busy:
        due = due.exclude(channel__in=busy)
    # On PostgreSQL concurrent loops pass each other's rows by; on SQLite the write
    # transaction keeps them apart, and select_for_update does nothing.
    rows = (
        due.select_for_update(skip_locked=True, of=("self",))
        .order_by("next_attempt_at")
        .values_list("pk", "channel_id")[: channels * run]
    )
    taken: dict[int, list[uuid.UUID]] = {}
    for pk, channel_id in rows:
        ids = taken.get(channel_id)
        if ids is None:
            if len(taken) >= channels:
                continue  # a later row may still add to a channel already taken
            ids = taken[channel_id] = []
        if len(ids) < run:
            ids.append(pk)
    leased = [pk for ids in taken.values() for pk in ids]
    if leased:
        Notification.objects.filter(pk__in=leased).update(lease_until=lease_until)
    return list(taken.items())


def retry_delay(attempts: int, *, rng: random.Random | None = None) -> timedelta:
    """How long after its ``attempts``-th failed attempt a message is tried again."""
    base = min(LONGEST_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2 ** max(0, attempts - 1))
    jitter = (rng or random).uniform(1 - JITTER, 1 + JITTER)
    return timedelta(seconds=min(LONGEST_RETRY_SECONDS, base * jitter))


class AttemptOutcome(NamedTuple):
    ok: bool
    status_code: int | None
    error: str
    duration_ms: int


class Attempt(NamedTuple):
    """One attempt at one message, begun at ``at`` and over at ``ended`` (its duration
    after ``at``)."""

    notification: Notification
    outcome: AttemptOutcome
    at: datetime
    ended: datetime


def notifications_lease_renew(
    *, notification_ids: Sequence[uuid.UUID], held: datetime, until: datetime
) -> int:
    """Move the lease of the claimed messages still held under ``held`` (the lease this
    claim wrote) on to ``until``; how many were. A message whose lease ran out and was
    claimed again since has another's lease, and is not this claim's to send any more."""
    with write_transaction():
        return Notification.objects.filter(
            pk__in=list(notification_ids), lease_until=held, status=PENDING
        ).update(lease_until=until)


def notification_attempts_record(
    *, attempts: Sequence[Attempt], lease_until: datetime, unattempted: Sequence[uuid.UUID] = ()
) -> list[str]:
    """Keep these attempts, in one transaction, each counted in its message's ``attempts``,
    and what each makes of its message: delivered, tried again later, or failed for good once
    ``COUNTERSIGN_NOTIFY_RETRY_HOURS`` have passed since it was written. Only a message still
    pending under this claim's lease (``lease_until``) is changed so: one that another loop
    or an admin ended, or that another loop claimed after this lease ran out, is theirs. The
    claimed messages ``unattempted`` are let go, due again at once. Returns each attempted
    message's status."""
    with write_transaction():
        # Locked until the update, in one order so that two records never deadlock; the
        # count read here, so that it is the attempts' rows' count whoever else counted.
        # Named by id alone: given the status too, SQLite may search the status index
        # instead, among every pending message.
        locked = {
            pk: (status, count, lease)
            for pk, status, count, lease in Notification.objects.select_for_update()
            .filter(pk__in=[attempt.notification.pk for attempt in attempts])
            .order_by("pk")
            .values_list("pk", "status", "attempts", "lease_until")
        }
        # A message gone meanwhile (its channel deleted) has nothing to keep.
        found = [attempt for attempt in attempts if attempt.notification.pk in locked]
        ended, counted = [], []
        for attempt in found:
            message = attempt.notification
            status, count, lease = locked[message.pk]
            message.attempts = count + 1
            if status == PENDING and lease == lease_until:
                _attempt_end(message, attempt)
                ended.append(message)
            else:
                message.status = status
                counted.append(message)
        DeliveryAttempt.objects.bulk_create(
            DeliveryAttempt(
                notification=attempt.notification,
                at=attempt.at,
                duration_ms=attempt.outcome.duration_ms,
                ok=attempt.outcome.ok,
                status_code=attempt.outcome.status_code,
                error=attempt.outcome.error[:500],
            )
            for attempt in found
        )
        Notification.objects.bulk_update(ended, ATTEMPT_ENDS)
        Notification.objects.bulk_update(counted, ["attempts"])
        if unattempted:
            Notification.objects.filter(pk__in=unattempted, lease_until=lease_until).update(
                lease_until=None
            )
    messages = [attempt.notification for attempt in attempts]
    delivered = sum(attempt.outcome.ok for attempt in attempts)
    metrics.notifications_attempted(
        delivered=delivered,
        failed=len(attempts) - delivered,
        failed_for_good=sum(m.status == Notification.Status.FAILED for m in ended),
    )
    return [message.status for message in messages]


def _attempt_end(message: Notification, attempt: Attempt) -> None:
    """What ``attempt`` makes of its message (its ``attempts`` already counting it)."""
    message.lease_until = None
    if attempt.outcome.ok:
        message.status = Notification.Status.DELIVERED
        message.delivered_at = attempt.ended
        return
    message.next_attempt_at = attempt.ended + retry_delay(message.attempts)
    give_up = message.created_at + timedelta(hours=settings.COUNTERSIGN_NOTIFY_RETRY_HOURS)
    failed = message.next_attempt_at > give_up
    message.status = Notification.Status.FAILED if failed else PENDING


def notifications_prune(*, now: datetime | None = None, stop: threading.Event | None = None) -> int:
    """Delete the delivered and failed messages written more than
    ``COUNTERSIGN_NOTIFY_KEEP_DAYS`` days before ``now``, with their attempts, a batch per
    transaction (a long prune never holds the database's writers up for long); how many.
    A pending message is kept whatever its age. ``stop``: end after the batch under way."""
    before = (now or timezone.now()) - timedelta(days=settings.COUNTERSIGN_NOTIFY_KEEP_DAYS)
    ended = (Notification.Status.DELIVERED, Notification.Status.FAILED)
    pruned = 0
    while stop is None or not stop.is_set():
        with write_transaction():
            # Locked, so an admin's retry of one of them waits, and finds it gone.
            batch = list(
                Notification.objects.select_for_update()
                .filter(status__in=ended, created_at__lt=before)
                .values_list("pk", flat=True)[:PRUNE_BATCH]
            )
            if not batch:
                break
            _, deleted = Notification.objects.filter(pk__in=batch).delete()
        pruned += deleted.get(Notification._meta.label, 0)
    return pruned


def notification_retry(*, notification: Notification, user: User | None) -> Notification:
    """Try a message not yet delivered again at once (a failed one gets one more attempt),
    audited. ``NotRetried`` for a delivered one."""
    now = timezone.now()
    with write_transaction():
        locked = Notification.objects.select_for_update().get(pk=notification.pk)
        if locked.status == Notification.Status.DELIVERED:
            raise NotRetried(NOT_RETRIED)
        before = locked.status
        locked.status = Notification.Status.PENDING
        locked.next_attempt_at = now
        # A lease is kept: a message being sent is not sent again meanwhile by another loop.
        locked.save(update_fields=["status", "next_attempt_at"])
        audit_record(
            action=AuditEntry.Action.NOTIFICATION_RETRIED,
            object_type=AuditEntry.ObjectType.NOTIFICATION,
            object_id=str(locked.pk),
            user=user,
            before=before,
            after=locked.status,
            at=now,
        )
        transaction.on_commit(wake.delivery_wake)
    return locked


def attempt_outcome(result: SendResult, *, duration_ms: int) -> AttemptOutcome:
    """A sender's ``SendResult`` as an attempt to keep."""
    return AttemptOutcome(
        ok=bool(result.ok),
        status_code=result.status_code,
        error=str(result.error or ""),
        duration_ms=max(0, duration_ms),
    )
