"""A rule set replayed over recorded calls: what its verdicts would have been
(``manage.py backtest``; docs/policy-lab.md, "Backtest a rule set").

Pure like the rest of capcore: the caller reads the history and passes each call, in creation
order, with what actually became of it. The replay keeps its own run counters and ledgers,
from empty, the way the server keeps the live ones (docs/rules.md, "Recorded and reserved"): a
call the replay allows records its amounts at its creation; a call it holds reserves them
until the moment it actually ended, then records them if it actually went ahead or releases
them otherwise; a call it refuses records nothing.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from capcore.budgets import Budget, BudgetScope, RunCounters
from capcore.caps import LedgerKey, LedgerRecord, bounds_of_window, ledger_rule
from capcore.engine import CallRequest, Evaluation, PolicyState, evaluate_call
from capcore.errors import CapcoreError
from capcore.findings import ActionKind, Finding, Policy
from capcore.permissions import Mode, PermissionRule, ToolClassPin
from capcore.rules import Rule, Window
from capcore.verdict import Status

OUT_OF_ORDER = "calls must be replayed in creation order"
POLICY_ERROR = "evaluating call {call} failed"
NOT_AWARE = "times must be aware datetimes"
ONE_MICROSECOND = timedelta(microseconds=1)
_ORDER = (Status.ALLOWED, Status.PENDING, Status.REFUSED)


class ReplayFailed(CapcoreError):
    """Evaluating a call failed unexpectedly (a policy error, which refuses the call live): a
    report built on it would be wrong, so there is none. ``call`` is the call's id; the
    failure is the exception's cause."""

    def __init__(self, call: str) -> None:
        super().__init__(POLICY_ERROR.format(call=call))
        self.call = call


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """What an agent's calls are judged by besides the cap rules: as configured now.

    ``permission_rules`` pairs each rule with the moment it was created: a rule applies to the
    calls made from then on (a grant given by an approval helps the calls after it, as it did
    live, not the call it was given on).
    """

    mode: Mode = Mode.DEFAULT
    permission_rules: Sequence[tuple[datetime, PermissionRule]] = ()
    tool_class_pins: Sequence[ToolClassPin] = ()
    budget: Budget | None = None


@dataclass(frozen=True, slots=True)
class PastCall:
    """One recorded call as the replay reads it.

    ``arguments_text`` is what the agent submitted (before any edit); ``actual`` its verdict at
    submission (``PENDING``: it was held, whatever was decided later); ``went_ahead`` whether
    it ended allowed or approved; ``ended_at`` when it ended (its creation, for a call allowed
    or refused at submission), ``None`` while it is still pending.
    """

    id: str
    agent: int
    tool: str
    arguments_text: str
    principal: str
    run_id: str
    created_at: datetime
    actual: Status
    went_ahead: bool
    ended_at: datetime | None


@dataclass(frozen=True, slots=True)
class Change:
    """A call whose replay verdict differs from its actual one; ``rules``: the names of the
    replayed cap rules among the replay's reasons, in their order."""

    call: str
    actual: Status
    replay: Status
    rules: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RuleCount:
    """The calls the replay held, and refused, with the rule among their reasons."""

    held: int = 0
    refused: int = 0


@dataclass(frozen=True, slots=True)
class Backtest:
    calls: int
    actual: Mapping[Status, int]
    replay: Mapping[Status, int]
    rules: Mapping[str, RuleCount]  # every replayed rule by its name, in file order
    changed: tuple[Change, ...]
    holds_per_day_mean: Decimal  # to one decimal place, half to even
    holds_per_day_max: int
    days: int


