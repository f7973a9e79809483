"""The history a backtest replays (``manage.py backtest``; docs/policy-lab.md, "Backtest a
rule set"): the recorded calls of a period, in creation order, and every agent's settings as
configured now. Reads only: nothing is written, locked or counted."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from django.db.models import Q

import capcore
from approvals.models import Agent, Call, PermissionRule
from approvals.selectors.policies import policy_for_agent
from capcore.backtest import AgentSettings, Backtest, PastCall, backtest
from capcore.verdict import Status

CHUNK = 2000
# A permission rule created after its list was read applies to no past call.
CREATED_LATER = datetime.max.replace(tzinfo=UTC)
WENT_AHEAD = frozenset({Call.Status.ALLOWED, Call.Status.APPROVED})
_FIELDS = (
    "id",
    "agent_id",
    "tool",
    "arguments",
    "original_arguments",
    "original_arguments_sha256",
    "principal",
    "run_id",
    "created_at",
    "status",
    "expires_at",
    "decided_at",
    "updated_at",
)


HELD = "held"
# The report's words for a verdict: capcore's, but "held" for a call held for a person.
WORD = {
    Status.ALLOWED: Status.ALLOWED.value,
    Status.PENDING: HELD,
    Status.REFUSED: Status.REFUSED.value,
}


def moment_parse(text: str) -> datetime:
    """An ISO-8601 date (its UTC midnight) or date and time (UTC when it names no offset), in
    UTC; ``ValueError`` otherwise, whose message the caller never shows (it quotes the text)."""
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None or moment.utcoffset() is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # the first or last day of the calendar, with an offset
        raise ValueError("out of range") from None


def moment_iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def backtest_report(
    result: Backtest, *, since: datetime | None, until: datetime | None
) -> dict[str, object]:
    """The report as one object: what ``manage.py backtest --json`` prints and the Rules lab
    shows (docs/policy-lab.md)."""
    return {
        "calls": result.calls,
        "since": moment_iso(since),
        "until": moment_iso(until),
        "actual": {WORD[status]: count for status, count in result.actual.items()},
        "replay": {WORD[status]: count for status, count in result.replay.items()},
        "rules": {
            name: {HELD: count.held, Status.REFUSED.value: count.refused}
            for name, count in result.rules.items()
        },
        "changed": [
            {
                "call": change.call,
                "actual": WORD[change.actual],
                "replay": WORD[change.replay],
                "rules": list(change.rules),
            }
            for change in result.changed
        ],
        "holds_per_day": {
            "mean": float(result.holds_per_day_mean),
            "max": result.holds_per_day_max,
        },
    }


def _period(since: datetime | None, until: datetime | None) -> Q:
    period = Q()
    if since is not None:
        period &= Q(created_at__gte=since)
    if until is not None:
        period &= Q(created_at__lt=until)
    return period


def _past_call(row: tuple[object, ...]) -> PastCall:
    (
        call_id,
        agent_id,
        tool,
        arguments,
        original,
        original_sha256,
        principal,
        run_id,
        created_at,
        status,
        expires_at,
        decided_at,
        updated_at,
    ) = row
    assert isinstance(created_at, datetime)
    assert isinstance(agent_id, int)
    # Only a call held at submission gets a deadline; it keeps it whatever becomes of it.
    held = expires_at is not None
    if held:
        actual = capcore.Status.PENDING
        ended_at = None if status == Call.Status.PENDING else decided_at or updated_at
    else:
        actual = capcore.Status(status)
        ended_at = created_at
    assert ended_at is None or isinstance(ended_at, datetime)
    return PastCall(
        id=str(call_id),
        agent=agent_id,
        tool=str(tool),
        # The arguments as submitted: an approver's edit is not what the policy judged.
        arguments_text=str(original if original_sha256 else arguments),
        principal=str(principal),
        run_id=str(run_id),
        created_at=created_at,
        actual=actual,
        went_ahead=status in WENT_AHEAD,
        ended_at=ended_at,
    )


def calls_replayed(*, since: datetime | None, until: datetime | None) -> Iterator[PastCall]:
    """The calls created in [``since``, ``until``), oldest first (ties by id), read in
    chunks."""
    rows = (
        Call.objects.filter(_period(since, until))
        .order_by("created_at", "id")
        .values_list(*_FIELDS)
        .iterator(chunk_size=CHUNK)
    )
    return (_past_call(row) for row in rows)


def calls_in_period_count(*, since: datetime | None, until: datetime | None) -> int:
    """How many calls a backtest of [``since``, ``until``) would replay."""
    return Call.objects.filter(_period(since, until)).count()


def agent_settings(*, agent: Agent) -> AgentSettings:
    """The agent's mode, permission rules (each with when it was created), tool classes and
    budget as they are now."""
    created = dict(
        PermissionRule.objects.filter(Q(agent=agent) | Q(agent__isnull=True)).values_list(
            "pk", "created_at"
        )
    )
    policy = policy_for_agent(agent=agent)
    return AgentSettings(
        mode=capcore.Mode.parse(agent.mode),
        permission_rules=tuple(
            (created.get(rule.id, CREATED_LATER), rule) for rule in policy.permission_rules
        ),
        tool_class_pins=policy.tool_class_pins,
        budget=policy.budget,
    )


class _AgentsRead(dict[int, AgentSettings]):
    """Each agent's settings, read when the replay first meets one of its calls."""

    def __missing__(self, agent_id: int) -> AgentSettings:
        settings = self[agent_id] = agent_settings(agent=Agent.objects.get(pk=agent_id))
        return settings


def calls_backtest(
    *, rules: Sequence[capcore.Rule], since: datetime | None, until: datetime | None
) -> Backtest:
    """The calls created in [``since``, ``until``) replayed with ``rules`` as the cap rules
    and everything else as configured now (``capcore.backtest``)."""
    return backtest(
        calls_replayed(since=since, until=until),
        rules=rules,
        agents=_AgentsRead(),
        since=since,
        until=until,
    )
