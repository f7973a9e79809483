"""Reads. Small typed functions that the services, API and pages share."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

from django.contrib.auth.models import AnonymousUser, User
from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    Func,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

import capcore
from approvals import jsontext, sql
from approvals.models import (
    Agent,
    Approval,
    AuditEntry,
    Call,
    CapRule,
    Gate,
    Ledger,
    LedgerEntry,
)

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


@functools.lru_cache(maxsize=4096)
def stored_rule(line: str) -> capcore.Rule | None:
    """A stored line's rule, or None when it no longer parses (e.g. after a table upgrade)."""
    try:
        return capcore.parse_rule(line)
    except capcore.RuleError:
        return None


_SPENT = "SELECT COALESCE(SUM(minor), 0) FROM approvals_ledgerentry"
_SPENT += " WHERE ledger_id = %s AND voided_at IS NULL"


def ledger_spent(*, ledger: Ledger, window: capcore.Window | None, now: datetime) -> int:
    """The ledger's total within the window ending at ``now`` (voided entries excluded).

    Entries stamped after ``now`` count too: they can only come from a worker whose clock is
    ahead, and leaving them out would let calls through past the limit. In SQL
    (approvals/sql.py): every submission meeting a ``sum`` rule runs it.
    """
    minor, recorded_at = sql.fields(LedgerEntry, "minor", "recorded_at")
    start, inclusive = capcore.window_bounds(window, now)
    if start is None:
        ((total,),) = sql.fetch(_SPENT, [ledger.pk], [minor])
    else:
        within = f"{_SPENT} AND recorded_at {'>=' if inclusive else '>'} %s"
        ((total,),) = sql.fetch(within, [ledger.pk, sql.prepared(recorded_at, start)], [minor])
    return int(total)


def _recorded_within(window: capcore.Window | None, now: datetime) -> Q:
    """Ledger entries recorded within ``window`` ending at ``now`` (all of them for none)."""
    start, inclusive = capcore.window_bounds(window, now)
    if start is None:
        return Q()
    return Q(recorded_at__gte=start) if inclusive else Q(recorded_at__gt=start)


LedgerIdentity = tuple[str, str, str]  # a Ledger row's rule, currency and key digest


def ledger_identity(key: capcore.LedgerKey) -> LedgerIdentity:
    """The identity of a key's Ledger row (an unkeyed ledger is stored with an empty digest)."""
    return (key.rule, key.currency, key.key_digest or "")


def ledger_identities(
    keys: Iterable[capcore.LedgerKey],
) -> tuple[dict[LedgerIdentity, capcore.LedgerKey], Q]:
    """The keys by their rows' identity, and a filter for those rows."""
    by_identity = {ledger_identity(key): key for key in keys}
    named = Q()
    for rule, currency, key_digest in by_identity:
        named |= Q(rule=rule, currency=currency, key_digest=key_digest)
    return by_identity, named


FINAL_STATUSES = frozenset({"allowed", "refused", "approved", "denied", "expired", "cancelled"})
# Decided by the policy at submission: never held, so never approved by anyone.
NEVER_HELD = frozenset({"allowed", "refused"})


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def call_state(call: Call, *, approvals: Iterable[Approval] | None = None) -> dict[str, Any]:
    """The call state object of the agent API (``agent-api.md``). ``approvals``: the call's
    approvals with their users, when the caller has read them already."""
    pending = call.status == "pending"
    decision = None
    if call.status in {"approved", "denied", "expired", "cancelled"}:
        by = call.decided_by.get_username() if call.decided_by is not None else None
        decision = {"by": by, "comment": call.decision_comment, "at": _iso(call.decided_at)}
    link = f"/api/v1/calls/{call.pk}"
    return {
        "id": str(call.pk),
        "status": call.status,
        "tool": call.tool,
        "principal": call.principal,
        "run_id": call.run_id,
        "arguments_sha256": call.arguments_sha256,
        "reasons": call.reasons,
        "gates": call.gates if pending else [],
        "approvals": []
        if call.status in NEVER_HELD
        else [
            {"by": approval.user.get_username(), "at": _iso(approval.created_at)}
            for approval in (call.approvals.all() if approvals is None else approvals)
            if approval.approve
        ],
        "decision": decision,
        "created_at": _iso(call.created_at),
        "expires_at": _iso(call.expires_at) if pending else None,
        "links": {"self": link, "wait": f"{link}/wait", "ws": f"/ws/v1/calls/{call.pk}"},
    }


