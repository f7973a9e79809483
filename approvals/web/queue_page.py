"""The queue page's view model: the pending calls as one person sees them (docs/ui.md)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import Count, Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

import capcore
from approvals.models import Approval, Call
from approvals.realtime.presence import Waiting, presence_of
from approvals.selectors.caps import call_amounts, cap_assessments, held_by
from approvals.selectors.deciders import (
    DECIDE_PERMISSION,
    decidable_filter,
    gates_read_for_user,
    required_approvals,
)
from approvals.selectors.rules import StoredRule, stored_rules
from approvals.templatetags.clock import time_left
from approvals.templatetags.money import money
from approvals.templatetags.text import clip, iso
from capcore import caps
from capcore.strictjson import lookup

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# A queue section shows at most this many rows (its count is still exact), so that the page's
# cost follows the rows shown, not the pending calls.
QUEUE_SECTION_LIMIT = 50


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One pending call as its row shows it. Its texts are clipped and formatted here, once,
    with the pages' own filters: the template only places them."""

    id: uuid.UUID
    may_decide: bool
    decided_by_me: bool
    approvals: int
    required: int
    pick: str  # the batch form's value for it: "<id>:<arguments_sha256>"
    tool: str
    agent: str
    principal: str
    run: str  # "" when it has no run
    amounts: tuple[str, ...]
    unreadable: str  # why amounts could not be read, shortly, "; " between; "" when all were
    held_by: tuple[str, ...]
    progress: str  # "1 of 2"; "" when it needs one approval and has none
    expires: str  # the deadline, ISO 8601
    left: str  # the time left, as the countdown script writes it
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
    now: str  # when it was read, ISO 8601: the rows' countdowns start from it
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


# What a row shows, its amounts and whether an agent waits for it are read from; the rest
# (context, the decision, the idempotency fields) can be large and is left in the database.
_ROW_FIELDS = (
    "id",
    "agent",
    "tool",
    "arguments",
    "arguments_sha256",
    "principal",
    "run_id",
    "reasons",
    "gates",
    "pending_records",
    "created_at",
    "expires_at",
)


@dataclass(frozen=True, slots=True)
class QueueCall:
    call: Call  # only ``_ROW_FIELDS`` loaded
    agent_name: str
    decided: bool  # by this person, either way
    approved: int  # approvals so far


@dataclass(frozen=True, slots=True)
class QueueRead:
    mine: list[QueueCall]  # theirs to decide, oldest first
    others: list[QueueCall]  # the rest, oldest first
    mine_count: int
    others_count: int


def queue_read(*, user_id: int, decidable: Q, limit: int) -> QueueRead:
    """The held calls as ``user_id`` sees them: those ``decidable`` (a filter on calls, from
    ``deciders.decidable_filter``) that they have not decided, then the others; at most
    ``limit`` rows a section, the counts exact. A section counted empty is not read."""
    # Whether this person decided the call, either way. An approval an edit voided is no
    # decision: the edited version is theirs to decide.
    decided = Exists(
        Approval.objects.filter(call=OuterRef("pk"), user_id=user_id, voided_at__isnull=True)
    )
    approvals = Approval.objects.filter(call=OuterRef("pk"), approve=True, voided_at__isnull=True)
    approved = Coalesce(
        Subquery(approvals.order_by().values("call").annotate(n=Count("pk")).values("n")), 0
    )
    mine = decidable & ~Q(decided)
    held = Call.objects.filter(status=Call.Status.PENDING)
    # Counted apart from the rows: a change in between is pushed, and the page read again.
    counts = held.aggregate(held=Count("pk"), mine=Count("pk", filter=mine))
    mine_count, others_count = counts["mine"], counts["held"] - counts["mine"]

    def section(condition: Q, *, count: int) -> list[QueueCall]:
        if not count:
            return []
        rows = (
            held.filter(condition)
            .annotate(decided=decided, approved=approved, agent_name=F("agent__name"))
            .only(*_ROW_FIELDS)
            .order_by("created_at", "pk")[:limit]
        )
        return [
            QueueCall(
                call=row, agent_name=row.agent_name, decided=row.decided, approved=row.approved
            )
            for row in rows
        ]

    return QueueRead(
        mine=section(mine, count=mine_count),
        others=section(~mine, count=others_count),
        mine_count=mine_count,
        others_count=others_count,
    )