@dataclass(slots=True)
class _Ledger:
    """One running total in the replay: its entries within the window (oldest first) and
    their sum, and what held calls reserve in it now."""

    rule: str  # the ledger key's rule: whose window it keeps
    entries: deque[tuple[datetime, int]] = field(default_factory=deque)
    recorded: int = 0
    reserved: int = 0

    def total(self, start: datetime | None, inclusive: bool) -> int:
        """Recorded since ``start`` (``bounds_of_window``), plus reserved. Entries arrive in
        time order and the start only moves on, so an entry that left the window never comes
        back: it is dropped for good."""
        entries = self.entries
        if start is not None:
            while entries and (entries[0][0] < start if inclusive else entries[0][0] <= start):
                self.recorded -= entries.popleft()[1]
        return self.recorded + self.reserved


class _Ledgers(Mapping[LedgerKey, int]):
    """Every ledger of the replay; read as a mapping, the totals (recorded within the window
    plus reserved) at ``now``, which the engine reads for exactly the ledgers a call
    touches."""

    def __init__(self, windows: Mapping[str, Window | None]) -> None:
        self._windows = windows
        # By the key's parts: a tuple of strings hashes faster than the dataclass.
        self._ledgers: dict[tuple[str, str, str | None], _Ledger] = {}
        self._starts: dict[str, tuple[datetime | None, bool]] = {}
        self._now: datetime | None = None

    def at(self, now: datetime) -> None:
        """Read the totals at ``now`` from here on."""
        if now != self._now:
            self._now = now
            self._starts = {}

    def _start(self, rule: str) -> tuple[datetime | None, bool]:
        """The bounds ``in_window`` decides by, once per rule and moment: only for the rules
        a call touches."""
        start = self._starts.get(rule)
        if start is None:
            assert self._now is not None
            start = self._starts[rule] = bounds_of_window(self._windows[rule], self._now)
        return start

    def _ledger(self, key: LedgerKey) -> _Ledger:
        parts = (key.rule, key.currency, key.key_digest)
        ledger = self._ledgers.get(parts)
        if ledger is None:
            ledger = self._ledgers[parts] = _Ledger(key.rule)
        return ledger

    def __getitem__(self, key: LedgerKey) -> int:
        ledger = self._ledger(key)
        return ledger.total(*self._start(ledger.rule))

    def __iter__(self) -> Iterator[LedgerKey]:
        return (LedgerKey(*parts) for parts in self._ledgers)

    def __len__(self) -> int:
        return len(self._ledgers)

    def record(self, records: Iterable[LedgerRecord], at: datetime) -> None:
        for record in records:
            ledger = self._ledger(record.ledger)
            ledger.entries.append((at, record.minor))
            ledger.recorded += record.minor

    def reserve(self, records: Iterable[LedgerRecord], sign: int) -> None:
        for record in records:
            self._ledger(record.ledger).reserved += sign * record.minor


class _Counters:
    """The replay's run counters: calls per run (or per agent-day) and the first call's time.
    Tokens and costs are not in the history, so they count as none."""

    def __init__(self) -> None:
        self._counters: dict[tuple[int, BudgetScope, str], tuple[int, datetime]] = {}

    def count(self, call: PastCall, budget: Budget | None) -> RunCounters:
        """Count the call; the counters as they stood before it."""
        scope = budget.scope if budget is not None else BudgetScope.RUN
        day = call.created_at.astimezone(UTC).date()
        key = call.run_id if scope is BudgetScope.RUN else day.isoformat()
        calls, started_at = self._counters.get((call.agent, scope, key), (0, call.created_at))
        self._counters[(call.agent, scope, key)] = (calls + 1, started_at)
        return RunCounters(calls, 0, 0, started_at if calls else None)