def call_for_agent(*, agent: Agent, call_id: uuid.UUID | str) -> Call | None:
    """The agent's own call; another agent's call is as absent as a missing one."""
    return (
        Call.objects.select_related("decided_by")
        .prefetch_related("approvals__user")
        .filter(pk=call_id, agent=agent)
        .first()
    )


def calls_for_agent(
    *, agent: Agent, status: str | None, run_id: str | None, limit: int, offset: int
) -> tuple[list[Call], int]:
    """A page of the agent's calls, newest first, and how many there are in all."""
    calls = Call.objects.filter(agent=agent)
    if status is not None:
        calls = calls.filter(status=status)
    if run_id is not None:
        calls = calls.filter(run_id=run_id)
    page = list(
        calls.select_related("decided_by")
        .prefetch_related("approvals__user")
        .order_by("-created_at", "-pk")[offset : offset + limit]
    )
    return page, calls.count()


# --- The approver's pages -------------------------------------------------------------------

VIEW_PERMISSIONS = ("approvals.view_call", "approvals.decide_call")
# A queue section shows at most this many rows (its count is still exact). A row costs ~0.4 ms
# to render, and the page must be served in 100 ms with both sections full.
QUEUE_SECTION_LIMIT = 50


def may_view(user: User | AnonymousUser) -> bool:
    """Whether a person may see the approver's pages: logged in, active, and holding
    ``approvals.view_call`` or ``approvals.decide_call``."""
    return bool(
        user.is_authenticated
        and user.is_active
        and any(user.has_perm(permission) for permission in VIEW_PERMISSIONS)
    )


_GATE_GROUPS = "SELECT name, group_id FROM approvals_gate"
_GATE_GROUPS += " WHERE name IN ({names}) AND group_id IS NOT NULL"


def decidable_call_ids(*, user: User, calls: Iterable[Call]) -> set[uuid.UUID]:
    """The calls ``user`` may decide (``policies.md``, "Gates, approvers, quorum"): active,
    holds ``approvals.decide_call``, in the group of every gate the call is held at
    (superusers: every gate), and not the call's own principal. At most two queries, however
    many calls."""
    if not user.is_active or not user.has_perm("approvals.decide_call"):
        return set()
    own = user.get_username()
    candidates = [call for call in calls if call.principal != own]
    if user.is_superuser or not candidates:
        return {call.pk for call in candidates}
    names = sorted({gate for call in candidates for gate in call.gates})
    gate_groups: dict[str, int] = {}
    if names:
        # In SQL (approvals/sql.py): every decision runs it.
        read = _GATE_GROUPS.format(names=", ".join(["%s"] * len(names)))
        gate_groups = dict(sql.rows(read, names))
    if not gate_groups:  # no gate of these calls is kept to a group
        return {call.pk for call in candidates}
    group_ids = set(user.groups.values_list("pk", flat=True))
    return {
        call.pk
        for call in candidates
        if all(gate_groups[gate] in group_ids for gate in call.gates if gate in gate_groups)
    }


def call_findings(call: Call) -> list[capcore.Finding]:
    """The stored reasons of a call as capcore findings again."""
    return [
        capcore.Finding(
            capcore.Policy(reason["policy"]),
            reason["rule"],
            capcore.Action(capcore.ActionKind(reason["action"]), reason["gate"]),
            reason["message"],
        )
        for reason in call.reasons
    ]


@dataclass(frozen=True, slots=True)
class Money:
    """An amount in minor units of a currency; shown by the ``money`` template filter."""

    currency: str
    minor: int
    exponent: int


@dataclass(frozen=True, slots=True)
class CapLine:
    """One cap rule read against one call, for people. ``spent``/``after`` are set for a
    ``sum`` rule of a pending call: the ledger's total now and with this call added."""

    rule: str
    kind: str
    window: str
    amount: Money | None
    limit: Money | None
    note: str = ""
    spent: Money | None = None
    after: Money | None = None

    @property
    def over(self) -> bool:
        if self.note or self.limit is None or self.amount is None:
            return True  # not assessable: that is why the rule holds it
        if self.kind == "sum" and self.after is None:
            return False  # no running total shown (the call is final)
        total = self.after if self.after is not None else self.amount
        return total.minor > self.limit.minor


