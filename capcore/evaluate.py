"""One call against every policy: the pure half of submission.

The server (``approvals``) loads the state, calls ``call_ledgers`` to learn which ledgers to
lock, loads their totals, calls ``call_evaluate`` and records the outcome atomically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from capcore.budgets import Budget, RunCounters, Usage, budget_evaluate
from capcore.caps import (
    CapAssessment,
    LedgerKey,
    LedgerRecord,
    cap_ledgers,
    caps_assess,
    caps_evaluate,
)
from capcore.errors import ArgsNotStrict
from capcore.findings import Finding
from capcore.permissions import (
    Classification,
    PermissionRule,
    ToolClassPin,
    mode_parse,
    permission_evaluate,
)
from capcore.rules import Rule
from capcore.strictjson import parse_arguments
from capcore.verdict import Verdict, arguments_refusal, policy_error, verdict_combine


@dataclass(frozen=True, slots=True)
class CallRequest:
    tool: str
    arguments_text: str
    principal: str
    run_id: str = ""
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class PolicyState:
    """Everything the server knows that the verdict depends on, read in one transaction."""

    now: datetime
    mode: str = "default"
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


def call_ledgers(request: CallRequest, cap_rules: Sequence[Rule]) -> tuple[LedgerKey, ...]:
    """The ledgers this call would touch, sorted (the lock order). Empty when the call's
    arguments are unreadable or reading them fails: its evaluation then refuses it."""
    arguments = _arguments(request)
    if isinstance(arguments, ArgsNotStrict):
        return ()
    try:
        assessments = caps_assess(
            cap_rules, tool=request.tool, arguments=arguments, principal=request.principal
        )
    except Exception:  # call_evaluate meets the same failure and refuses
        return ()
    return cap_ledgers(assessments)


def _evaluate(request: CallRequest, state: PolicyState) -> Evaluation:
    arguments = _arguments(request)
    if isinstance(arguments, ArgsNotStrict):
        return Evaluation(verdict_combine([arguments_refusal(arguments)]))
    if state.cap_rules_unreadable:
        return Evaluation(policy_error())
    findings: list[Finding] = []
    if state.budget is not None:
        findings += budget_evaluate(
            state.budget, counters=state.counters, usage=request.usage, now=state.now
        )
    permission = permission_evaluate(
        tool=request.tool,
        mode=mode_parse(state.mode),
        rules=state.permission_rules,
        pins=state.tool_class_pins,
        run_id=request.run_id,
        now=state.now,
    )
    findings += permission.findings
    assessments = caps_assess(
        state.cap_rules, tool=request.tool, arguments=arguments, principal=request.principal
    )
    caps = caps_evaluate(assessments, spent=state.spent)
    findings += caps.findings
    return Evaluation(
        verdict_combine(findings),
        records=caps.records,
        caps=assessments,
        classification=permission.classification,
    )


def call_evaluate(request: CallRequest, state: PolicyState) -> Evaluation:
    """The verdict on one call: arguments first, then budgets, permissions and caps.

    Fail-closed: an unexpected exception anywhere is a refusal with the reason
    ``policy error``; the exception is returned for the log, never shown to the agent.
    """
    try:
        return _evaluate(request, state)
    except Exception as error:  # any failure to decide refuses
        return Evaluation(policy_error(), error=error)