class _Permissions:
    """Each agent's permission rules created by a moment, read once per distinct prefix."""

    def __init__(self) -> None:
        self._sorted: dict[int, tuple[list[datetime], list[PermissionRule]]] = {}
        self._prefixes: dict[tuple[int, int], tuple[PermissionRule, ...]] = {}

    def at(self, agent: int, settings: AgentSettings, now: datetime) -> tuple[PermissionRule, ...]:
        found = self._sorted.get(agent)
        if found is None:
            pairs = sorted(settings.permission_rules, key=lambda pair: (pair[0], pair[1].id))
            found = self._sorted[agent] = ([at for at, _ in pairs], [rule for _, rule in pairs])
        times, rules = found
        count = bisect_right(times, now)
        prefix = self._prefixes.get((agent, count))
        if prefix is None:
            # Sorted by id, as the server reads them.
            prefix = self._prefixes[(agent, count)] = tuple(
                sorted(rules[:count], key=lambda rule: rule.id)
            )
        return prefix


def _rules_among(reasons: Iterable[Finding], names: Mapping[str, str]) -> tuple[str, ...]:
    """The casefolded names of the replayed cap rules among ``reasons``, once each, in order."""
    return tuple(
        dict.fromkeys(
            f.rule.casefold()
            for f in reasons
            if f.policy is Policy.CAP and f.rule is not None and f.rule.casefold() in names
        )
    )


def _shadow_among(shadow: Iterable[Finding], names: Mapping[str, str]) -> dict[str, Finding]:
    """Each replayed shadow rule among a call's shadow findings (casefolded), with its first
    finding."""
    found: dict[str, Finding] = {}
    for finding in shadow:
        if finding.rule is not None and finding.rule.casefold() in names:
            found.setdefault(finding.rule.casefold(), finding)
    return found


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(NOT_AWARE)
    return moment.astimezone(UTC)


def _holds_per_day(
    holds: Counter[date], first: date | None, last: date | None
) -> tuple[Decimal, int, int]:
    if first is None or last is None or last < first:
        return Decimal("0.0"), 0, 0
    days = (last - first).days + 1
    mean = (Decimal(sum(holds.values())) / days).quantize(Decimal("0.1"), ROUND_HALF_EVEN)
    return mean, max(holds.values(), default=0), days


