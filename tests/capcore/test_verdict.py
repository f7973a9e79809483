"""Combining findings into one verdict and the reason objects of the agent API (``reasons`` in
``docs/api.md``)."""

from __future__ import annotations

import json

import pytest

from capcore import parse_arguments
from capcore.errors import ArgsNotStrict
from capcore.findings import DEFAULT_GATE, REFUSE, Action, ActionKind, Finding, Policy
from capcore.strictjson import DUPLICATE_NAME, NOT_AN_OBJECT, TRAILING_DATA
from capcore.verdict import (
    POLICY_ERROR,
    Status,
    Verdict,
    combine_findings,
    policy_error,
    refusal_of_arguments,
)

REASON_KEYS = {"policy", "rule", "action", "gate", "message"}


def hold(gate: str, rule: str = "r", policy: Policy = Policy.CAP) -> Finding:
    return Finding(policy, rule, Action(ActionKind.GATE, gate), f"held at {gate!r}")


def refuse(rule: str = "x", policy: Policy = Policy.CAP) -> Finding:
    return Finding(policy, rule, REFUSE, "refused")


def test_status_values_are_the_agent_api_strings() -> None:
    assert {s.value for s in Status} == {"allowed", "refused", "pending"}


def test_refusal_action_names_no_gate() -> None:
    with pytest.raises(ValueError, match="gate"):
        Action(ActionKind.REFUSE, "finance")
    assert REFUSE.gate == ""
    assert Action(ActionKind.GATE, "") == DEFAULT_GATE


# --- combine_findings ------------------------------------------------------------------------


def test_no_findings_allow_with_no_reasons_and_no_gates() -> None:
    assert combine_findings([]) == Verdict(Status.ALLOWED, (), ())


def test_one_hold_is_pending_at_its_gate() -> None:
    finding = hold("finance")
    assert combine_findings([finding]) == Verdict(Status.PENDING, (finding,), ("finance",))


def test_default_gate_hold_is_pending_at_empty_gate() -> None:
    finding = hold("")
    assert combine_findings([finding]) == Verdict(Status.PENDING, (finding,), ("",))


@pytest.mark.parametrize(
    ("gates", "expected"),
    [
        pytest.param(["b", "a"], ("b", "a"), id="first-seen-order-not-sorted"),
        pytest.param(["a", "a"], ("a",), id="duplicate-removed"),
        pytest.param(["b", "", "b", "a", ""], ("b", "", "a"), id="default-gate-kept-once"),
        pytest.param(["", "z", "y", "z"], ("", "z", "y"), id="default-first"),
    ],
)
def test_held_gates_are_the_union_in_first_seen_order(
    gates: list[str], expected: tuple[str, ...]
) -> None:
    findings = [hold(gate, rule=f"r{i}") for i, gate in enumerate(gates)]
    verdict = combine_findings(findings)
    assert verdict.status is Status.PENDING
    assert verdict.gates == expected
    assert verdict.reasons == tuple(findings)


@pytest.mark.parametrize(
    "position",
    [pytest.param(0, id="refusal-first"), pytest.param(1, id="middle"), pytest.param(3, id="last")],
)
def test_any_refusal_refuses_listing_every_finding_and_no_gates(position: int) -> None:
    findings = [hold("a", "h1", Policy.BUDGET), hold("b", "h2"), hold("", "h3", Policy.PERMISSION)]
    findings.insert(position, refuse())
    verdict = combine_findings(findings)
    assert verdict == Verdict(Status.REFUSED, tuple(findings), ())


def test_refusal_alone() -> None:
    finding = refuse()
    assert combine_findings([finding]) == Verdict(Status.REFUSED, (finding,), ())


def test_several_refusals_are_all_listed() -> None:
    findings = [refuse("one"), refuse("two", Policy.PERMISSION)]
    assert combine_findings(findings).reasons == tuple(findings)


