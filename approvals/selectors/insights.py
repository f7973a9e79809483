"""The insights page's figures (docs/ui.md, "Insights"): what oversight costs over the last 7,
30 or 90 days, counted by the database.

Each figure is an ORM aggregate over the calls or approvals of the period; the percentiles of
the time to a decision are picked by the database too (a window's row numbers), two rows per
gate. A period's figures change only with a write that the audit log records, so they are kept
per process under the audit chain's head (the policies' pattern, ``selectors.policies``):
the page reads them again after any such write, and on a new UTC day. The ledgers nearest
their limits are read on every request, since their windows move with the clock.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import (
    CharField,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Func,
    OuterRef,
    Q,
    QuerySet,
    Window,
)
from django.db.models.functions import Cast, RowNumber, Substr, TruncDate
from django.utils import timezone

import capcore
from approvals.models import Approval, Call, Ledger, LedgerHour, LedgerReservation
from approvals.selectors.audit import audit_head
from approvals.selectors.deciders import may_view
from approvals.selectors.ledgers import ledgers_reserved, ledgers_spent
from approvals.selectors.rules import stored_rules
from approvals.services.statements import HeldAtAny, hour_of
from capcore.caps import bounds_of_window

PERIODS = (7, 30, 90)  # days, today (UTC) included
DEFAULT_PERIOD = 30
# The statuses in the order the page stacks and lists them.
VERDICTS = (
    Call.Status.ALLOWED,
    Call.Status.REFUSED,
    Call.Status.PENDING,
    Call.Status.APPROVED,
    Call.Status.DENIED,
    Call.Status.EXPIRED,
    Call.Status.CANCELLED,
)
# A person's decision ends the call at these; its time to decision is from the submission.
PERSON_DECIDED = (Call.Status.APPROVED, Call.Status.DENIED)
# Nearest rank: the smallest time that at least this share of decisions took, as a fraction.
PERCENTILES = {"p50": (1, 2), "p90": (9, 10)}
NEAREST_LEDGERS = 10
REASONS_GROUPED = 3
PARTS = ("rule", "policy")


def insights_may_view(user: User | AnonymousUser) -> bool:
    """Approvers and viewers of the approver's pages, and active staff."""
    return may_view(user) or bool(user.is_authenticated and user.is_active and user.is_staff)


@dataclass(frozen=True, slots=True)
class Period:
    days: int
    first_day: date  # UTC
    last_day: date  # today, UTC

    @property
    def start(self) -> datetime:
        return datetime.combine(self.first_day, time.min, UTC)

    @property
    def dates(self) -> tuple[date, ...]:
        return tuple(self.first_day + timedelta(days=i) for i in range(self.days))


def insights_period(*, days: int, now: datetime | None = None) -> Period:
    """The last ``days`` UTC days, today included; ``days`` one of ``PERIODS``."""
    if days not in PERIODS:
        raise ValueError("a period is 7, 30 or 90 days")
    today = (now or timezone.now()).astimezone(UTC).date()
    return Period(days, today - timedelta(days=days - 1), today)


@dataclass(frozen=True, slots=True)
class DayCounts:
    day: date
    counts: tuple[int, ...]  # one per ``VERDICTS``

    @property
    def total(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True, slots=True)
class GateTimes:
    gate: str  # "" is the default gate
    decisions: int
    p50_seconds: int
    p90_seconds: int


@dataclass(frozen=True, slots=True)
class ApproverCounts:
    username: str
    approved: int
    denied: int

    @property
    def total(self) -> int:
        return self.approved + self.denied


@dataclass(frozen=True, slots=True)
class Figures:
    """A period's counted figures: every day of it, and the rest largest first."""

    period: Period
    calls_per_day: tuple[DayCounts, ...]
    holds_by_rule: tuple[tuple[str, int], ...]
    decision_times: tuple[GateTimes, ...]
    expiries_per_day: tuple[tuple[date, int], ...]
    approvers: tuple[ApproverCounts, ...]


@dataclass(frozen=True, slots=True)
class LedgerNear:
    rule: str
    key_digest: str  # "" for a rule without a key
    spent: capcore.Limit
    reserved: capcore.Limit
    limit: capcore.Limit

    @property
    def used_percent(self) -> float:
        """Spent and reserved, as a share of the limit, to a tenth of a percent."""
        used = self.spent.minor + self.reserved.minor
        return round(100 * used / self.limit.minor, 1) if self.limit.minor else 100.0


