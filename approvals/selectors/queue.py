"""The queue page's view model: the pending calls as one person sees them (docs/ui.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

import capcore
from approvals.models import Approval, Call
from approvals.selectors.caps import call_amounts, cap_assessments, held_by
from approvals.selectors.deciders import decidable_filter, gates_for_user, required_approvals
from approvals.selectors.rules import stored_rules

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_stubs_ext import WithAnnotations

# A queue section shows at most this many rows (its count is still exact). A row costs ~0.4 ms
# to render, and the page must be served in 100 ms with both sections full.
QUEUE_SECTION_LIMIT = 50


@dataclass(frozen=True, slots=True)
class QueueRow:
    call: Call
    may_decide: bool
    decided_by_me: bool
    amounts: tuple[capcore.Limit, ...]
    held_by: tuple[str, ...]
    approvals: int
    required: int


@dataclass(frozen=True, slots=True)
class Queue:
    """The pending calls as one person sees them: those they may decide (and have not yet),
    oldest first, then the others, read-only. Sections hold at most ``QUEUE_SECTION_LIMIT``
    rows; the counts are exact."""

    mine: tuple[QueueRow, ...]
    others: tuple[QueueRow, ...]
    mine_count: int
    others_count: int
    now: datetime


# What a queue row shows and its amounts are read from; the rest (context, the decision,
# the idempotency fields) can be large and is left in the database.
_QUEUE_ROW_FIELDS = (
    "tool",
    "arguments",
    "principal",
    "run_id",
    "reasons",
    "gates",
    "pending_records",
    "expires_at",
    "agent",
    "agent__name",
)


class _QueueAnnotations(TypedDict):
    decided: bool  # by this user, either way
    approved: int  # approvals so far


def queue_for_user(*, user: User, now: datetime | None = None) -> Queue:
    """Two counts and at most ``QUEUE_SECTION_LIMIT`` rows a section, read and assessed:
    the cost follows the rows shown, not the pending calls."""
    required, closed = gates_for_user(user=user)
    decided = Exists(Approval.objects.filter(call=OuterRef("pk"), user_id=user.pk))
    to_decide = decidable_filter(user=user, closed=closed) & ~Q(decided)
    calls = Call.objects.filter(status=Call.Status.PENDING)
    # Counted apart from the rows: a change in between is pushed, and the page rendered again.
    counts = calls.aggregate(held=Count("pk"), mine=Count("pk", filter=to_decide))
    approved = (
        Approval.objects.filter(call=OuterRef("pk"), approve=True)
        .order_by()
        .values("call")
        .annotate(n=Count("pk"))
        .values("n")
    )
    shown = (
        calls.select_related("agent")
        .only(*_QUEUE_ROW_FIELDS)
        .annotate(decided=decided, approved=Coalesce(Subquery(approved), 0))
        .order_by("created_at", "pk")
    )
    mine = list(shown.filter(to_decide)[:QUEUE_SECTION_LIMIT]) if counts["mine"] else []
    others = (
        list(shown.filter(~to_decide)[:QUEUE_SECTION_LIMIT])
        if counts["held"] > counts["mine"]
        else []
    )
    stored = stored_rules() if mine or others else []

    def row(call: WithAnnotations[Call, _QueueAnnotations], *, may_decide: bool) -> QueueRow:
        return QueueRow(
            call=call,
            may_decide=may_decide,
            decided_by_me=call.decided,
            amounts=call_amounts(cap_assessments(call, stored)),
            held_by=held_by(call),
            approvals=call.approved,
            required=required_approvals(call.gates, required),
        )

    return Queue(
        mine=tuple(row(call, may_decide=True) for call in mine),
        others=tuple(row(call, may_decide=False) for call in others),
        mine_count=counts["mine"],
        others_count=counts["held"] - counts["mine"],
        now=now or timezone.now(),
    )
