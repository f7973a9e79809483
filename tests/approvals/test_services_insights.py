"""The insights' kept days: a settled day's row holds what its calls and approvals count,
worked out here by hand (a call ending after midnight, an expiry, an edit that voids an
approval), and no day is kept before it has settled."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import Call, InsightsDay
from approvals.selectors.insights import (
    SETTLE,
    DayFigures,
    insights_days_counted,
    insights_days_kept,
)
from approvals.services.decisions import call_decide
from approvals.services.insights import insights_days_keep
from approvals.services.lifecycle import calls_expire_due
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make

pytestmark = pytest.mark.django_db

RULES = (
    "big: pay arg=amount max USD 100.00 -> gate",
    "wire-cap: wire arg=amount max USD 1000.00 -> gate treasury",
)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, UTC)


def _decide(
    call: Call, user: User, at: datetime, *, approve: bool = True, arguments: str | None = None
) -> None:
    call.refresh_from_db()
    call_decide(
        call_id=call.pk,
        user=user,
        approve=approve,
        comment="",
        arguments_sha256=call.arguments_sha256,
        arguments=arguments,
        now=at,
    )


@dataclass
class History:
    day: date  # D: the day most of it was submitted; D + 1 is where some of it ended
    alice: User
    bob: User


@pytest.fixture
def history() -> History:
    """Around the midnight after day D, five days ago: a call approved 10 s after midnight,
    one expired 3 minutes after it, an edit at the treasury that voids alice's approval, an
    allowed call, a denial on D + 1, and an allowed call a second before D began."""
    for line in RULES:
        rule_make(line=line)
    gate_make(name="", timeout_seconds=300)
    treasury = gate_make(name="treasury", required_approvals=2, timeout_seconds=3600)
    assert treasury.required_approvals == 2
    alice, bob = user_make(username="alice"), user_make(username="bob")
    agent = agent_make()
    day = timezone.now().astimezone(UTC).date() - timedelta(days=5)
    midnight = _midnight(day + timedelta(days=1))

    approved = call_make(
        agent=agent, arguments=payment("150.00"), now=midnight - timedelta(seconds=10)
    )
    _decide(approved, alice, midnight + timedelta(seconds=10))
    lapsed = call_make(
        agent=agent, arguments=payment("200.00"), now=midnight - timedelta(minutes=2)
    )
    assert lapsed.expires_at == midnight + timedelta(minutes=3)
    assert calls_expire_due(now=lapsed.expires_at) == 1

    submitted = _midnight(day) + timedelta(hours=10)
    wire = call_make(agent=agent, tool="wire", arguments=payment("5000.00"), now=submitted)
    _decide(wire, alice, submitted + timedelta(minutes=1))
    _decide(wire, bob, submitted + timedelta(minutes=2), arguments=payment("4000.00"))
    _decide(wire, alice, submitted + timedelta(minutes=3))
    call_make(agent=agent, arguments=payment("5.00"), now=_midnight(day) + timedelta(hours=12))

    denied = call_make(
        agent=agent, arguments=payment("300.00"), now=midnight + timedelta(minutes=30)
    )
    _decide(denied, bob, midnight + timedelta(minutes=32), approve=False)
    call_make(agent=agent, arguments=payment("1.00"), now=_midnight(day) - timedelta(seconds=1))

    statuses = Counter(Call.objects.values_list("status", flat=True))
    assert statuses == {"approved": 2, "expired": 1, "allowed": 2, "denied": 1}
    return History(day, alice, bob)


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def test_a_kept_day_holds_what_its_calls_and_approvals_count(history: History) -> None:
    d, alice, bob = history.day, history.alice.pk, history.bob.pk
    first, last = d - timedelta(days=2), d + timedelta(days=2)
    counted = insights_days_counted(days=_days(first, last))

    kept = insights_days_keep(first_day=first)

    assert set(_days(first, last)) <= set(kept)
    expected = {
        d - timedelta(days=2): DayFigures(),
        d - timedelta(days=1): DayFigures(calls=Counter(allowed=1)),
        d: DayFigures(
            calls=Counter(approved=2, expired=1, allowed=1),
            holds=Counter({"big": 2, "wire-cap": 1}),
            waits={"": Counter({20: 1}), "treasury": Counter({180: 1})},
            decisions=Counter({(alice, True): 2, (bob, True): 1}),
        ),
        d + timedelta(days=1): DayFigures(
            calls=Counter(denied=1),
            holds=Counter(big=1),
            waits={"": Counter({120: 1})},
            expiries=1,
            decisions=Counter({(alice, True): 1, (bob, False): 1}),
        ),
        d + timedelta(days=2): DayFigures(),
    }
    assert counted == expected
    assert insights_days_kept(first_day=first, last_day=last) == expected


def test_a_day_is_kept_once_it_ended_an_hour_ago_with_none_of_its_calls_held() -> None:
    rule_make(line="big: pay arg=amount max USD 100.00 -> gate")
    gate_make(name="", timeout_seconds=86400)
    alice = user_make(username="alice")
    day = timezone.now().astimezone(UTC).date() - timedelta(days=3)
    midnight = _midnight(day + timedelta(days=1))
    held = call_make(
        agent=agent_make(), arguments=payment("150.00"), now=midnight - timedelta(hours=2)
    )

    assert insights_days_keep(first_day=day, now=midnight + SETTLE - timedelta(seconds=1)) == []
    assert insights_days_keep(first_day=day, now=midnight + SETTLE) == []  # still held
    assert not InsightsDay.objects.exists()

    _decide(held, alice, midnight + timedelta(minutes=5))
    assert insights_days_keep(first_day=day, now=midnight + SETTLE) == [day]
    assert insights_days_kept(first_day=day, last_day=day)[day].calls == {"approved": 1}
    # Kept once: a second pass finds nothing to do.
    assert insights_days_keep(first_day=day, now=midnight + SETTLE) == []
    assert InsightsDay.objects.get().day == day


def test_a_day_kept_by_another_process_first_is_left_as_it_is(history: History) -> None:
    """Two processes keeping the same day count the same figures; the later row is dropped,
    never written over the first."""
    day = history.day
    first = insights_days_counted(days=[day])[day]
    InsightsDay.objects.create(day=day, figures=first.as_json())
    kept = insights_days_keep(first_day=day - timedelta(days=1))
    assert day not in kept
    assert InsightsDay.objects.filter(day=day).count() == 1
    assert insights_days_kept(first_day=day, last_day=day)[day] == first