def _utc_day(field: str) -> Func:
    """The UTC date of a datetime column, as the database groups by it. On SQLite Django's
    ``TruncDate`` runs a Python function per row; the stored text starts with the UTC date."""
    if connection.vendor == "sqlite":
        return Substr(Cast(field, CharField()), 1, 10)
    return TruncDate(field, tzinfo=UTC)


def _as_date(value: date | str) -> date:
    return value if isinstance(value, date) else date.fromisoformat(value)


def calls_per_day(*, period: Period) -> tuple[DayCounts, ...]:
    """Calls submitted each day of the period, by status (every status named, so that the
    status index alone answers on SQLite)."""
    rows = (
        Call.objects.filter(status__in=VERDICTS, created_at__gte=period.start)
        .order_by()
        .values("status", day=_utc_day("created_at"))
        .annotate(calls=Count("pk"))
        .values_list("day", "status", "calls")
    )
    counted: dict[tuple[date, str], int] = {
        (_as_date(day), status): calls for day, status, calls in rows
    }
    return tuple(
        DayCounts(day, tuple(counted.get((day, status), 0) for status in VERDICTS))
        for day in period.dates
    )


def _held(period: Period) -> QuerySet[Call]:
    """Calls of the period that were held at a gate, whatever became of them."""
    return Call.objects.filter(created_at__gte=period.start).exclude(gates=[]).order_by()


def _names(reasons: list[dict[str, Any]]) -> dict[str, None]:
    """What a call's reasons name, once each: rules, else the policy."""
    return dict.fromkeys(str(reason.get("rule") or reason["policy"]) for reason in reasons)


def holds_by_rule(*, period: Period) -> tuple[tuple[str, int], ...]:
    """How many held calls each rule (else policy) named among its reasons, most first; a
    call counts once per name (``selectors.caps.held_by``). Grouped by the names of the
    first ``REASONS_GROUPED`` reasons (the reasons' messages differ call by call); the rare
    call with more is read whole."""
    counts: Counter[str] = Counter()
    fields = [f"reasons__{i}__{part}" for i in range(REASONS_GROUPED) for part in PARTS]
    more = Q(**{f"reasons__{REASONS_GROUPED}__policy__isnull": False})
    held = _held(period)
    grouped = held.exclude(more).values(*fields).annotate(calls=Count("pk"))
    for *named, calls in grouped.values_list(*fields, "calls"):
        reasons = [
            {"rule": named[i], "policy": named[i + 1]}
            for i in range(0, len(named), len(PARTS))
            if named[i + 1] is not None
        ]
        for name in _names(reasons):
            counts[name] += calls
    for reasons in held.filter(more).values_list("reasons", flat=True):
        counts.update(_names(reasons))
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _held_gates(period: Period) -> list[str]:
    """The gates the period's calls decided by a person were held at."""
    lists = (
        _held(period).filter(status__in=PERSON_DECIDED).values_list("gates", flat=True).distinct()
    )
    return sorted({str(gate) for gates in lists for gate in gates})


