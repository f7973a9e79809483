"""A held call's end without a decision: cancelled by its agent, or expired at its deadline;
and its one extension."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from approvals.errors import Conflict
from approvals.models import Agent, AuditEntry, Call
from approvals.ops import metrics
from approvals.realtime.pushes import notify_call
from approvals.selectors.gates import hold_seconds
from approvals.services.audit import audit_deferred, audit_record
from approvals.services.calls import CallNotFound, call_end, call_lock
from approvals.services.ledgers import ledger_reservations_release
from approvals.services.statements import policy_stamp_read
from config.runtime.sqlite_writers import write_transaction
from notifications.outbox import notifications_enqueue

CANCELLED_COMMENT = "Cancelled by the agent."
EXPIRED_COMMENT = "No decision before the deadline: treated as a denial."


class AlreadyFinal(Conflict):
    """The call is final (or was extended once already): nothing changed."""


def _end(call: Call, status: Call.Status, comment: str, now: datetime, agent: Agent | None) -> None:
    call_end(call=call, status=status, comment=comment, now=now, stamp=policy_stamp_read())
    audit_record(action=AuditEntry.Action.call(status), obj=call, agent=agent, at=now)
    notify_call(call)


@write_transaction()
def call_cancel(*, agent: Agent, call_id: uuid.UUID, now: datetime | None = None) -> Call | None:
    """The agent withdraws its pending call. None when it has no such call."""
    call = call_lock(call_id=call_id)
    if call is None or call.agent_id != agent.pk:
        return None
    now = now or timezone.now()
    if call.status != Call.Status.PENDING or (
        call.expires_at is not None and call.expires_at <= now
    ):
        raise AlreadyFinal
    _end(call, Call.Status.CANCELLED, CANCELLED_COMMENT, now, agent)
    return call


def calls_expire_due(*, now: datetime | None = None) -> int:
    """Expire every pending call past its deadline; safe to run on every worker at once
    (each call is ended by exactly one conditional UPDATE). Returns how many it ended."""
    now = now or timezone.now()
    expired = 0
    due = Call.objects.filter(status=Call.Status.PENDING, expires_at__lte=now).values_list(
        "pk", flat=True
    )
    for call_id in list(due):
        with write_transaction(), audit_deferred():
            won = Call.objects.filter(
                pk=call_id, status=Call.Status.PENDING, expires_at__lte=now
            ).update(
                status=Call.Status.EXPIRED,
                decided_at=now,
                decision_comment=EXPIRED_COMMENT,
                updated_at=now,
            )
            if won:
                ledger_reservations_release(call_id=call_id)
                call = Call.objects.get(pk=call_id)
                audit_record(action=AuditEntry.Action.CALL_EXPIRED, obj=call, at=now)
                metrics.call_decided(call)
                notifications_enqueue(call=call, now=now)
                notify_call(call)
                expired += 1
    return expired


@write_transaction()
def call_extend(*, call_id: uuid.UUID, user: User, now: datetime | None = None) -> Call:
    """Push a pending call's deadline back by its smallest gate timeout, once.

    The caller has checked that ``user`` may decide the call.
    """
    call = call_lock(call_id=call_id)
    if call is None:
        raise CallNotFound
    now = now or timezone.now()
    if (
        call.status != Call.Status.PENDING
        or call.extended
        or (call.expires_at and call.expires_at <= now)
    ):
        raise AlreadyFinal
    assert call.expires_at is not None
    call.expires_at += timedelta(seconds=hold_seconds(gates=call.gates))
    call.extended = True
    call.updated_at = now
    call.save(update_fields=["expires_at", "extended", "updated_at"])
    audit_record(action=AuditEntry.Action.CALL_EXTENDED, obj=call, user=user, at=now)
    notify_call(call)
    return call
