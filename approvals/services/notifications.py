"""The outbox of notifications (docs/notifications.md): messages written in the transaction
of the change they report, the channels they go to, and what each delivery attempt came to.

``notifications_enqueue`` runs on the hot paths (every hold, decision, expiry and
cancellation). The enabled channels are kept per process under the policy stamp, which the
channels' own triggers renew too (migration 0011), exactly as agents' policies are kept
(``approvals.selectors.policies``): the submission passes the stamp it has read already, so
with no channel a submission pays no query at all; with channels, one bulk insert.
"""

from __future__ import annotations

import base64
import json
import random
import secrets
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from approvals.models import (
    Approval,
    AuditEntry,
    Call,
    DeliveryAttempt,
    Gate,
    Notification,
    NotificationChannel,
)
from approvals.ops import metrics
from approvals.selectors.calls import call_state
from approvals.senders.webhook import secret_valid
from approvals.services.audit import audit_record
from approvals.services.statements import policy_stamp_read
from config.runtime.sqlite_writers import write_transaction

if TYPE_CHECKING:
    from approvals.senders import SendResult

Event = NotificationChannel.Event
Kind = NotificationChannel.Kind

ALL_EVENTS: tuple[str, ...] = tuple(Event.values)
# Backoff of failed attempts: the first retry 5 s after (±20 %: within 10 s), then doubling,
# at most an hour apart.
FIRST_RETRY_SECONDS = 5.0
LONGEST_RETRY_SECONDS = 3600.0
JITTER = 0.2
WEBHOOK_SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix)
MASK = "***"

UNKNOWN_KIND = "unknown channel kind {kind!r}: email, webhook or apprise"
UNKNOWN_EVENT = "unknown event {event!r}: one of " + ", ".join(ALL_EVENTS)
NO_EVENT = "a channel needs at least one event"
UNKNOWN_GATE = "no gate named {gate!r}"
NO_TARGET = "a channel needs a target"
BAD_EMAIL_TARGET = "an email target is 'approvers' or comma-separated addresses; not: {address!r}"
BAD_WEBHOOK_TARGET = "a webhook target is an http(s) URL with a host"
BAD_APPRISE_TARGET = "an Apprise target is a URL such as slack://… or ntfy://…"
BAD_SECRET = "a webhook secret is 'whsec_' and base64"  # noqa: S105 (a message)
SECRET_NOT_WEBHOOK = "only a webhook channel has a secret"  # noqa: S105 (a message)
NOT_RETRIED = "only a message not yet delivered can be retried"


class ChannelInvalid(ValueError):
    """A channel as given cannot be stored; the message says why, naming no secret."""


class NotRetried(ValueError):
    """The message was delivered already: nothing to retry."""


# --- The channels, per process ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChannelRoute:
    """What the enqueue needs of an enabled channel."""

    id: int
    events: frozenset[str]
    gates: frozenset[str]  # empty: every gate

    def takes(self, event: str, gates: Iterable[str]) -> bool:
        return event in self.events and (not self.gates or not self.gates.isdisjoint(gates))


# The stamp and the enabled channels read under it, replaced whole when the stamp moves on.
_routes: tuple[int | None, tuple[ChannelRoute, ...]] = (None, ())


def _routes_read() -> tuple[ChannelRoute, ...]:
    return tuple(
        ChannelRoute(id=pk, events=frozenset(events or ()), gates=frozenset(gates or ()))
        for pk, events, gates in NotificationChannel.objects.filter(enabled=True)
        .order_by("pk")
        .values_list("pk", "events", "gates")
    )


def channel_routes(*, stamp: int | None) -> tuple[ChannelRoute, ...]:
    """The enabled channels, as of ``stamp`` (read in the caller's transaction before
    anything else it reads); None: the stamp cannot vouch, read them afresh."""
    global _routes
    if stamp is None:
        return _routes_read()
    cached_stamp, routes = _routes
    if cached_stamp != stamp:
        routes = _routes_read()
        _routes = (stamp, routes)
    return routes


# --- Writing messages ------------------------------------------------------------------------