def _gate_times(period: Period, gate: str) -> GateTimes | None:
    """The nearest-rank percentiles of the time from submission to a person's decision, of
    the period's calls held at ``gate``: the rows at those ranks, picked by the database."""
    waited = ExpressionWrapper(F("decided_at") - F("created_at"), output_field=DurationField())
    ranked = (
        _held(period)
        .filter(HeldAtAny((gate,)), status__in=PERSON_DECIDED, decided_at__isnull=False)
        .annotate(
            waited=waited,
            place=Window(RowNumber(), order_by=[waited.asc(), F("pk").asc()]),
            decided=Window(Count("pk")),
        )
    )
    # The rank ceil(n * part / whole), in integers.
    picks = Q()
    for part, whole in PERCENTILES.values():
        picks |= Q(place=(F("decided") * part + whole - 1) / whole)
    rows = list(ranked.filter(picks).values_list("place", "decided", "waited"))
    if not rows:
        return None
    at = {place: int(waited.total_seconds()) for place, _, waited in rows}
    decided = rows[0][1]
    p50, p90 = (at[(decided * part + whole - 1) // whole] for part, whole in PERCENTILES.values())
    return GateTimes(gate, decided, p50, p90)


def decision_times(*, period: Period) -> tuple[GateTimes, ...]:
    """Time to a person's decision per gate, p50 and p90; a call held at two gates counts
    at both."""
    found = (_gate_times(period, gate) for gate in _held_gates(period))
    return tuple(times for times in found if times is not None)


def expiries_per_day(*, period: Period) -> tuple[tuple[date, int], ...]:
    """Held calls that expired each day of the period (denials nobody chose)."""
    rows = (
        Call.objects.filter(status=Call.Status.EXPIRED, decided_at__gte=period.start)
        .order_by()
        .values(day=_utc_day("decided_at"))
        .annotate(calls=Count("pk"))
        .values_list("day", "calls")
    )
    counted = {_as_date(day): calls for day, calls in rows}
    return tuple((day, counted.get(day, 0)) for day in period.dates)


def decisions_per_approver(*, period: Period) -> tuple[ApproverCounts, ...]:
    """Each person's approvals and denials given in the period (every one they gave, an
    approval an edit voided later included), most first."""
    rows = (
        Approval.objects.filter(created_at__gte=period.start)
        .order_by()
        .values("user__username", "approve")
        .annotate(decisions=Count("pk"))
        .values_list("user__username", "approve", "decisions")
    )
    counted: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for username, approve, decisions in rows:
        counted[username][0 if approve else 1] += decisions
    found = [ApproverCounts(name, given[0], given[1]) for name, given in counted.items()]
    return tuple(sorted(found, key=lambda a: (-a.total, a.username)))


def _figures(period: Period) -> Figures:
    return Figures(
        period=period,
        calls_per_day=calls_per_day(period=period),
        holds_by_rule=holds_by_rule(period=period),
        decision_times=decision_times(period=period),
        expiries_per_day=expiries_per_day(period=period),
        approvers=decisions_per_approver(period=period),
    )


# Per process: {days: ((first day, audit head), figures)}; one entry per period.
_kept: dict[int, tuple[tuple[Any, ...], Figures]] = {}
_kept_lock = threading.Lock()


def insights_figures(*, period: Period) -> Figures:
    """The period's figures, counted again after any audited write (every change to a call
    or an approval writes an audit entry) or on a new day."""
    key = (period.first_day, *audit_head())
    with _kept_lock:
        kept = _kept.get(period.days)
    if kept is not None and kept[0] == key:
        return kept[1]
    figures = _figures(period)
    with _kept_lock:
        _kept[period.days] = (key, figures)
    return figures


def _money(limit: capcore.Limit, minor: int) -> capcore.Limit:
    return capcore.Limit(limit.currency, limit.exponent, minor)


def ledgers_nearest(
    *, now: datetime | None = None, most: int = NEAREST_LEDGERS
) -> list[LedgerNear]:
    """The ledgers of the enabled ``sum`` rules whose totals in their windows now, with what
    held calls reserve, come nearest their limits (or past them), nearest first. A ledger
    counts when something was recorded in its window or is reserved in it."""
    now = now or timezone.now()
    rules = {
        folded: rule
        for folded, enabled, rule in stored_rules()
        if enabled and rule.kind is capcore.Kind.SUM
    }
    if not rules:
        return []
    reserved_in = Exists(LedgerReservation.objects.filter(ledger=OuterRef("pk")))
    active = Q()
    for folded, rule in rules.items():
        start, _ = bounds_of_window(rule.window, now)
        recent = LedgerHour.objects.filter(ledger=OuterRef("pk"))
        if start is not None:
            recent = recent.filter(hour__gte=hour_of(start))
        currencies = [limit.currency for limit in rule.limits]
        active |= Q(rule=folded, currency__in=currencies) & (Exists(recent) | reserved_in)
    ledgers = list(Ledger.objects.filter(active))
    spent = ledgers_spent(
        windows={ledger.pk: rules[ledger.rule].window for ledger in ledgers}, now=now
    )
    reserved = ledgers_reserved(ledger_ids=[ledger.pk for ledger in ledgers])
    near = []
    for ledger in ledgers:
        limit = rules[ledger.rule].limit_for(ledger.currency)
        if limit is None:
            continue
        held = reserved.get(ledger.pk)
        near.append(
            LedgerNear(
                rule=rules[ledger.rule].name,
                key_digest=ledger.key_digest,
                spent=_money(limit, spent.get(ledger.pk, 0)),
                reserved=_money(limit, 0 if held is None else held.total),
                limit=limit,
            )
        )
    near.sort(key=lambda n: (-n.used_percent, n.rule, n.key_digest))
    return near[:most]
