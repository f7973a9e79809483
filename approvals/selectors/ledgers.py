"""Ledger totals: what has been spent in a ledger within its rule's window, and what held
calls reserve in it.

One way for every reader (a submission, the call page, admin): the window's start comes from
``capcore``'s window bounds, the same bounds its ``in_window`` decides by, so an entry
counts here exactly when capcore says it falls inside the window (entries dated after now
included: they can only come from a worker whose clock runs ahead, and leaving them out
could let a call through past the limit). A reservation counts whatever its age: the call
it belongs to is still held, and its amount is recorded now if it is approved.
"""

from __future__ import annotations

import operator
import uuid
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import reduce

from django.db.models import Count, F, Q, QuerySet, Sum, Window
from django.db.models.functions import RowNumber

import capcore
from approvals.models import Ledger, LedgerReservation
from approvals.services.statements import ledger_window_totals
from capcore.caps import bounds_of_window

LedgerIdentity = tuple[str, str, str]  # a Ledger row's rule, currency and key digest


def ledger_identity(key: capcore.LedgerKey) -> LedgerIdentity:
    """The identity of a key's Ledger row (an unkeyed ledger is stored with an empty digest)."""
    return (key.rule, key.currency, key.key_digest or "")


def ledgers_by_identity(*, identities: Sequence[LedgerIdentity]) -> QuerySet[Ledger]:
    """The ledgers with these identities (none given: none), in identity order."""
    named = [
        Q(rule=rule, currency=currency, key_digest=digest) for rule, currency, digest in identities
    ]
    if not named:
        return Ledger.objects.none()
    return Ledger.objects.filter(reduce(operator.or_, named)).order_by(
        "rule", "currency", "key_digest"
    )


def ledgers_spent(*, windows: Mapping[int, capcore.Window | None], now: datetime) -> dict[int, int]:
    """The totals of these ledgers (by id), each within its window ending ``now``, voided
    entries left out; in one query however many ledgers. A ledger with nothing spent is 0."""
    bounds = [(ledger_id, *bounds_of_window(window, now)) for ledger_id, window in windows.items()]
    totals = ledger_window_totals(bounds)
    return {ledger_id: totals.get(ledger_id, 0) for ledger_id in windows}


def ledger_spent(*, ledger: Ledger, window: capcore.Window | None, now: datetime) -> int:
    """One ledger's total within the window ending ``now``."""
    return ledgers_spent(windows={ledger.pk: window}, now=now)[ledger.pk]


@dataclass(frozen=True, slots=True)
class Reserved:
    """What held calls reserve in one ledger: all their amounts, and the part of it reserved
    by calls held at the ledger's rule's own gate for it."""

    total: int = 0
    held_for_rule: int = 0

    @property
    def rechecked(self) -> int:
        """What a held call's re-check counts: the calls held for the rule are left out,
        since only the rule's gate can record them."""
        return self.total - self.held_for_rule


def ledgers_reserved(
    *, ledger_ids: Collection[int], leave_out: uuid.UUID | None = None
) -> dict[int, Reserved]:
    """What the held calls (but ``leave_out``) reserve in these ledgers, in one query; a
    ledger where none does is absent."""
    if not ledger_ids:
        return {}
    rows = LedgerReservation.objects.filter(ledger_id__in=ledger_ids)
    if leave_out is not None:
        rows = rows.exclude(call_id=leave_out)
    totals = (
        rows.order_by()
        .values("ledger_id")
        .annotate(total=Sum("minor"), held=Sum("minor", filter=Q(held_for_rule=True)))
        .values_list("ledger_id", "total", "held")
    )
    return {ledger_id: Reserved(total, held or 0) for ledger_id, total, held in totals}


@dataclass(frozen=True, slots=True)
class ReservedShown:
    """What the call page shows of a ledger's reservations: the totals, how many calls
    reserve, and the first of them (oldest first), to link to."""

    reserved: Reserved
    calls: int
    first: tuple[uuid.UUID, ...]


def ledgers_reserved_shown(
    *, ledger_ids: Collection[int], leave_out: uuid.UUID, first: int
) -> dict[int, ReservedShown]:
    """``ledgers_reserved`` with the count of calls and the ``first`` of them per ledger, in
    one query however many calls reserve."""
    if not ledger_ids:
        return {}
    per_ledger = [F("ledger_id")]
    rows = (
        LedgerReservation.objects.filter(ledger_id__in=ledger_ids)
        .exclude(call_id=leave_out)
        .annotate(
            place=Window(
                RowNumber(),
                partition_by=per_ledger,
                order_by=[F("reserved_at").asc(), F("pk").asc()],
            ),
            total=Window(Sum("minor"), partition_by=per_ledger),
            held=Window(Sum("minor", filter=Q(held_for_rule=True)), partition_by=per_ledger),
            calls=Window(Count("pk"), partition_by=per_ledger),
        )
        .filter(place__lte=first)
        .order_by("ledger_id", "place")
        .values_list("ledger_id", "call_id", "total", "held", "calls")
    )
    found: dict[int, tuple[Reserved, int]] = {}
    firsts: defaultdict[int, list[uuid.UUID]] = defaultdict(list)
    for ledger_id, call_id, total, held, calls in rows:
        found[ledger_id] = (Reserved(total, held or 0), calls)
        firsts[ledger_id].append(call_id)
    return {
        ledger_id: ReservedShown(reserved, calls, tuple(firsts[ledger_id]))
        for ledger_id, (reserved, calls) in found.items()
    }


@dataclass(frozen=True, slots=True)
class LedgerShown:
    """One ledger as the call page shows it: its total within the window, and what the held
    calls other than the page's reserve in it."""

    spent: int
    reserved: ReservedShown


NOTHING_RESERVED = ReservedShown(Reserved(), 0, ())


def keys_shown(
    *,
    windows: Mapping[capcore.LedgerKey, capcore.Window | None],
    now: datetime,
    leave_out: uuid.UUID,
    first: int,
) -> dict[capcore.LedgerKey, LedgerShown]:
    """``ledgers_spent`` and ``ledgers_reserved_shown`` of ledgers named by their keys, in
    three queries; a ledger that does not exist yet has nothing spent or reserved and is
    absent."""
    by_identity = {ledger_identity(key): key for key in windows}
    if not by_identity:
        return {}
    found = ledgers_by_identity(identities=sorted(by_identity))
    keys = {
        ledger.pk: by_identity[(ledger.rule, ledger.currency, ledger.key_digest)]
        for ledger in found
    }
    spent = ledgers_spent(windows={pk: windows[key] for pk, key in keys.items()}, now=now)
    reserved = ledgers_reserved_shown(ledger_ids=list(keys), leave_out=leave_out, first=first)
    return {
        keys[pk]: LedgerShown(total, reserved.get(pk, NOTHING_RESERVED))
        for pk, total in spent.items()
    }