def test_combine_reads_a_one_shot_iterable_once() -> None:
    findings = [hold("a"), hold("b"), refuse()]
    verdict = combine_findings(f for f in findings)
    assert verdict == Verdict(Status.REFUSED, tuple(findings), ())
    held = combine_findings(f for f in findings[:2])
    assert held == Verdict(Status.PENDING, tuple(findings[:2]), ("a", "b"))


# --- refusal_of_arguments and policy_error -----------------------------------------------------


def _args_error(text: str) -> ArgsNotStrict:
    with pytest.raises(ArgsNotStrict) as info:
        parse_arguments(text)
    return info.value


@pytest.mark.parametrize(
    ("text", "category"),
    [
        pytest.param('{"a": 1, "a": 2}', DUPLICATE_NAME, id="duplicate"),
        pytest.param("[1]", NOT_AN_OBJECT, id="not-object"),
        pytest.param("{} {}", TRAILING_DATA, id="trailing"),
    ],
)
def test_arguments_refusal(text: str, category: str) -> None:
    finding = refusal_of_arguments(_args_error(text))
    assert finding == Finding(
        Policy.ARGUMENTS, None, REFUSE, f"arguments are not strict JSON: {category}"
    )
    assert finding.as_reason() == {
        "policy": "arguments",
        "rule": None,
        "action": "refuse",
        "gate": "",
        "message": f"arguments are not strict JSON: {category}",
    }
    assert combine_findings([finding]).status is Status.REFUSED


def test_arguments_refusal_never_quotes_the_arguments() -> None:
    finding = refusal_of_arguments(_args_error('{"ZQXJ": 1, "ZQXJ": 2}'))
    assert "ZQXJ" not in json.dumps(finding.as_reason())


def test_policy_error_is_a_bare_refusal() -> None:
    assert POLICY_ERROR == "policy error"
    verdict = policy_error()
    assert verdict.status is Status.REFUSED
    assert verdict.gates == ()
    (reason,) = verdict.reasons
    assert reason.as_reason() == {
        "policy": "error",
        "rule": None,
        "action": "refuse",
        "gate": "",
        "message": "policy error",
    }


# --- Finding.as_reason ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finding", "reason"),
    [
        pytest.param(
            Finding(Policy.CAP, "daily-spend", DEFAULT_GATE, "USD 1,050.00 would exceed"),
            {
                "policy": "cap",
                "rule": "daily-spend",
                "action": "gate",
                "gate": "",
                "message": "USD 1,050.00 would exceed",
            },
            id="cap-default-gate",
        ),
        pytest.param(
            Finding(Policy.BUDGET, "budget:cost", Action(ActionKind.GATE, "finance"), "m"),
            {
                "policy": "budget",
                "rule": "budget:cost",
                "action": "gate",
                "gate": "finance",
                "message": "m",
            },
            id="budget-named-gate",
        ),
        pytest.param(
            Finding(Policy.PERMISSION, "mode:read_only", REFUSE, "mode read_only refuses"),
            {
                "policy": "permission",
                "rule": "mode:read_only",
                "action": "refuse",
                "gate": "",
                "message": "mode read_only refuses",
            },
            id="permission-refuse",
        ),
        pytest.param(
            Finding(Policy.ERROR, None, REFUSE, POLICY_ERROR),
            {
                "policy": "error",
                "rule": None,
                "action": "refuse",
                "gate": "",
                "message": "policy error",
            },
            id="error",
        ),
    ],
)
def test_as_reason_gives_exactly_the_agent_api_fields(
    finding: Finding, reason: dict[str, str | None]
) -> None:
    result = finding.as_reason()
    assert set(result) == REASON_KEYS
    assert result == reason
    # The reason is plain JSON.
    assert json.loads(json.dumps(result)) == reason


def test_policy_values_are_the_agent_api_strings() -> None:
    assert {p.value for p in Policy} == {"arguments", "permission", "budget", "cap", "error"}
