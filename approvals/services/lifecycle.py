"""A held call's end without a decision: cancelled by its agent, or expired at its deadline;
and its one extension."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import Agent, AuditEntry, Call, Gate
from approvals.notify import notify_call
from approvals.services.transactions import write_transaction

CANCELLED_COMMENT = "Cancelled by the agent."
EXPIRED_COMMENT = "No decision before the deadline: treated as a denial."


class AlreadyFinal(Exception):
    """The call is final (or was extended once already): nothing changed."""


def _end(call: Call, status: str, comment: str, now: datetime, agent: Agent | None) -> None:
    call.status = status
    call.decided_at = now
    call.decision_comment = comment
    call.updated_at = now
    call.save(update_fields=["status", "decided_at", "decision_comment", "updated_at"])
    AuditEntry.objects.create(
        at=now, agent=agent, action=f"call {status}", object_type="call", object_id=str(call.pk)
    )
    notify_call(call)


@write_transaction()
def call_cancel(*, agent: Agent, call_id: uuid.UUID, now: datetime | None = None) -> Call | None:
    """The agent withdraws its pending call. None when it has no such call."""
    call = Call.objects.select_for_update().filter(pk=call_id, agent=agent).first()
    if call is None:
        return None
    now = now or timezone.now()
    if call.status != "pending" or (call.expires_at is not None and call.expires_at <= now):
        raise AlreadyFinal
    _end(call, "cancelled", CANCELLED_COMMENT, now, agent)
    return call


def calls_expire_due(*, now: datetime | None = None) -> int:
    """Expire every pending call past its deadline; safe to run on every worker at once
    (each call is ended by exactly one conditional UPDATE). Returns how many it ended."""
    now = now or timezone.now()
    expired = 0
    due = Call.objects.filter(status="pending", expires_at__lte=now).values_list("pk", flat=True)
    for call_id in list(due):
        with write_transaction():
            won = Call.objects.filter(pk=call_id, status="pending", expires_at__lte=now).update(
                status="expired", decided_at=now, decision_comment=EXPIRED_COMMENT, updated_at=now
            )
            if won:
                call = Call.objects.get(pk=call_id)
                AuditEntry.objects.create(
                    at=now, action="call expired", object_type="call", object_id=str(call_id)
                )
                notify_call(call)
                expired += 1
    return expired


def _smallest_timeout(call: Call) -> int:
    timeouts = {g.name: g.timeout_seconds for g in Gate.objects.filter(name__in=call.gates)}
    return min(
        timeouts.get(gate) or settings.COUNTERSIGN_HOLD_TIMEOUT for gate in call.gates or [""]
    )


@write_transaction()
def call_extend(*, call_id: uuid.UUID, user: User, now: datetime | None = None) -> Call:
    """Push a pending call's deadline back by its smallest gate timeout, once.

    The caller has checked that ``user`` may decide the call.
    """
    call = Call.objects.select_for_update().get(pk=call_id)
    now = now or timezone.now()
    if call.status != "pending" or call.extended or (call.expires_at and call.expires_at <= now):
        raise AlreadyFinal
    assert call.expires_at is not None
    call.expires_at += timedelta(seconds=_smallest_timeout(call))
    call.extended = True
    call.updated_at = now
    call.save(update_fields=["expires_at", "extended", "updated_at"])
    AuditEntry.objects.create(
        at=now, user=user, action="call extended", object_type="call", object_id=str(call.pk)
    )
    notify_call(call)
    return call