_StoredRules = list[tuple[str, bool, capcore.Rule]]


def _stored_rules() -> _StoredRules:
    """Every stored rule that parses, with its folded name and whether it is enabled."""
    rows = CapRule.objects.order_by("pk").values_list("name_folded", "enabled", "line")
    return [
        (folded, enabled, rule)
        for folded, enabled, line in rows
        if (rule := stored_rule(line)) is not None
    ]


def _cap_assessments(call: Call, stored: _StoredRules) -> tuple[capcore.CapAssessment, ...]:
    """The call's arguments read again by the rules that held it or kept its ledger amounts,
    and by the enabled rules that apply to its tool now."""
    named = {
        str(reason["rule"]).casefold()
        for reason in call.reasons
        if reason.get("policy") == "cap" and reason.get("rule")
    }
    named |= {str(record["rule"]) for record in call.pending_records}
    rules = [
        rule
        for folded, enabled, rule in stored
        if (enabled or folded in named) and call.tool in rule.tools
    ]
    if not rules:
        return ()
    try:
        arguments = capcore.parse_arguments(call.arguments)
    except capcore.ArgsNotStrict:
        return ()
    return capcore.caps_assess(rules, tool=call.tool, arguments=arguments, principal=call.principal)


def _amounts(assessments: Iterable[capcore.CapAssessment]) -> tuple[Money, ...]:
    """The distinct amounts the call moves, in rule order."""
    found = dict.fromkeys(
        Money(a.limit.currency, a.amount, a.limit.exponent)
        for a in assessments
        if a.amount is not None and a.limit is not None
    )
    return tuple(found)


def _window_text(rule: capcore.Rule) -> str:
    if rule.kind is capcore.Kind.MAX:
        return "per call"
    return "in total" if rule.window is None else rule.window.to_text()


def _ledgers_spent(
    assessments: Iterable[capcore.CapAssessment], *, now: datetime
) -> dict[capcore.LedgerKey, int]:
    """``ledger_spent`` of every ledger the assessments name, within its rule's window, in two
    queries however many ``sum`` rules the call meets. A ledger without entries is absent."""
    windows = {
        a.ledger: a.rule.window
        for a in assessments
        if a.ledger is not None and a.amount is not None and a.limit is not None
    }
    if not windows:
        return {}
    by_identity, named = ledger_identities(windows)
    keys = {
        pk: by_identity[(rule, currency, digest)]
        for pk, rule, currency, digest in Ledger.objects.filter(named).values_list(
            "pk", "rule", "currency", "key_digest"
        )
    }
    if not keys:
        return {}
    within = Q()
    for pk, key in keys.items():
        within |= Q(ledger_id=pk) & _recorded_within(windows[key], now)
    totals = (
        LedgerEntry.objects.filter(within, voided_at__isnull=True)
        .values("ledger_id")
        .annotate(total=Sum("minor"))
        .order_by()
    )
    return {keys[row["ledger_id"]]: int(row["total"]) for row in totals}


def _cap_line(
    assessment: capcore.CapAssessment, *, spent: dict[capcore.LedgerKey, int] | None
) -> CapLine:
    """``spent``: the ledgers' totals for a pending call; None for a final one."""
    rule, limit, amount = assessment.rule, assessment.limit, assessment.amount
    line = CapLine(
        rule=rule.name,
        kind=rule.kind.value,
        window=_window_text(rule),
        amount=None
        if limit is None or amount is None
        else Money(limit.currency, amount, limit.exponent),
        limit=None if limit is None else Money(limit.currency, limit.minor, limit.exponent),
        note=assessment.not_assessable or "",
    )
    if spent is None or assessment.ledger is None or line.amount is None or limit is None:
        return line
    total = spent.get(assessment.ledger, 0)
    return CapLine(
        rule=line.rule,
        kind=line.kind,
        window=line.window,
        amount=line.amount,
        limit=line.limit,
        spent=Money(limit.currency, total, limit.exponent),
        after=Money(limit.currency, total + line.amount.minor, limit.exponent),
    )


def _held_by(call: Call) -> tuple[str, ...]:
    """The names of what held or refused the call: rule names, else the policy."""
    names = dict.fromkeys(str(reason.get("rule") or reason["policy"]) for reason in call.reasons)
    return tuple(names)