_UNREAD = object()


def call_url(call: Call) -> str:
    """The call's page, absolute, as approvers reach the server."""
    return f"{settings.COUNTERSIGN_PUBLIC_URL}/calls/{call.pk}/"


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def notification_payload(
    *, call: Call, event: str, now: datetime, approvals: Iterable[Approval] | None = None
) -> str:
    """The body every channel's message is built from, exactly as committed."""
    if approvals is None and call.status not in Call.Status.NEVER_HELD:
        approvals = call.approvals.filter(voided_at__isnull=True).select_related("user")
    state = call_state(call, approvals=approvals)
    body = {"type": event, "timestamp": _iso(now), "data": {"call": state, "url": call_url(call)}}
    return json.dumps(body, separators=(",", ":"))


def notifications_enqueue(
    *,
    call: Call,
    event: str,
    now: datetime,
    stamp: object = _UNREAD,
    approvals: Iterable[Approval] | None = None,
) -> int:
    """Write the messages of ``event`` on ``call`` for every enabled channel that takes it,
    in the caller's transaction; wake this process's delivery loop once it commits. The
    caller that has read the policy stamp in this transaction passes it (``stamp``).
    Returns how many were written."""
    read = policy_stamp_read() if stamp is _UNREAD else stamp
    assert read is None or isinstance(read, int)
    routes = channel_routes(stamp=read)
    if not routes:
        return 0
    gates = call.gates
    chosen = [route for route in routes if route.takes(event, gates)]
    if not chosen:
        return 0
    payload = notification_payload(call=call, event=event, now=now, approvals=approvals)
    Notification.objects.bulk_create(
        [
            Notification(
                channel_id=route.id,
                call=call,
                event=event,
                payload=payload,
                created_at=now,
                next_attempt_at=now,
            )
            for route in chosen
        ]
    )
    from approvals.delivery import delivery_wake

    transaction.on_commit(delivery_wake)
    return len(chosen)


EVENT_OF_STATUS = {
    Call.Status.APPROVED: Event.DECIDED,
    Call.Status.DENIED: Event.DECIDED,
    Call.Status.EXPIRED: Event.EXPIRED,
    Call.Status.CANCELLED: Event.CANCELLED,
}


def calls_expiring_notify(*, now: datetime | None = None) -> int:
    """Write ``call.expiring`` for each held call within ``COUNTERSIGN_EXPIRING_NOTICE``
    seconds of its deadline that has had none for that deadline (an extension moves the
    deadline, so the call gets another). Safe on every process at once: each call is read
    locked and marked in one transaction. Reads nothing more than the stamp while no channel
    takes the event. Returns how many calls were noticed."""
    now = now or timezone.now()
    routes = channel_routes(stamp=policy_stamp_read())
    if not any(Event.EXPIRING in route.events for route in routes):
        return 0
    horizon = now + timedelta(seconds=settings.COUNTERSIGN_EXPIRING_NOTICE)
    due = [
        pk
        for pk, deadline, noticed in Call.objects.filter(
            status=Call.Status.PENDING, expires_at__gt=now, expires_at__lte=horizon
        ).values_list("pk", "expires_at", "expiring_noticed_for")
        if noticed != deadline
    ]
    noticed = 0
    for call_id in due:
        with write_transaction():
            call = Call.objects.select_for_update().filter(pk=call_id).first()
            if (
                call is None
                or call.status != Call.Status.PENDING
                or call.expires_at is None
                or not now < call.expires_at <= horizon
                or call.expiring_noticed_for == call.expires_at
            ):
                continue
            call.expiring_noticed_for = call.expires_at
            call.save(update_fields=["expiring_noticed_for"])
            notifications_enqueue(call=call, event=Event.EXPIRING, now=now)
            noticed += 1
    return noticed


# --- Delivery: claims, and what an attempt came to ------------------------------------------

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


