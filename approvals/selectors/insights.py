"""The insights page's figures (docs/ui.md, "Insights"): what oversight costs over the last 7,
30 or 90 days, counted by the database.

A day's figures are counted from its calls and approvals (``insights_days_counted``): the
calls created that day by status, the rules that held them and their waits for a person's
decision, the expiries and the decisions given that day. Once a day has settled (it ended
``SETTLE`` ago and none of its calls is still held), the services, which date every write
with the time it is made, can no longer change them: they are kept in an ``InsightsDay`` row
(``services.insights``), and a period's figures add the kept days to the others counted
afresh, today always among them.

A period's figures change only with a write that the audit log records, so they are also
kept per process under the audit chain's head (the policies' pattern, ``selectors.policies``):
the page counts them again after any such write, and on a new UTC day. The ledgers nearest
their limits are read on every request, since their windows move with the clock.
"""

from __future__ import annotations

import operator
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import reduce
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import CharField, Count, Exists, Func, OuterRef, Q
from django.db.models.functions import Cast, Substr, TruncDate
from django.utils import timezone

import capcore
from approvals.models import (
    Approval,
    Call,
    InsightsDay,
    Ledger,
    LedgerHour,
    LedgerReservation,
)
from approvals.selectors.audit import audit_head
from approvals.selectors.deciders import may_view
from approvals.selectors.ledgers import ledgers_reserved, ledgers_spent
from approvals.selectors.rules import stored_rules
from approvals.services.statements import hour_of
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
# How long after its end a day may be kept: far longer than any transaction that took its
# time (a call's creation, a decision, an expiry) before midnight takes to commit.
SETTLE = timedelta(hours=1)
SECOND = timedelta(seconds=1)


def insights_may_view(user: User | AnonymousUser) -> bool:
    """Approvers and viewers of the approver's pages, and active staff."""
    return may_view(user) or bool(user.is_authenticated and user.is_active and user.is_staff)


def _start_of(day: date) -> datetime:
    return datetime.combine(day, time.min, UTC)


@dataclass(frozen=True, slots=True)
class Period:
    days: int
    first_day: date  # UTC
    last_day: date  # today, UTC

    @property
    def start(self) -> datetime:
        return _start_of(self.first_day)

    @property
    def dates(self) -> tuple[date, ...]:
        return tuple(self.first_day + timedelta(days=i) for i in range(self.days))


def insights_period(*, days: int, now: datetime | None = None) -> Period:
    """The last ``days`` UTC days, today included; ``days`` one of ``PERIODS``."""
    if days not in PERIODS:
        raise ValueError("a period is 7, 30 or 90 days")
    today = (now or timezone.now()).astimezone(UTC).date()
    return Period(days, today - timedelta(days=days - 1), today)


def insights_last_settled(*, now: datetime | None = None) -> date:
    """The last UTC day that ended ``SETTLE`` ago or more: no write still open dates itself
    in it or before it."""
    return ((now or timezone.now()) - SETTLE).astimezone(UTC).date() - timedelta(days=1)


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


@dataclass(slots=True)
class DayFigures:
    """What one UTC day counts. By the day a call was created: the calls by status, how many
    held calls each rule (else policy) named, and each gate's waits from submission to a
    person's decision (whole seconds: decisions). By the day it happened: the expiries, and
    the decisions given, by (user id, approve)."""

    calls: Counter[str] = field(default_factory=Counter)
    holds: Counter[str] = field(default_factory=Counter)
    waits: dict[str, Counter[int]] = field(default_factory=dict)
    expiries: int = 0
    decisions: Counter[tuple[int, bool]] = field(default_factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "holds": dict(self.holds),
            "waits": {gate: sorted(waited.items()) for gate, waited in self.waits.items()},
            "expiries": self.expiries,
            "decisions": [[*given, n] for given, n in sorted(self.decisions.items())],
        }

    @classmethod
    def from_json(cls, kept: dict[str, Any]) -> DayFigures:
        return cls(
            calls=Counter({str(status): int(n) for status, n in kept["calls"].items()}),
            holds=Counter({str(name): int(n) for name, n in kept["holds"].items()}),
            waits={
                str(gate): Counter({int(seconds): int(n) for seconds, n in waited})
                for gate, waited in kept["waits"].items()
            },
            expiries=int(kept["expiries"]),
            decisions=Counter(
                {(int(user), bool(approve)): int(n) for user, approve, n in kept["decisions"]}
            ),
        )


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


def _day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def _on_days(field: str, days: Iterable[date]) -> Q:
    """Rows whose datetime ``field`` falls on one of ``days`` (UTC): a range per run of
    consecutive days, which the column's index serves. ``days`` not empty."""
    runs: list[list[date]] = []
    for day in sorted(set(days)):
        if runs and runs[-1][1] + timedelta(days=1) == day:
            runs[-1][1] = day
        else:
            runs.append([day, day])
    return reduce(
        operator.or_,
        (
            Q(
                **{
                    f"{field}__gte": _start_of(first),
                    f"{field}__lt": _start_of(last) + timedelta(days=1),
                }
            )
            for first, last in runs
        ),
    )


def _names(reasons: list[dict[str, Any]]) -> dict[str, None]:
    """What a call's reasons name, once each: rules, else the policy."""
    return dict.fromkeys(str(reason.get("rule") or reason["policy"]) for reason in reasons)


def _count_calls(counted: dict[date, DayFigures], created: Q) -> None:
    rows = (
        Call.objects.filter(created)
        .order_by()
        .values("status", day=_utc_day("created_at"))
        .annotate(calls=Count("pk"))
        .values_list("day", "status", "calls")
    )
    for day, status, calls in rows:
        counted[_as_date(day)].calls[status] += calls


