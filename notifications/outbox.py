"""The outbox (docs/notifications.md): the messages of a call's events, written in the
transaction of the change they report, one for each enabled channel that takes the event.

``notifications_enqueue`` is the one function of this app that ``approvals`` calls, on its
hot paths (every hold, decision, expiry and cancellation). The enabled channels are kept per
process under the policy stamp, which the channels' own triggers renew too (approvals'
migration 0011), exactly as agents' policies are kept (``approvals.selectors.policies``): the
submission passes the stamp it has read already, so with no channel a submission pays no
query at all; with channels, one bulk insert.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.models import Approval, Call
from approvals.selectors.calls import call_state
from approvals.services.statements import policy_stamp_read
from config.runtime.sqlite_writers import write_transaction
from notifications import wake
from notifications.models import Notification, NotificationChannel

Event = NotificationChannel.Event

# The event a call's new status is told as.
EVENT_OF_STATUS: dict[str, str] = {
    Call.Status.PENDING: Event.HELD,
    Call.Status.APPROVED: Event.DECIDED,
    Call.Status.DENIED: Event.DECIDED,
    Call.Status.REFUSED: Event.DECIDED,  # a held call that a re-check of its sums refused
    Call.Status.EXPIRED: Event.EXPIRED,
    Call.Status.CANCELLED: Event.CANCELLED,
}


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
    now: datetime,
    stamp: object = _UNREAD,
    approvals: Iterable[Approval] | None = None,
) -> int:
    """Write the messages of the status ``call`` has just taken (held, decided, expired,
    cancelled) in the caller's transaction; see ``_event_enqueue``."""
    return _event_enqueue(
        call=call, event=EVENT_OF_STATUS[call.status], now=now, stamp=stamp, approvals=approvals
    )


def _event_enqueue(
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
    transaction.on_commit(wake.delivery_wake)
    return len(chosen)


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
            _event_enqueue(call=call, event=Event.EXPIRING, now=now)
            noticed += 1
    return noticed
