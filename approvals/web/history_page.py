"""The history page's view model: final calls, newest first, narrowed by filters."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import QuerySet

import capcore
from approvals.models import Agent, Call
from approvals.selectors.caps import call_amounts, cap_assessments, held_by
from approvals.selectors.rules import stored_rules

# The final statuses, held calls' endings first.
HISTORY_STATUSES = (
    Call.Status.APPROVED,
    Call.Status.DENIED,
    Call.Status.EXPIRED,
    Call.Status.CANCELLED,
    Call.Status.ALLOWED,
    Call.Status.REFUSED,
)


# The dates a filter may name: ``until`` is inclusive, so the day after it must be a date.
HISTORY_FIRST_DAY = date.min
HISTORY_LAST_DAY = date.max - timedelta(days=1)


@dataclass(frozen=True, slots=True)
class HistoryFilters:
    status: str = ""
    agent: Agent | None = None
    tool: str = ""
    principal: str = ""
    since: date | None = None
    until: date | None = None


def history_calls(*, filters: HistoryFilters) -> QuerySet[Call]:
    """Final calls, newest first, narrowed by the filters (``until`` is inclusive, and no
    later than ``HISTORY_LAST_DAY``)."""
    calls = Call.objects.exclude(status=Call.Status.PENDING)
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
    amounts: tuple[capcore.Limit, ...]
    held_by: tuple[str, ...]


def history_rows(calls: Iterable[Call]) -> list[HistoryRow]:
    """A page of calls with their amounts (one query for the rules, however many rows)."""
    stored = stored_rules()
    return [
        HistoryRow(call, call_amounts(cap_assessments(call, stored)), held_by(call))
        for call in calls
    ]
