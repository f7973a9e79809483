"""What the gates a call is held at say: how long it may wait, how many approvals it needs,
and which group may decide it; and what names a gate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

import capcore
from approvals.models import Budget, Call, Gate
from approvals.selectors.rules import stored_rules
from approvals.services.statements import HeldAtAny


def hold_seconds(*, gates: Sequence[str]) -> int:
    """How long a call held at ``gates`` waits for a decision: the smallest of their
    timeouts. A gate without one, or that nobody configured, has ``COUNTERSIGN_HOLD_TIMEOUT``:
    no gate can hold a call for ever."""
    named = Gate.objects.filter(name__in=gates) if gates else Gate.objects.none()
    timeouts = {
        name: seconds
        for name, seconds in named.values_list("name", "timeout_seconds")
        if seconds is not None
    }
    default = settings.COUNTERSIGN_HOLD_TIMEOUT
    return min(timeouts.get(gate, default) for gate in gates or [""])


def gates_required_approvals(*, names: Sequence[str]) -> dict[str, int]:
    """The required approvals of each named gate that exists."""
    if not names:
        return {}
    return dict(Gate.objects.filter(name__in=names).values_list("name", "required_approvals"))


def gates_groups(*, names: Sequence[str]) -> dict[str, int]:
    """The group (its id) of each named gate that is kept to one."""
    if not names:
        return {}
    kept = Gate.objects.filter(name__in=names, group__isnull=False)
    return dict(kept.values_list("name", "group"))


@dataclass(frozen=True, slots=True)
class GateNamedBy:
    """What holds calls at a gate by its name: cap rules (disabled ones too: enabling one
    brings it back), budgets, and the calls held there now."""

    rules: tuple[str, ...]
    budgets: tuple[str, ...]
    held_calls: int

    def __bool__(self) -> bool:
        return bool(self.rules or self.budgets or self.held_calls)


def gate_named_by(*, name: str) -> GateNamedBy:
    """What names the gate ``name``: renaming or deleting it would leave them a gate nobody
    configured. A stored rule that no longer parses names nothing (it refuses every call)."""
    rules = tuple(
        rule.name if enabled else f"{rule.name} (disabled)"
        for _, enabled, rule in stored_rules()
        if rule.action.kind is capcore.ActionKind.GATE and rule.action.gate == name
    )
    budgets = tuple(
        str(budget)
        for budget in Budget.objects.filter(action=Budget.Action.GATE, gate=name)
        .select_related("agent")
        .order_by("pk")
    )
    held = Call.objects.filter(Q(HeldAtAny((name,))), status=Call.Status.PENDING).count()
    return GateNamedBy(rules, budgets, held)
