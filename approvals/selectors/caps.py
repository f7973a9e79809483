"""What the cap rules say about one call, for people: the amounts it moves, each rule read
against it, and what held it. Shared by the queue, the call page and the history."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import capcore
from approvals.models import Call
from approvals.selectors.rules import StoredRule
from capcore.caps import assess_caps


@dataclass(frozen=True, slots=True)
class CapLine:
    """One cap rule read against one call, for people. ``spent``/``after`` are set for a
    ``sum`` rule of a pending call: the ledger's total now and with this call added."""

    rule: str
    kind: str
    window: str
    amount: capcore.Limit | None
    limit: capcore.Limit | None
    note: str = ""
    spent: capcore.Limit | None = None
    after: capcore.Limit | None = None

    @property
    def over(self) -> bool:
        if self.note or self.limit is None or self.amount is None:
            return True  # not assessable: that is why the rule holds it
        if self.kind == "sum" and self.after is None:
            return False  # no running total shown (the call is final)
        total = self.after if self.after is not None else self.amount
        return total.minor > self.limit.minor


def cap_assessments(call: Call, stored: list[StoredRule]) -> tuple[capcore.CapAssessment, ...]:
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
    return assess_caps(rules, tool=call.tool, arguments=arguments, principal=call.principal)


def call_amounts(assessments: Iterable[capcore.CapAssessment]) -> tuple[capcore.Limit, ...]:
    """The distinct amounts the call moves, in rule order."""
    found = dict.fromkeys(
        capcore.Limit(a.limit.currency, a.limit.exponent, a.amount)
        for a in assessments
        if a.amount is not None and a.limit is not None
    )
    return tuple(found)


def _window_text(rule: capcore.Rule) -> str:
    if rule.kind is capcore.Kind.MAX:
        return "per call"
    return "in total" if rule.window is None else rule.window.to_text()


def cap_line(
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
        else capcore.Limit(limit.currency, limit.exponent, amount),
        limit=limit,
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
        spent=capcore.Limit(limit.currency, limit.exponent, total),
        after=capcore.Limit(limit.currency, limit.exponent, total + line.amount.minor),
    )


def held_by(call: Call) -> tuple[str, ...]:
    """The names of what held or refused the call: rule names, else the policy."""
    names = dict.fromkeys(str(reason.get("rule") or reason["policy"]) for reason in call.reasons)
    return tuple(names)
