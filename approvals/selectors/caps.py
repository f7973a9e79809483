"""What the cap rules say about one call, for people: the amounts it moves, each rule read
against it, and what held it. Shared by the queue, the call page and the history."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import capcore
from approvals.models import Call
from approvals.selectors.ledgers import LedgerShown, Reserved
from approvals.selectors.rules import StoredRule
from capcore.caps import assess_caps


@dataclass(frozen=True, slots=True)
class CapLine:
    """One cap rule read against one call, for people. The totals are set for a ``sum`` rule
    of a pending call, as its approval's re-check counts them: ``spent`` recorded in the
    window, ``reserved`` by the other held calls that count against this one (``reserved_by``
    of them in all, the first ``reserved_first``), and ``after``, their sum with this call.
    ``reserved_at_gate``: what calls held at this rule's own gate reserve besides, which
    only that gate can record."""

    rule: str
    kind: str
    window: str
    amount: capcore.Limit | None
    limit: capcore.Limit | None
    note: str = ""
    spent: capcore.Limit | None = None
    reserved: capcore.Limit | None = None
    reserved_at_gate: capcore.Limit | None = None
    reserved_by: int = 0
    reserved_first: tuple[uuid.UUID, ...] = ()
    after: capcore.Limit | None = None

    @property
    def reserved_more(self) -> int:
        """The held calls reserving here that are not linked."""
        return self.reserved_by - len(self.reserved_first)

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
    assessment: capcore.CapAssessment,
    *,
    totals: Mapping[capcore.LedgerKey, LedgerShown] | None,
) -> CapLine:
    """``totals``: the ledgers' totals for a pending call (a ledger absent has none yet);
    None for a final one."""
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
    if totals is None or assessment.ledger is None or line.amount is None or limit is None:
        return line
    shown = totals.get(assessment.ledger)
    spent = 0 if shown is None else shown.spent
    reserved = Reserved() if shown is None else shown.reserved.reserved

    def money(minor: int) -> capcore.Limit:
        return capcore.Limit(limit.currency, limit.exponent, minor)

    return CapLine(
        rule=line.rule,
        kind=line.kind,
        window=line.window,
        amount=line.amount,
        limit=line.limit,
        spent=money(spent),
        reserved=money(reserved.rechecked),
        reserved_at_gate=money(reserved.held_for_rule),
        reserved_by=0 if shown is None else shown.reserved.calls,
        reserved_first=() if shown is None else shown.reserved.first,
        after=money(spent + reserved.rechecked + line.amount.minor),
    )


def held_by(call: Call) -> tuple[str, ...]:
    """The names of what held or refused the call: rule names, else the policy."""
    names = dict.fromkeys(str(reason.get("rule") or reason["policy"]) for reason in call.reasons)
    return tuple(names)