class _Replay:
    """The replay's state as it goes through the calls, and its counts."""

    def __init__(self, rules: Sequence[Rule], agents: Mapping[int, AgentSettings]) -> None:
        self.rules = tuple(rules)
        self.names = {rule.name.casefold(): rule.name for rule in rules}
        self.agents = agents
        self.ledgers = _Ledgers({ledger_rule(rule): rule.window for rule in rules})
        self.counters = _Counters()
        self.permissions = _Permissions()
        # Held calls' ends, soonest first: (ended at, order of the call, records, went ahead).
        self.ends: list[tuple[datetime, int, tuple[LedgerRecord, ...], bool]] = []
        self.actual: Counter[Status] = Counter()
        self.replay: Counter[Status] = Counter()
        self.held: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.holds: Counter[date] = Counter()
        self.changed: list[Change] = []
        self.first: datetime | None = None
        self.last: datetime | None = None
        self.count = 0

    def _end_until(self, now: datetime) -> None:
        """End the held calls that ended by ``now``: a decision taken at the very moment of a
        submission counts before it."""
        while self.ends and self.ends[0][0] <= now:
            ended_at, _, records, went_ahead = heapq.heappop(self.ends)
            self.ledgers.reserve(records, -1)
            if went_ahead:
                self.ledgers.record(records, ended_at)

    def _evaluation(self, call: PastCall, now: datetime) -> Evaluation:
        settings = self.agents[call.agent]
        self.ledgers.at(now)
        state = PolicyState(
            now=now,
            mode=settings.mode,
            permission_rules=self.permissions.at(call.agent, settings, now),
            tool_class_pins=settings.tool_class_pins,
            budget=settings.budget,
            counters=self.counters.count(call, settings.budget),
            cap_rules=self.rules,
            spent=self.ledgers,
        )
        request = CallRequest(
            tool=call.tool,
            arguments_text=call.arguments_text,
            principal=call.principal,
            run_id=call.run_id,
        )
        return evaluate_call(request, state)

    def _keep(self, call: PastCall, evaluation: Evaluation, now: datetime) -> None:
        """Record what the replay allows, reserve what it holds until the call ended."""
        status = evaluation.verdict.status
        # A shadow rule's amounts go into its own ledgers as the enforced rules' do.
        records = evaluation.records + evaluation.shadow_records
        if status is Status.ALLOWED:
            self.ledgers.record(records, now)
        elif status is Status.PENDING:
            self.ledgers.reserve(records, +1)
            if call.ended_at is not None:
                # A call that ended at submission (allowed or refused) reserves for no time.
                ended_at = max(_utc(call.ended_at), now)
                heapq.heappush(self.ends, (ended_at, self.count, records, call.went_ahead))

    def _tally(self, call: PastCall, evaluation: Evaluation, now: datetime) -> None:
        status = evaluation.verdict.status
        enforced = _rules_among(evaluation.verdict.reasons, self.names)
        for rule in enforced:
            if status is Status.PENDING:
                self.held[rule] += 1
            elif status is Status.REFUSED:
                self.refused[rule] += 1
        # A shadow rule counts by what it would have done, which it never does.
        for rule, finding in _shadow_among(evaluation.shadow, self.names).items():
            counts = self.refused if finding.action.kind is ActionKind.REFUSE else self.held
            counts[rule] += 1
        if status is Status.PENDING:
            self.holds[now.date()] += 1
        self.actual[call.actual] += 1
        self.replay[status] += 1
        if status is not call.actual:
            names = tuple(self.names[rule] for rule in enforced)
            self.changed.append(Change(call.id, call.actual, status, names))

    def step(self, call: PastCall) -> None:
        now = _utc(call.created_at)
        if self.last is not None and now < self.last:
            raise ValueError(OUT_OF_ORDER)
        self.first = now if self.first is None else self.first
        self.last = now
        self._end_until(now)
        evaluation = self._evaluation(call, now)
        if evaluation.error is not None:
            raise ReplayFailed(call.id) from evaluation.error
        self._keep(call, evaluation, now)
        self._tally(call, evaluation, now)
        self.count += 1

    def result(self, since: datetime | None, until: datetime | None) -> Backtest:
        first, last = self.first, self.last
        first_day = _utc(since).date() if since is not None else first.date() if first else None
        last_day = _utc(until - ONE_MICROSECOND).date() if until is not None else None
        if last_day is None and last is not None:
            last_day = last.date()
        mean, most, days = _holds_per_day(self.holds, first_day, last_day)
        return Backtest(
            calls=self.count,
            actual={status: self.actual[status] for status in _ORDER},
            replay={status: self.replay[status] for status in _ORDER},
            rules={
                rule.name: RuleCount(self.held[folded], self.refused[folded])
                for rule in self.rules
                for folded in [rule.name.casefold()]
            },
            changed=tuple(self.changed),
            holds_per_day_mean=mean,
            holds_per_day_max=most,
            days=days,
        )


def backtest(
    calls: Iterable[PastCall],
    *,
    rules: Sequence[Rule],
    agents: Mapping[int, AgentSettings],
    since: datetime | None = None,
    until: datetime | None = None,
) -> Backtest:
    """Replay ``calls`` (in creation order) with ``rules`` as the cap rules.

    Each call is evaluated as it was submitted (its agent's settings, principal, run and
    arguments, at its creation time) against counters and ledgers the replay keeps from
    empty. ``agents`` is read once per agent, when its first call comes. ``since``/``until``
    (``until`` excluded) only set the days holds are averaged over; without them, the days
    from the first call's to the last one's (UTC).

    ``rules`` counts, for an enforced rule, the calls the replay holds or refuses with it among
    their reasons; for a shadow rule, the calls it would have held or refused. Raises
    ``ReplayFailed`` when evaluating a call fails unexpectedly.
    """
    replay = _Replay(rules, agents)
    for call in calls:
        replay.step(call)
    return replay.result(since, until)
