"""The queue page's view model: the pending calls as one person sees them (docs/ui.md)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

import capcore
from approvals.models import Approval, Call
from approvals.presence import Waiting, presence_of
from approvals.selectors.caps import call_amounts, cap_assessments, held_by
from approvals.selectors.deciders import (
    DECIDE_PERMISSION,
    decidable_filter,
    gates_for_user,
    required_approvals,
)
from approvals.selectors.rules import stored_rules
from capcore import caps
from capcore.strictjson import lookup

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
    unreadable: tuple[str, ...] = ()  # why an amount could not be read, shortly
    waiting: Waiting | None = None  # None: not known


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
    decider: bool = False  # holds the permission to decide: the page offers the batch form


# What the queue says, in a few words, for each reason capcore gives an amount it could not
# read (the call page shows the full one).
SHORT_REASONS = {
    caps.AMOUNT_MISSING: "no amount",
    caps.AMOUNT_NOT_DECIMAL: "not a plain decimal",
    caps.AMOUNT_TOO_LARGE: "too large",
    caps.AMOUNT_NEGATIVE: "negative",
    caps.AMOUNT_WRONG_TYPE: "not a number",
    caps.CURRENCY_MISSING: "no currency",
}
TOO_PRECISE = "too many decimals for {currency}"
NOT_A_CURRENCY = "not a currency code"
NO_LIMIT_IN = "no limit in {currency}"
UNREADABLE = "unreadable"
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _short_reason(assessment: capcore.CapAssessment, arguments: dict[str, object]) -> str:
    """A few words for why the amount of ``assessment`` could not be read. A currency the
    rule has no limit in is named when it is three upper-case letters (nothing else of the
    arguments is quoted)."""
    reason = assessment.not_assessable or ""
    if reason == caps.AMOUNT_TOO_PRECISE and assessment.limit is not None:
        return TOO_PRECISE.format(currency=assessment.limit.currency)
    if reason == caps.CURRENCY_NOT_LIMITED and assessment.rule.currency_arg is not None:
        try:
            code = lookup(arguments, assessment.rule.currency_arg)
        except capcore.NotAssessable:
            return NOT_A_CURRENCY
        if type(code) is str and len(code) == 3 and _LETTERS.issuperset(code):
            return NO_LIMIT_IN.format(currency=code)
        return NOT_A_CURRENCY
    return SHORT_REASONS.get(reason, UNREADABLE)


def unreadable_reasons(call: Call, assessments: Iterable[capcore.CapAssessment]) -> tuple[str, ...]:
    """The distinct short reasons why the rules could not read the call's amounts."""
    failed = [a for a in assessments if a.amount is None and a.not_assessable is not None]
    if not failed:
        return ()
    try:
        arguments = capcore.parse_arguments(call.arguments)
    except capcore.ArgsNotStrict:
        return (UNREADABLE,)
    return tuple(dict.fromkeys(_short_reason(a, arguments) for a in failed))


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
    "arguments_sha256",
    "created_at",
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
    # An approval an edit voided is no decision: the edited version is the user's to decide.
    current = Approval.objects.filter(voided_at__isnull=True)
    decided = Exists(current.filter(call=OuterRef("pk"), user_id=user.pk))
    to_decide = decidable_filter(user=user, closed=closed) & ~Q(decided)
    calls = Call.objects.filter(status=Call.Status.PENDING)
    # Counted apart from the rows: a change in between is pushed, and the page rendered again.
    counts = calls.aggregate(held=Count("pk"), mine=Count("pk", filter=to_decide))
    approved = (
        current.filter(call=OuterRef("pk"), approve=True)
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

    waiting = presence_of([*mine, *others])

    def row(call: WithAnnotations[Call, _QueueAnnotations], *, may_decide: bool) -> QueueRow:
        assessments = cap_assessments(call, stored)
        return QueueRow(
            call=call,
            may_decide=may_decide,
            decided_by_me=call.decided,
            amounts=call_amounts(assessments),
            held_by=held_by(call),
            approvals=call.approved,
            required=required_approvals(call.gates, required),
            unreadable=unreadable_reasons(call, assessments),
            waiting=waiting.get(call.pk),
        )

    return Queue(
        mine=tuple(row(call, may_decide=True) for call in mine),
        others=tuple(row(call, may_decide=False) for call in others),
        mine_count=counts["mine"],
        others_count=counts["held"] - counts["mine"],
        now=now or timezone.now(),
        decider=user.is_active and user.has_perm(DECIDE_PERMISSION),
    )


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One call of a batch decision, as the queue reports it."""

    call: str  # the id, or the field as posted when it named no call
    tool: str  # "" when there is no such call
    decided: bool
    reason: str


@dataclass(frozen=True, slots=True)
class BatchResult:
    approve: bool
    lines: tuple[BatchLine, ...]

    @property
    def decided(self) -> int:
        return sum(line.decided for line in self.lines)

    @property
    def not_decided(self) -> int:
        return len(self.lines) - self.decided


def batch_result(*, approve: bool, outcomes: Sequence[tuple[str, bool, str]]) -> BatchResult:
    """The report of a batch: ``outcomes`` are (call id or field, decided, reason), with
    each named call's tool read in one query."""
    ids = []
    for call, _, _ in outcomes:
        with contextlib.suppress(ValueError):
            ids.append(uuid.UUID(call))
    tools = {
        str(pk): tool for pk, tool in Call.objects.filter(pk__in=ids).values_list("pk", "tool")
    }
    return BatchResult(
        approve=approve,
        lines=tuple(
            BatchLine(call=call, tool=tools.get(call, ""), decided=decided, reason=reason)
            for call, decided, reason in outcomes
        ),
    )
