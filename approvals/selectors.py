"""Reads. Small typed functions that the services, API and pages share."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, Sum

import capcore
from approvals import jsontext
from approvals.models import (
    Agent,
    AuditEntry,
    Budget,
    Call,
    CapRule,
    Ledger,
    LedgerEntry,
    PermissionRule,
    ToolClass,
)


@functools.lru_cache(maxsize=4096)
def stored_rule(line: str) -> capcore.Rule | None:
    """A stored line's rule, or None when it no longer parses (e.g. after a table upgrade)."""
    try:
        return capcore.parse_rule(line)
    except capcore.RuleError:
        return None


@dataclass(frozen=True, slots=True)
class AgentPolicy:
    cap_rules: tuple[capcore.Rule, ...]
    cap_rules_unreadable: bool
    windows: dict[str, capcore.Window | None]  # by casefolded rule name
    permission_rules: tuple[capcore.PermissionRule, ...]
    tool_class_pins: tuple[capcore.ToolClassPin, ...]
    budget: capcore.Budget | None


def _budget(row: Budget | None) -> capcore.Budget | None:
    if row is None:
        return None
    action = capcore.Action(capcore.ActionKind(row.action), row.gate)
    return capcore.Budget(
        max_calls=row.max_calls,
        max_tokens=row.max_tokens,
        max_cost=row.max_cost,
        cost_currency=row.cost_currency or None,
        max_duration=row.max_duration,
        scope=capcore.BudgetScope(row.scope),
        action=action,
    )


def policy_for_agent(*, agent: Agent) -> AgentPolicy:
    """Everything the verdict on this agent's next call depends on."""
    parsed = [
        stored_rule(line)
        for line in CapRule.objects.filter(enabled=True).values_list("line", flat=True)
    ]
    rules = tuple(rule for rule in parsed if rule is not None)
    permission_rules = tuple(
        capcore.PermissionRule(
            id=row.pk,
            pattern=row.pattern,
            decision=capcore.Decision(row.decision),
            run_id=row.run_id,
            expires_at=row.expires_at,
        )
        for row in PermissionRule.objects.filter(Q(agent=agent) | Q(agent__isnull=True)).order_by(
            "pk"
        )
    )
    pins = tuple(
        capcore.ToolClassPin(pattern, capcore.ToolClass(tool_class))
        for pattern, tool_class in ToolClass.objects.values_list("pattern", "tool_class")
    )
    budget = (
        Budget.objects.filter(agent=agent).first()
        or Budget.objects.filter(agent__isnull=True).first()
    )
    return AgentPolicy(
        cap_rules=rules,
        cap_rules_unreadable=len(rules) != len(parsed),
        windows={rule.name.casefold(): rule.window for rule in rules},
        permission_rules=permission_rules,
        tool_class_pins=pins,
        budget=_budget(budget),
    )


def ledger_spent(*, ledger: Ledger, window: capcore.Window | None, now: datetime) -> int:
    """The ledger's total within the window ending at ``now`` (voided entries excluded).

    Entries stamped after ``now`` count too: they can only come from a worker whose clock is
    ahead, and leaving them out would let calls through past the limit.
    """
    start, inclusive = capcore.window_bounds(window, now)
    entries = LedgerEntry.objects.filter(ledger=ledger, voided_at__isnull=True)
    if start is not None:
        entries = (
            entries.filter(recorded_at__gte=start)
            if inclusive
            else entries.filter(recorded_at__gt=start)
        )
    total = entries.aggregate(total=Sum("minor"))["total"]
    return int(total or 0)


FINAL_STATUSES = frozenset({"allowed", "refused", "approved", "denied", "expired", "cancelled"})


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def call_state(call: Call) -> dict[str, Any]:
    """The call state object of the agent API (``agent-api.md``)."""
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
        "approvals": [
            {"by": approval.user.get_username(), "at": _iso(approval.created_at)}
            for approval in call.approvals.all()
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


@dataclass(frozen=True, slots=True)
class CallPage:
    """What the call page shows: the call, its arguments for people, and its audit trail."""

    call: Call
    arguments_pretty: str
    arguments_readable: bool
    audit: list[AuditEntry]


def call_page(*, call_id: uuid.UUID) -> CallPage | None:
    call = (
        Call.objects.select_related("agent", "decided_by")
        .prefetch_related("approvals__user")
        .filter(pk=call_id)
        .first()
    )
    if call is None:
        return None
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
    return CallPage(call, pretty, readable, audit)
