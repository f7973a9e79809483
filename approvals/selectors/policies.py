"""The policy an agent's calls are judged by, kept per process under the policy stamp.

Reading the rules, permission rules, tool classes and budget is a quarter of a submission's
work, and they change rarely. A process keeps each agent's policy under the stamp it read
just before the policy (``PolicyStamp``, renewed by database triggers on every change to
those tables), and reads the stamp again in every submission's transaction. A change
committed before that read is always seen; one committed after it is ordered after this
call. When the stamp cannot vouch for the cache — no stamp row, a trigger missing or
disabled, a database other than SQLite or PostgreSQL — the policy is read afresh.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import F, Q

import capcore
from approvals.models import Agent, Budget, CapRule, PermissionRule, ToolClass
from approvals.selectors.rules import stored_rule
from approvals.services.statements import policy_stamp_read
from capcore.caps import ledger_rule

logger = logging.getLogger(__name__)

CACHED_AGENTS = 1024  # per process; past that the cache starts again


@dataclass(frozen=True, slots=True)
class AgentPolicy:
    cap_rules: tuple[capcore.Rule, ...]
    cap_rules_unreadable: bool
    windows: dict[str, capcore.Window | None]  # by ledger rule (capcore.caps.ledger_rule)
    permission_rules: tuple[capcore.PermissionRule, ...]
    tool_class_pins: tuple[capcore.ToolClassPin, ...]
    budget: capcore.Budget | None
    # Evaluated and recorded, never enforced; one that no longer parses is left out (and
    # logged), never a reason to refuse.
    shadow_rules: tuple[capcore.Rule, ...] = ()

    @property
    def every_cap_rule(self) -> tuple[capcore.Rule, ...]:
        """The enforced rules, then the shadow ones: what a submission's evaluation reads."""
        return self.cap_rules + self.shadow_rules


# The stamp and the policies read under it. Replaced whole when the stamp moves on, so a
# thread that read an older stamp only ever writes into that stamp's dict.
_cached: tuple[int | None, dict[int, AgentPolicy]] = (None, {})


def policy_for_agent(*, agent: Agent) -> AgentPolicy:
    """Everything the verdict on this agent's next call depends on besides its mode and
    counters. Call it inside the transaction that evaluates the call."""
    # First: whatever is read after it is at least this new.
    return policy_at_stamp(agent=agent, stamp=policy_stamp_read())


def policy_at_stamp(*, agent: Agent, stamp: int | None) -> AgentPolicy:
    """``policy_for_agent`` for a caller that has read the stamp in this transaction (the
    submission, which keeps the notification channels under it too)."""
    global _cached
    if stamp is None:
        return _policy_read(agent)
    cached_stamp, policies = _cached
    if cached_stamp != stamp:
        policies = {}
        _cached = (stamp, policies)
    policy = policies.get(agent.pk)
    if policy is None:
        policy = _policy_read(agent)
        if len(policies) >= CACHED_AGENTS:
            policies.clear()
        policies[agent.pk] = policy
    return policy


def policy_with_cap_rules(*, policy: AgentPolicy, rules: Sequence[capcore.Rule]) -> AgentPolicy:
    """``policy`` with ``rules`` (a draft, shadow ones flagged) in place of the stored cap
    rules, as if imported now: a rule reads the ledgers its name keeps (the Rules lab)."""
    enforced = tuple(rule for rule in rules if not rule.shadow)
    shadow = tuple(rule for rule in rules if rule.shadow)
    return dataclasses.replace(
        policy,
        cap_rules=enforced,
        cap_rules_unreadable=False,
        windows={ledger_rule(rule): rule.window for rule in (*enforced, *shadow)},
        shadow_rules=shadow,
    )


def _policy_read(agent: Agent) -> AgentPolicy:
    rows = list(CapRule.objects.filter(enabled=True).values_list("line", "shadow", "pk"))
    parsed = [stored_rule(line) for line, shadow, _ in rows if not shadow]
    # The row's flag decides, whatever the line says (cap_rule_save keeps them alike).
    rules = tuple(dataclasses.replace(rule, shadow=False) for rule in parsed if rule is not None)
    shadow_rules = []
    for line, shadow, pk in rows:
        if not shadow:
            continue
        rule = stored_rule(line)
        if rule is None:
            logger.error("shadow cap rule %s no longer parses: left out", pk)
            continue
        shadow_rules.append(dataclasses.replace(rule, shadow=True))
    permission_rules = tuple(
        capcore.PermissionRule(
            id=row.pk,
            pattern=row.pattern,
            decision=capcore.Decision(row.decision),
            run_id=row.run_id,
            # Kept as stored: each call's time is checked against it when it is evaluated.
            expires_at=row.expires_at,
            arguments_sha256=row.arguments_sha256 or None,
        )
        for row in PermissionRule.objects.filter(Q(agent=agent) | Q(agent__isnull=True)).order_by(
            "pk"
        )
    )
    pins = tuple(
        capcore.ToolClassPin(pattern, capcore.ToolClass(tool_class))
        for pattern, tool_class in ToolClass.objects.values_list("pattern", "tool_class")
    )
    # The agent's own budget, else the default (NULL agent sorts last).
    budget = (
        Budget.objects.filter(Q(agent=agent) | Q(agent__isnull=True))
        .order_by(F("agent").asc(nulls_last=True), "pk")
        .first()
    )
    return AgentPolicy(
        cap_rules=rules,
        cap_rules_unreadable=len(rules) != len(parsed),
        windows={ledger_rule(rule): rule.window for rule in (*rules, *shadow_rules)},
        permission_rules=permission_rules,
        tool_class_pins=pins,
        budget=_budget(budget),
        shadow_rules=tuple(shadow_rules),
    )


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
