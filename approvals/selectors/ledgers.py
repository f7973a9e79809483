"""Ledger totals: what has been spent in a ledger within its rule's window.

One way for every reader (a submission, the call page, admin): the window's start comes from
``capcore``'s window bounds, the same bounds its ``in_window`` decides by, so an entry
counts here exactly when capcore says it falls inside the window (entries dated after now
included: they can only come from a worker whose clock runs ahead, and leaving them out
could let a call through past the limit).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import reduce

from django.db.models import Q, QuerySet

import capcore
from approvals.models import Ledger
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


def keys_spent(
    *, windows: Mapping[capcore.LedgerKey, capcore.Window | None], now: datetime
) -> dict[capcore.LedgerKey, int]:
    """``ledgers_spent`` of ledgers named by their keys, in two queries; a ledger that does
    not exist yet has nothing spent and is absent."""
    by_identity = {ledger_identity(key): key for key in windows}
    if not by_identity:
        return {}
    found = ledgers_by_identity(identities=sorted(by_identity))
    keys = {
        ledger.pk: by_identity[(ledger.rule, ledger.currency, ledger.key_digest)]
        for ledger in found
    }
    spent = ledgers_spent(windows={pk: windows[key] for pk, key in keys.items()}, now=now)
    return {keys[pk]: total for pk, total in spent.items()}
