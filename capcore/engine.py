"""One call against every policy: the pure half of submission.

The server (``approvals``) loads the state, calls ``ledgers_of_call`` to learn which ledgers to
lock, loads their totals, calls ``evaluate_call`` and records the outcome atomically
(``docs/capcore.md``, "How the server uses it").
"""

from __future__ import annotations

import hashlib
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

    Shadow rules (``Rule.shadow``) never count in the verdict, ``records`` or ``caps``:
    ``shadow`` holds the findings they would have given, ``shadow_records`` the amounts for
    their own ledgers (recorded as ``records`` are, if the call goes ahead). A shadow rule
    that fails gives neither, and ``shadow_error`` holds the failure for the log.
    """

    verdict: Verdict
    records: tuple[LedgerRecord, ...] = ()
    caps: tuple[CapAssessment, ...] = ()
    classification: Classification | None = None
    error: Exception | None = None
    shadow: tuple[Finding, ...] = ()
    shadow_records: tuple[LedgerRecord, ...] = ()
    shadow_error: Exception | None = None


@dataclass(frozen=True, slots=True)
class _Shadowed:
    findings: tuple[Finding, ...] = ()
    records: tuple[LedgerRecord, ...] = ()
    error: Exception | None = None


def _enforced(rules: Sequence[Rule]) -> list[Rule]:
    return [rule for rule in rules if not rule.shadow]


def _shadow_caps(
    rules: Sequence[Rule],
    request: CallRequest,
    arguments: dict[str, object],
    spent: Mapping[LedgerKey, int],
    *,
    sums_only: bool = False,
) -> _Shadowed:
    """Each shadow rule on its own, so that one that fails (a ledger not loaded, a bug)
    takes nothing from the others and nothing from the verdict."""
    findings: list[Finding] = []
    records: list[LedgerRecord] = []
    error: Exception | None = None
    for rule in rules:
        if not rule.shadow or (sums_only and rule.kind is not Kind.SUM):
            continue
        try:
            assessed = assess_caps(
                [rule], tool=request.tool, arguments=arguments, principal=request.principal
            )
            result = evaluate_caps(assessed, spent=spent)
        except Exception as failure:  # never the verdict's concern: logged by the server
            error = error or failure
            continue
        findings += result.findings
        records += result.records
    return _Shadowed(tuple(findings), tuple(records), error)


def _arguments(request: CallRequest) -> dict[str, object] | ArgsNotStrict:
    try:
        return parse_arguments(request.arguments_text)
    except ArgsNotStrict as error:
        return error


def ledgers_of_call(request: CallRequest, cap_rules: Sequence[Rule]) -> tuple[LedgerKey, ...]:
    """The ledgers this call would touch, sorted (the lock order). Empty when the call's
    arguments are unreadable or reading them fails: its evaluation then refuses it. A shadow
    rule's ledgers are among them, unless reading the call for it fails (its evaluation
    then gives nothing)."""
    arguments = _arguments(request)
    if isinstance(arguments, ArgsNotStrict):
        return ()
    try:
        assessments = assess_caps(
            _enforced(cap_rules),
            tool=request.tool,
            arguments=arguments,
            principal=request.principal,
        )
    except Exception:  # evaluate_call meets the same failure and refuses
        return ()
    shadow = [
        assessment
        for rule in cap_rules
        if rule.shadow
        for assessment in _shadow_assessed(rule, request, arguments)
    ]
    return ledgers_of_caps([*assessments, *shadow])


def _shadow_assessed(
    rule: Rule, request: CallRequest, arguments: dict[str, object]
) -> tuple[CapAssessment, ...]:
    """A shadow rule's reading of the call; none when reading fails (its evaluation meets
    the same failure, leaves the rule out and returns it for the log)."""
    try:
        return assess_caps(
            [rule], tool=request.tool, arguments=arguments, principal=request.principal
        )
    except Exception:  # never the verdict's concern
        return ()


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
        # As the server stores a call's digest: a grant of "these exact arguments" matches it.
        arguments_sha256=hashlib.sha256(request.arguments_text.encode()).hexdigest(),
    )
    findings += permission.findings
    assessments = assess_caps(
        _enforced(state.cap_rules),
        tool=request.tool,
        arguments=arguments,
        principal=request.principal,
    )
    caps = evaluate_caps(assessments, spent=state.spent)
    findings += caps.findings
    shadowed = _shadow_caps(state.cap_rules, request, arguments, state.spent)
    return Evaluation(
        combine_findings(findings),
        records=caps.records,
        caps=assessments,
        classification=permission.classification,
        shadow=shadowed.findings,
        shadow_records=shadowed.records,
        shadow_error=shadowed.error,
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
    sums = [rule for rule in _enforced(state.cap_rules) if rule.kind is Kind.SUM]
    assessments = assess_caps(
        sums, tool=request.tool, arguments=arguments, principal=request.principal
    )
    caps = evaluate_caps(assessments, spent=state.spent)
    fresh = [f for f in caps.findings if f.rule is None or f.rule.casefold() not in held_for]
    shadowed = _shadow_caps(state.cap_rules, request, arguments, state.spent, sums_only=True)
    return Evaluation(
        combine_findings(fresh),
        records=caps.records,
        caps=assessments,
        shadow=shadowed.findings,
        shadow_records=shadowed.records,
        shadow_error=shadowed.error,
    )


def recheck_sums(
    request: CallRequest, state: PolicyState, *, held_for: Collection[str]
) -> Evaluation:
    """A held call's ``sum`` rules evaluated again when its quorum is met (or an edit
    stands), against ``state.spent``: each ledger's recorded total plus what other held
    calls reserve there. Only the rules not in ``held_for`` (casefolded names of the rules
    the call is held for already, whose gates approved it) give findings: the verdict is
    theirs, allowed when there are none. ``records`` hold every assessable ``sum`` rule's
    amount, to record on approval; ``shadow_records`` every shadow ``sum`` rule's. Fail-closed
    as ``evaluate_call``."""
    try:
        return _recheck(request, state, held_for)
    except Exception as error:  # any failure to decide refuses
        return Evaluation(policy_error(), error=error)
