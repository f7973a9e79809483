"""Writes on ledgers beyond recording: held calls' reservations, and voiding an entry for a
payment that later failed."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

import capcore
from approvals.errors import Conflict
from approvals.models import AuditEntry, Call, Ledger, LedgerEntry, LedgerHour, LedgerReservation
from approvals.services.audit import audit_record
from approvals.services.statements import hour_of

VOID_NEEDS_REASON = "A voided entry needs a reason."
ALREADY_VOIDED = "This entry is already void."
HOUR_HAS_NO_TOTAL = (
    "This entry's hour has no total that counts it: the ledger's hourly totals are out of "
    "step with its entries. Nothing was changed; the entry still counts."
)
NO_SUCH_HOUR = "a voided entry's hour has no total to take it from"


class VoidRefused(Conflict):
    """The entry cannot be voided as asked; the message says why."""


def ledger_reserve(
    *,
    call: Call,
    records: Sequence[capcore.LedgerRecord],
    ledgers: Mapping[capcore.LedgerKey, Ledger],
    held_for: Collection[str],
    now: datetime,
) -> None:
    """Count a held call's amounts in its ledgers until it ends, in the caller's transaction,
    which holds the ledgers' locks (so the next check of each ledger sees them). ``held_for``:
    the casefolded names of the rules the call is held for."""
    LedgerReservation.objects.bulk_create(
        [
            LedgerReservation(
                ledger=ledgers[record.ledger],
                call=call,
                minor=record.minor,
                held_for_rule=record.ledger.rule in held_for,
                reserved_at=now,
            )
            for record in records
        ]
    )


def ledger_reservations_release(*, call_id: uuid.UUID) -> None:
    """The call's amounts no longer reserved: it ended, or is reserved again as it now is."""
    LedgerReservation.objects.filter(call_id=call_id).delete()


def ledger_hour_take(*, ledger_id: int, moment: datetime, minor: int) -> None:
    """Take ``minor`` from the ledger's total of the hour ``moment`` falls in (an entry of
    that hour voided), in the caller's transaction. An hour without that much (its check
    constraint) or without a row raises ``IntegrityError``: the entry then still counts."""
    hour = LedgerHour.objects.filter(ledger_id=ledger_id, hour=hour_of(moment))
    if hour.update(minor=F("minor") - minor) != 1:
        raise IntegrityError(NO_SUCH_HOUR)


@transaction.atomic
def ledger_entry_void(
    *, entry_id: int, reason: str, by_user: User | None, now: datetime | None = None
) -> LedgerEntry:
    """Stop counting an entry in its ledger's totals; the entry itself is kept. Raises
    ``VoidRefused`` with nothing changed: no reason, an entry void already, or an hour whose
    total does not count the entry (the ledger's hours out of step with its entries)."""
    if not reason.strip():
        raise VoidRefused(VOID_NEEDS_REASON)
    entry = LedgerEntry.objects.select_for_update().get(pk=entry_id)
    if entry.voided_at is not None:
        raise VoidRefused(ALREADY_VOIDED)
    entry.voided_at = now or timezone.now()
    entry.void_reason = reason.strip()
    entry.save(update_fields=["voided_at", "void_reason"])
    try:
        ledger_hour_take(ledger_id=entry.ledger_id, moment=entry.recorded_at, minor=entry.minor)
    except IntegrityError:
        # Leaving the block rolls the entry's change back: it still counts, as its hour does.
        raise VoidRefused(HOUR_HAS_NO_TOTAL) from None
    audit_record(
        action=AuditEntry.Action.LEDGER_ENTRY_VOIDED,
        obj=entry,
        user=by_user,
        before=f"{entry.minor} counted",
        after=f"void: {entry.void_reason}",
        at=entry.voided_at,
    )
    return entry