def notification_attempts_record(
    *, attempts: Sequence[Attempt], unattempted: Sequence[uuid.UUID] = ()
) -> list[str]:
    """Keep these attempts, in one transaction, and what each makes of its message:
    delivered, tried again later, or failed for good once ``COUNTERSIGN_NOTIFY_RETRY_HOURS``
    have passed since it was written; the claimed messages ``unattempted`` are let go, due
    again at once. Returns each attempted message's status."""
    messages, kept = [], []
    for attempt in attempts:
        message, outcome = attempt.notification, attempt.outcome
        message.attempts += 1
        message.lease_until = None
        if outcome.ok:
            message.status = Notification.Status.DELIVERED
            message.delivered_at = attempt.ended
        else:
            message.next_attempt_at = attempt.ended + retry_delay(message.attempts)
            give_up = message.created_at + timedelta(hours=settings.COUNTERSIGN_NOTIFY_RETRY_HOURS)
            failed = message.next_attempt_at > give_up
            message.status = Notification.Status.FAILED if failed else PENDING
        messages.append(message)
        kept.append(
            DeliveryAttempt(
                notification=message,
                at=attempt.at,
                duration_ms=outcome.duration_ms,
                ok=outcome.ok,
                status_code=outcome.status_code,
                error=outcome.error[:500],
            )
        )
    with write_transaction():
        DeliveryAttempt.objects.bulk_create(kept)
        # A message ends only while still pending (another loop or an admin may have ended
        # it first), locked until the update, in one order so that two records never
        # deadlock. Named by id alone: given the status too, SQLite may search the status
        # index instead, among every pending message.
        locked = (
            Notification.objects.select_for_update()
            .filter(pk__in=[message.pk for message in messages])
            .order_by("pk")
        )
        pending = {pk for pk, status in locked.values_list("pk", "status") if status == PENDING}
        Notification.objects.bulk_update([m for m in messages if m.pk in pending], ATTEMPT_ENDS)
        if unattempted:
            Notification.objects.filter(pk__in=unattempted).update(lease_until=None)
    delivered = sum(attempt.outcome.ok for attempt in attempts)
    metrics.notifications_attempted(
        delivered=delivered,
        failed=len(attempts) - delivered,
        failed_for_good=sum(m.status == Notification.Status.FAILED for m in messages),
    )
    return [message.status for message in messages]


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
        locked.lease_until = None
        locked.save(update_fields=["status", "next_attempt_at", "lease_until"])
        audit_record(
            action=AuditEntry.Action.NOTIFICATION_RETRIED,
            object_type=AuditEntry.ObjectType.NOTIFICATION,
            object_id=str(locked.pk),
            user=user,
            before=before,
            after=locked.status,
            at=now,
        )
        from approvals.delivery import delivery_wake

        transaction.on_commit(delivery_wake)
    return locked


# --- Channels: checked, stored, audited ------------------------------------------------------


def webhook_secret_new() -> str:
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def masked_target(kind: str, target: str) -> str:
    """A target as logs and audit entries show it: an email target whole (addresses are no
    secret), a URL's scheme and host only (its user, password, path and query may each be a
    credential), an Apprise URL's scheme only (its host may be a token too)."""
    if kind == Kind.EMAIL:
        return target
    try:
        url = urlsplit(target)
    except ValueError:
        return MASK
    if kind == Kind.WEBHOOK and url.hostname:
        port = f":{url.port}" if url.port else ""
        rest = MASK if (url.path not in ("", "/") or url.query or url.username) else ""
        return f"{url.scheme}://{url.hostname}{port}/{rest}"
    return f"{url.scheme}://{MASK}" if url.scheme else MASK


def channel_snapshot(channel: NotificationChannel) -> str:
    """A channel as an audit entry's ``before`` or ``after``: its secret and its target's
    credentials masked."""
    return json.dumps(
        {
            "name": channel.name,
            "kind": channel.kind,
            "target": masked_target(channel.kind, channel.target),
            "secret": MASK if channel.secret else "",
            "events": list(channel.events),
            "gates": list(channel.gates),
            "enabled": channel.enabled,
        },
        sort_keys=True,
    )