def _required_approvals(gates: Iterable[str], required: dict[str, int]) -> int:
    # Every approver is eligible at every gate of the call, so each approval counts at each.
    return max((required.get(gate, 1) for gate in gates), default=1)


@dataclass(frozen=True, slots=True)
class QueueRow:
    call: Call
    may_decide: bool
    decided_by_me: bool
    amounts: tuple[Money, ...]
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


class _HeldAtAny(Func):
    """Whether a call's ``gates`` (a JSON list of names) holds any of ``names``. Django's
    JSONField lookups cannot say it on SQLite (``contains`` is unsupported there and
    ``has_any_keys`` reads an object's keys, not a list's items), hence each backend's own."""

    output_field = BooleanField()

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__(F("gates"))
        self.names = names

    def as_sql(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotSupportedError("the queue reads gate lists on SQLite and PostgreSQL only")

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        gates, params = compiler.compile(self.source_expressions[0])
        marks = ", ".join(["%s"] * len(self.names))
        # Only the compiled column and placeholders go into the text; the names are parameters.
        sql = f"EXISTS (SELECT 1 FROM json_each({gates}) AS held WHERE held.value IN ({marks}))"  # noqa: S608
        return sql, (*params, *self.names)

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        # jsonb's ?| matches a list's string items as well as an object's keys.
        gates, params = compiler.compile(self.source_expressions[0])
        return f"({gates} ?| %s)", (*params, list(self.names))


def _gates_for(*, user: User) -> tuple[dict[str, int], tuple[str, ...]]:
    """Every gate's required approvals, and the gates closed to ``user`` (held by a group
    they are not in), in one query."""
    closed = Q(group__isnull=False) & ~Q(group__in=user.groups.values("pk"))
    rows = Gate.objects.annotate(
        closed=ExpressionWrapper(closed, output_field=BooleanField())
    ).values_list("name", "required_approvals", "closed")
    required = {name: approvals for name, approvals, _ in rows}
    return required, tuple(sorted(name for name, _, shut in rows if shut))


def _decidable(*, user: User, closed: tuple[str, ...]) -> Q:
    """``decidable_call_ids`` as a filter, so that the database picks a queue section's rows
    and counts them (``test_ui_views`` holds the two to the same answer)."""
    if not user.is_active or not user.has_perm("approvals.decide_call"):
        return Q(Value(False))
    decidable = ~Q(principal=user.get_username())
    if closed and not user.is_superuser:
        decidable &= ~Q(_HeldAtAny(closed))
    return decidable


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
    required, closed = _gates_for(user=user)
    decided = Exists(Approval.objects.filter(call=OuterRef("pk"), user_id=user.pk))
    to_decide = _decidable(user=user, closed=closed) & ~Q(decided)
    calls = Call.objects.filter(status="pending")
    # Counted apart from the rows: a change in between is pushed, and the page rendered again.
    counts = calls.aggregate(pending=Count("pk"), mine=Count("pk", filter=to_decide))
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
        if counts["pending"] > counts["mine"]
        else []
    )
    stored = _stored_rules() if mine or others else []

    def row(call: WithAnnotations[Call, _QueueAnnotations], *, may_decide: bool) -> QueueRow:
        return QueueRow(
            call=call,
            may_decide=may_decide,
            decided_by_me=call.decided,
            amounts=_amounts(_cap_assessments(call, stored)),
            held_by=_held_by(call),
            approvals=call.approved,
            required=_required_approvals(call.gates, required),
        )

    return Queue(
        mine=tuple(row(call, may_decide=True) for call in mine),
        others=tuple(row(call, may_decide=False) for call in others),
        mine_count=counts["mine"],
        others_count=counts["pending"] - counts["mine"],
        now=now or timezone.now(),
    )


@dataclass(frozen=True, slots=True)
class GateProgress:
    name: str
    group: str
    approvals: int
    required: int


