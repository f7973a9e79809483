"""One call against every policy: the pure half of submission.

The server (``approvals``) loads the state, calls ``ledgers_of_call`` to learn which ledgers to
lock, loads their totals, calls ``evaluate_call`` and records the outcome atomically
(``docs/capcore.md``, "How the server uses it").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from capcore.budgets import Budget, RunCounters, Usage, evaluate_budget
from capcore.caps import (
    CapAssessment,
    LedgerKey,
    LedgerRecord,
    assess_caps,
    evaluate_caps,
    ledgers_of_caps,
)
from capcore.errors import ArgsNotStrict
from capcore.findings import Finding
from capcore.permissions import (
    Classification,
    Mode,
    PermissionRule,
    ToolClassPin,
    evaluate_permissions,
)
from capcore.rules import Kind, Rule
from capcore.strictjson import parse_arguments
from capcore.verdict import Verdict, combine_findings, policy_error, refusal_of_arguments


@dataclass(frozen=True, slots=True)
class CallRequest:
    tool: str
    arguments_text: str
    principal: str
    run_id: str = ""
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class PolicyState:
    """Everything the server knows that the verdict depends on, read in one transaction.

    ``mode`` is the agent's stored mode read with ``Mode.parse`` (unknown → ``PROMPT``).
    """

    now: datetime
    mode: Mode = Mode.DEFAULT
    permission_rules: Sequence[PermissionRule] = ()
    tool_class_pins: Sequence[ToolClassPin] = ()
    budget: Budget | None = None
    counters: RunCounters = field(default_factory=RunCounters)
    cap_rules: Sequence[Rule] = ()
    # A stored rule that no longer parses refuses every call until an admin fixes it.
    cap_rules_unreadable: bool = False
    spent: Mapping[LedgerKey, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The verdict, and what the server needs to record and show.

    ``records`` go into the ledgers when the call is allowed now or approved later.
    ``error`` is the unexpected exception behind a policy-error refusal, for the server's
    log only.
    """

    verdict: Verdict
    records: tuple[LedgerRecord, ...] = ()
    caps: tuple[CapAssessment, ...] = ()
    classification: Classification | None = None
    error: Exception | None = None


def _arguments(request: CallRequest) -> dict[str, object] | ArgsNotStrict:
    try:
        return parse_arguments(request.arguments_text)
    except ArgsNotStrict as error:
        return error


def ledgers_of_call(request: CallRequest, cap_rules: Sequence[Rule]) -> tuple[LedgerKey, ...]:
    """The ledgers this call would touch, sorted (the lock order). Empty when the call's
    arguments are unreadable or reading them fails: its evaluation then refuses it."""
    arguments = _arguments(request)
    if isinstance(arguments, ArgsNotStrict):
        return ()
    try:
        assessments = assess_caps(
            cap_rules, tool=request.tool, arguments=arguments, principal=request.principal
        )
    except Exception:  # evaluate_call meets the same failure and refuses
        return ()
    return ledgers_of_caps(assessments)


def _evaluate(request: CallRequest, state: PolicyState) -> Evaluation:
    arguments = _arguments(request)
    if isinstance(arguments, ArgsNotStrict):
        return Evaluation(combine_findings([refusal_of_arguments(arguments)]))
    if state.cap_rules_unreadable:
        return Evaluation(policy_error())
    findings: list[Finding] = []
    if state.budget is not None:
        findings += evaluate_budget(
            state.budget, counters=state.counters, usage=request.usage, now=state.now
        )
    permission = evaluate_permissions(
        tool=request.tool,
        mode=state.mode,
        rules=state.permission_rules,
        pins=state.tool_class_pins,
        run_id=request.run_id,
        now=state.now,
    )
    findings += permission.findings
    assessments = assess_caps(
        state.cap_rules, tool=request.tool, arguments=arguments, principal=request.principal
    )
    caps = evaluate_caps(assessments, spent=state.spent)
    findings += caps.findings
    return Evaluation(
        combine_findings(findings),
        records=caps.records,
        caps=assessments,
        classification=permission.classification,
    )


def evaluate_call(request: CallRequest, state: PolicyState) -> Evaluation:
    """The verdict on one call: arguments first, then budgets, permissions and caps.

    Fail-closed: an unexpected exception anywhere is a refusal with the reason
    ``policy error``; the exception is returned for the log, never shown to the agent.
    """
    try:
        return _evaluate(request, state)
    except Exception as error:  # any failure to decide refuses
        return Evaluation(policy_error(), error=error)


def _recheck(request: CallRequest, state: PolicyState, held_for: Collection[str]) -> Evaluation:
    arguments = _arguments(request)
    if isinstance(arguments, ArgsNotStrict):
        return Evaluation(combine_findings([refusal_of_arguments(arguments)]))
    if state.cap_rules_unreadable:
        return Evaluation(policy_error())
    sums = [rule for rule in state.cap_rules if rule.kind is Kind.SUM]
    assessments = assess_caps(
        sums, tool=request.tool, arguments=arguments, principal=request.principal
    )
    caps = evaluate_caps(assessments, spent=state.spent)
    fresh = [f for f in caps.findings if f.rule is None or f.rule.casefold() not in held_for]
    return Evaluation(combine_findings(fresh), records=caps.records, caps=assessments)


def recheck_sums(
    request: CallRequest, state: PolicyState, *, held_for: Collection[str]
) -> Evaluation:
    """A held call's ``sum`` rules evaluated again when its quorum is met (or an edit
    stands), against ``state.spent``: each ledger's recorded total plus what other held
    calls reserve there. Only the rules not in ``held_for`` (casefolded names of the rules
    the call is held for already, whose gates approved it) give findings: the verdict is
    theirs, allowed when there are none. ``records`` hold every assessable ``sum`` rule's
    amount, to record on approval. Fail-closed as ``evaluate_call``."""
    try:
        return _recheck(request, state, held_for)
    except Exception as error:  # any failure to decide refuses
        return Evaluation(policy_error(), error=error)