def _row(
    read: QueueCall,
    *,
    may_decide: bool,
    now: datetime,
    stored: list[StoredRule],
    required: dict[str, int],
    waiting: Waiting | None,
) -> QueueRow:
    call = read.call
    assessments = cap_assessments(call, stored)
    needed = required_approvals(call.gates, required)
    # In ``now``'s time zone (the current one), as the template's ``iso`` would show it.
    expires_at = call.expires_at.astimezone(now.tzinfo) if call.expires_at else None
    return QueueRow(
        id=call.pk,
        may_decide=may_decide,
        decided_by_me=read.decided,
        approvals=read.approved,
        required=needed,
        pick=f"{call.pk}:{call.arguments_sha256}",
        tool=clip(call.tool, 60),
        agent=clip(read.agent_name, 40),
        principal=clip(call.principal, 40),
        run=clip(call.run_id, 24) if call.run_id else "",
        amounts=tuple(money(amount) for amount in call_amounts(assessments)),
        unreadable="; ".join(unreadable_reasons(call, assessments)),
        held_by=tuple(clip(name, 40) for name in held_by(call)),
        progress=f"{read.approved} of {needed}" if needed > 1 or read.approved else "",
        expires=iso(expires_at),
        left=time_left(expires_at, now),
        waiting=waiting,
    )


def queue_for_user(*, user: User, now: datetime | None = None) -> Queue:
    """Two counts and at most ``QUEUE_SECTION_LIMIT`` rows a section, read and assessed: the
    cost follows the rows shown, not the pending calls."""
    gates = gates_read_for_user(user=user)
    required, closed = gates.required, gates.closed
    read = queue_read(
        user_id=user.pk,
        decidable=decidable_filter(user=user, closed=closed),
        limit=QUEUE_SECTION_LIMIT,
    )
    shown = [*read.mine, *read.others]
    stored = stored_rules() if shown else []
    waiting = presence_of([row.call for row in shown])
    now = timezone.localtime(now or timezone.now())

    def rows(section: list[QueueCall], *, may_decide: bool) -> tuple[QueueRow, ...]:
        return tuple(
            _row(
                row,
                may_decide=may_decide,
                now=now,
                stored=stored,
                required=required,
                waiting=waiting.get(row.call.pk),
            )
            for row in section
        )

    return Queue(
        mine=rows(read.mine, may_decide=True),
        others=rows(read.others, may_decide=False),
        mine_count=read.mine_count,
        others_count=read.others_count,
        now=iso(now),
        decider=user.is_active and user.has_perm(DECIDE_PERMISSION),
    )


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One call of a batch decision, as the queue reports it."""

    call: str  # the id, or the field as posted when it named no call
    tool: str  # "" when there is no such call
    decided: bool
    # What became of a decided call (``approval recorded (1 of 2)``), or why it was not.
    text: str
    status: str  # the decided call's status then ("" when not decided)

    @property
    def mark(self) -> str:
        """The line's class: ``yes`` for a call decided, ``wait`` for one an approval left
        pending, ``no`` for one refused at its re-check or not decided."""
        if self.status in (Call.Status.APPROVED, Call.Status.DENIED):
            return "yes"
        return "wait" if self.status == Call.Status.PENDING else "no"


# The report's summary, in this order: how many calls ended each way, and the rest.
_SUMMARY = (
    (Call.Status.APPROVED, "{count} approved"),
    (Call.Status.DENIED, "{count} denied"),
    (Call.Status.PENDING, "{count} still pending (approval recorded)"),
    (Call.Status.REFUSED, "{count} refused"),
    ("", "{count} not decided"),
)


@dataclass(frozen=True, slots=True)
class BatchResult:
    approve: bool
    lines: tuple[BatchLine, ...]

    @property
    def summary(self) -> tuple[str, ...]:
        """``2 approved``, ``1 still pending (approval recorded)``, ``1 not decided``: only
        the outcomes the batch had. A partial approval is never counted as approved."""
        counts = {status: 0 for status, _ in _SUMMARY}
        for line in self.lines:
            counts[line.status if line.decided else ""] += 1
        return tuple(text.format(count=counts[s]) for s, text in _SUMMARY if counts[s])


def batch_result(*, approve: bool, outcomes: Sequence[tuple[str, bool, str, str]]) -> BatchResult:
    """The report of a batch: ``outcomes`` are (call id or field, decided, what became of it
    or why not, its status then), with each named call's tool read in one query."""
    ids = []
    for call, *_ in outcomes:
        with contextlib.suppress(ValueError):
            ids.append(uuid.UUID(call))
    tools = {
        str(pk): tool for pk, tool in Call.objects.filter(pk__in=ids).values_list("pk", "tool")
    }
    return BatchResult(
        approve=approve,
        lines=tuple(
            BatchLine(
                call=call, tool=tools.get(call, ""), decided=decided, text=text, status=status
            )
            for call, decided, text, status in outcomes
        ),
    )