@dataclass(frozen=True, slots=True)
class CallPage:
    """What the call page shows one person: the call, its arguments for people, its caps,
    its gates and approvals, their own decision if any, and the call's audit trail."""

    call: Call
    arguments_pretty: str
    arguments_readable: bool
    audit: list[AuditEntry]
    amounts: tuple[Money, ...]
    caps: tuple[CapLine, ...]
    gates: tuple[GateProgress, ...]
    approvals: tuple[Approval, ...]
    required: int
    may_decide: bool
    my_decision: Approval | None
    scope_choice: bool
    now: datetime

    @property
    def pending(self) -> bool:
        return self.call.status == "pending"

    @property
    def approved_count(self) -> int:
        return sum(1 for approval in self.approvals if approval.approve)

    @property
    def show_form(self) -> bool:
        return self.pending and self.may_decide and self.my_decision is None

    @property
    def may_extend(self) -> bool:
        return self.pending and self.may_decide and not self.call.extended


def call_page(*, call_id: uuid.UUID, user: User, now: datetime | None = None) -> CallPage | None:
    call = (
        Call.objects.select_related("agent", "decided_by")
        .prefetch_related("approvals__user")
        .filter(pk=call_id)
        .first()
    )
    if call is None:
        return None
    now = now or timezone.now()
    try:
        pretty, readable = jsontext.pretty(capcore.parse_arguments(call.arguments)), True
    except capcore.ArgsNotStrict:
        # Shown as received (escaped by the template), and marked as not strict JSON.
        pretty, readable = call.arguments, False
    audit = list(
        AuditEntry.objects.filter(object_type="call", object_id=str(call.pk))
        .select_related("user", "agent")
        .order_by("at", "pk")
    )
    assessments = _cap_assessments(call, _stored_rules())
    spent = _ledgers_spent(assessments, now=now) if call.status == "pending" else None
    gates = {
        gate.name: gate for gate in Gate.objects.filter(name__in=call.gates).select_related("group")
    }
    approvals = tuple(sorted(call.approvals.all(), key=lambda a: (a.created_at, a.pk)))
    approved = sum(1 for approval in approvals if approval.approve)
    progress = tuple(
        GateProgress(
            name=name,
            group=gate.group.name if gate is not None and gate.group is not None else "",
            approvals=approved,
            required=gate.required_approvals if gate is not None else 1,
        )
        for name in call.gates
        for gate in [gates.get(name)]
    )
    return CallPage(
        call=call,
        arguments_pretty=pretty,
        arguments_readable=readable,
        audit=audit,
        amounts=_amounts(assessments),
        caps=tuple(_cap_line(a, spent=spent) for a in assessments),
        gates=progress,
        approvals=approvals,
        required=max((gate.required for gate in progress), default=1),
        may_decide=call.pk in decidable_call_ids(user=user, calls=[call]),
        my_decision=next((a for a in approvals if a.user_id == user.pk), None),
        scope_choice=capcore.mode_hold_only(call_findings(call)),
        now=now,
    )


# --- History --------------------------------------------------------------------------------

HISTORY_STATUSES = ("approved", "denied", "expired", "cancelled", "allowed", "refused")


@dataclass(frozen=True, slots=True)
class HistoryFilters:
    status: str = ""
    agent: Agent | None = None
    tool: str = ""
    principal: str = ""
    since: date | None = None
    until: date | None = None


def history_calls(*, filters: HistoryFilters) -> QuerySet[Call]:
    """Final calls, newest first, narrowed by the filters (``until`` is inclusive)."""
    calls = Call.objects.exclude(status="pending")
    if filters.status:
        calls = calls.filter(status=filters.status)
    if filters.agent is not None:
        calls = calls.filter(agent=filters.agent)
    if filters.tool:
        calls = calls.filter(tool=filters.tool)
    if filters.principal:
        calls = calls.filter(principal=filters.principal)
    if filters.since is not None:
        calls = calls.filter(created_at__gte=datetime.combine(filters.since, time.min, UTC))
    if filters.until is not None:
        end = datetime.combine(filters.until + timedelta(days=1), time.min, UTC)
        calls = calls.filter(created_at__lt=end)
    return calls.select_related("agent", "decided_by").order_by("-created_at", "-pk")


@dataclass(frozen=True, slots=True)
class HistoryRow:
    call: Call
    amounts: tuple[Money, ...]
    held_by: tuple[str, ...]


def history_rows(calls: Iterable[Call]) -> list[HistoryRow]:
    """A page of calls with their amounts (one query for the rules, however many rows)."""
    stored = _stored_rules()
    return [
        HistoryRow(call, _amounts(_cap_assessments(call, stored)), _held_by(call)) for call in calls
    ]