def _count_held(counted: dict[date, DayFigures], created: Q) -> None:
    """How many held calls each rule (else policy) named among its reasons; a call counts
    once per name (``selectors.caps.held_by``). Grouped by the names of the first
    ``REASONS_GROUPED`` reasons (the reasons' messages differ call by call); the rare call
    with more is read whole. Then each gate's waits for a person's decision: a call held at
    two gates counts at both."""
    held = Call.objects.filter(created).exclude(gates=[]).order_by()
    fields = [f"reasons__{i}__{part}" for i in range(REASONS_GROUPED) for part in PARTS]
    more = Q(**{f"reasons__{REASONS_GROUPED}__policy__isnull": False})
    grouped = held.exclude(more).values(*fields, day=_utc_day("created_at"))
    for day, *named, calls in grouped.annotate(calls=Count("pk")).values_list(
        "day", *fields, "calls"
    ):
        reasons = [
            {"rule": named[i], "policy": named[i + 1]}
            for i in range(0, len(named), len(PARTS))
            if named[i + 1] is not None
        ]
        holds = counted[_as_date(day)].holds
        for name in _names(reasons):
            holds[name] += calls
    for created_at, reasons in held.filter(more).values_list("created_at", "reasons"):
        counted[_day_of(created_at)].holds.update(_names(reasons))
    decided = held.filter(status__in=PERSON_DECIDED).exclude(decided_at=None)
    for created_at, decided_at, gates in decided.values_list("created_at", "decided_at", "gates"):
        assert decided_at is not None  # excluded above
        waits = counted[_day_of(created_at)].waits
        waited = (decided_at - created_at) // SECOND
        for gate in dict.fromkeys(str(gate) for gate in gates):
            waits.setdefault(gate, Counter())[waited] += 1


def _count_expiries(counted: dict[date, DayFigures], decided: Q) -> None:
    rows = (
        Call.objects.filter(decided, status=Call.Status.EXPIRED)
        .order_by()
        .values(day=_utc_day("decided_at"))
        .annotate(calls=Count("pk"))
        .values_list("day", "calls")
    )
    for day, calls in rows:
        counted[_as_date(day)].expiries += calls


def _count_decisions(counted: dict[date, DayFigures], given: Q) -> None:
    """Every approval and denial given, an approval an edit voided later included."""
    rows = (
        Approval.objects.filter(given)
        .order_by()
        .values("user_id", "approve", day=_utc_day("created_at"))
        .annotate(decisions=Count("pk"))
        .values_list("day", "user_id", "approve", "decisions")
    )
    for day, user_id, approve, decisions in rows:
        counted[_as_date(day)].decisions[user_id, approve] += decisions


def insights_days_counted(*, days: Iterable[date]) -> dict[date, DayFigures]:
    """Each of ``days`` counted from its calls and approvals, as they are now."""
    counted = {day: DayFigures() for day in days}
    if counted:
        _count_calls(counted, _on_days("created_at", counted))
        _count_held(counted, _on_days("created_at", counted))
        _count_expiries(counted, _on_days("decided_at", counted))
        _count_decisions(counted, _on_days("created_at", counted))
    return counted


def insights_days_kept(*, first_day: date, last_day: date) -> dict[date, DayFigures]:
    """The kept days from ``first_day`` to ``last_day``."""
    rows = InsightsDay.objects.filter(day__gte=first_day, day__lte=last_day)
    return {day: DayFigures.from_json(kept) for day, kept in rows.values_list("day", "figures")}


def _nearest_rank(waits: Counter[int], part: int, whole: int) -> int:
    """The smallest wait that at least ``part / whole`` of the decisions took."""
    rank = (waits.total() * part + whole - 1) // whole
    seen = 0
    for seconds in sorted(waits):
        seen += waits[seconds]
        if seen >= rank:
            return seconds
    raise ValueError("no decisions")


def _approvers(decisions: Counter[tuple[int, bool]]) -> tuple[ApproverCounts, ...]:
    users = dict(
        User.objects.filter(pk__in={user for user, _ in decisions}).values_list("pk", "username")
    )
    counted: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (user, approve), n in decisions.items():
        counted[users[user]][0 if approve else 1] += n
    found = [ApproverCounts(name, given[0], given[1]) for name, given in counted.items()]
    return tuple(sorted(found, key=lambda a: (-a.total, a.username)))


def _figures(period: Period) -> Figures:
    """The kept days of the period, and the others counted now."""
    days = insights_days_kept(first_day=period.first_day, last_day=period.last_day)
    days.update(insights_days_counted(days=[day for day in period.dates if day not in days]))
    holds: Counter[str] = Counter()
    waits: defaultdict[str, Counter[int]] = defaultdict(Counter)
    decisions: Counter[tuple[int, bool]] = Counter()
    for figures in days.values():
        holds.update(figures.holds)
        for gate, waited in figures.waits.items():
            waits[gate].update(waited)
        decisions.update(figures.decisions)
    times = []
    for gate in sorted(waits):
        p50, p90 = (_nearest_rank(waits[gate], *share) for share in PERCENTILES.values())
        times.append(GateTimes(gate, waits[gate].total(), p50, p90))
    return Figures(
        period=period,
        calls_per_day=tuple(
            DayCounts(day, tuple(days[day].calls[status] for status in VERDICTS))
            for day in period.dates
        ),
        holds_by_rule=tuple(sorted(holds.items(), key=lambda item: (-item[1], item[0]))),
        decision_times=tuple(times),
        expiries_per_day=tuple((day, days[day].expiries) for day in period.dates),
        approvers=_approvers(decisions),
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