def channel_check(
    *, kind: str, target: str, events: Sequence[str], gates: Sequence[str], secret: str
) -> None:
    """Raise ``ChannelInvalid`` unless a channel so made can be stored and used."""
    if kind not in Kind.values:
        raise ChannelInvalid(UNKNOWN_KIND.format(kind=kind))
    if not target.strip():
        raise ChannelInvalid(NO_TARGET)
    if not events:
        raise ChannelInvalid(NO_EVENT)
    for event in events:
        if event not in ALL_EVENTS:
            raise ChannelInvalid(UNKNOWN_EVENT.format(event=event))
    known = set(Gate.objects.filter(name__in=list(gates)).values_list("name", flat=True))
    for gate in gates:
        if gate not in known:
            raise ChannelInvalid(UNKNOWN_GATE.format(gate=gate))
    if secret and kind != Kind.WEBHOOK:
        raise ChannelInvalid(SECRET_NOT_WEBHOOK)
    if kind == Kind.EMAIL and target.strip() != "approvers":
        for address in (part.strip() for part in target.split(",")):
            try:
                validate_email(address)
            except ValidationError:
                raise ChannelInvalid(BAD_EMAIL_TARGET.format(address=address)) from None
    elif kind == Kind.WEBHOOK:
        try:
            url = urlsplit(target)
            valid = url.scheme in ("http", "https") and bool(url.hostname)
            url.port  # noqa: B018 (a bad port raises)
        except ValueError:
            valid = False
        if not valid:
            raise ChannelInvalid(BAD_WEBHOOK_TARGET)
        if not secret_valid(secret):
            raise ChannelInvalid(BAD_SECRET)
    elif kind == Kind.APPRISE:
        scheme, sep, rest = target.partition("://")
        if not sep or not scheme or not rest:
            raise ChannelInvalid(BAD_APPRISE_TARGET)


def channel_add(
    *,
    kind: str,
    target: str,
    events: Sequence[str] | None = None,
    gates: Sequence[str] = (),
    secret: str | None = None,
    name: str = "",
    user: User | None = None,
) -> NotificationChannel:
    """Create a channel, audited. ``events`` None: all five. A webhook without ``secret``
    gets a new one (the caller shows it once). ``ChannelInvalid``: nothing is created."""
    events = list(ALL_EVENTS if events is None else events)
    if secret is None:
        secret = webhook_secret_new() if kind == Kind.WEBHOOK else ""
    channel_check(kind=kind, target=target, events=events, gates=list(gates), secret=secret)
    channel = NotificationChannel(
        name=name,
        kind=kind,
        target=target.strip(),
        secret=secret,
        events=events,
        gates=list(gates),
    )
    with transaction.atomic():
        channel.save()
        channel_audit(channel=channel, user=user, change=False, before="")
    return channel


def channel_audit(
    *, channel: NotificationChannel, user: User | None, change: bool, before: str
) -> None:
    """The entry of a channel saved in admin or by ``add_channel``, its secrets masked."""
    audit_record(
        action=AuditEntry.Action.ADMIN_CHANGE if change else AuditEntry.Action.ADMIN_ADD,
        object_type=AuditEntry.ObjectType.NOTIFICATION_CHANNEL,
        object_id=str(channel.pk),
        user=user,
        before=before,
        after=channel_snapshot(channel),
    )


def channel_delete(*, channel: NotificationChannel, user: User | None) -> None:
    """Delete a channel and its messages, audited."""
    with transaction.atomic():
        object_id, before = channel.pk, channel_snapshot(channel)
        channel.delete()
        audit_record(
            action=AuditEntry.Action.ADMIN_DELETE,
            object_type=AuditEntry.ObjectType.NOTIFICATION_CHANNEL,
            object_id=str(object_id),
            user=user,
            before=before,
        )


def attempt_outcome(result: SendResult, *, duration_ms: int) -> AttemptOutcome:
    """A sender's ``SendResult`` as an attempt to keep."""
    return AttemptOutcome(
        ok=bool(result.ok),
        status_code=result.status_code,
        error=str(result.error or ""),
        duration_ms=max(0, duration_ms),
    )
