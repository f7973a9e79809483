"""One call against every policy (``capcore.engine``): arguments first, then budgets,
permissions and caps, combined into one verdict; any unexpected failure refuses with
``policy error``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import NoReturn

import pytest

import capcore.engine
from capcore import parse_rule
from capcore.budgets import Budget, RunCounters, Usage
from capcore.caps import LedgerKey, LedgerRecord, digest_key
from capcore.engine import CallRequest, Evaluation, PolicyState, evaluate_call, ledgers_of_call
from capcore.findings import Action, ActionKind, Policy
from capcore.permissions import Decision, Mode, PermissionRule, ToolClass
from capcore.strictjson import (
    CASE_VARIANT_NAMES,
    DUPLICATE_NAME,
    NON_FINITE_NUMBER,
    NOT_AN_OBJECT,
    NOT_JSON,
    TRAILING_DATA,
)
from capcore.verdict import POLICY_ERROR, Status

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
PRINCIPAL = "user-42"
POLICY_ERROR_REASON = {
    "policy": "error",
    "rule": None,
    "action": "refuse",
    "gate": "",
    "message": POLICY_ERROR,
}

DAILY = parse_rule("daily: pay arg=amount sum USD 1000 per day by principal -> gate")
BIG = parse_rule("big-payment: pay arg=amount max USD 500.00 -> gate finance")
TOTAL = parse_rule("total: pay arg=amount sum USD 5000 -> refuse")


def request(
    arguments: str = '{"amount": "10.00"}',
    *,
    tool: str = "pay",
    principal: str = PRINCIPAL,
    run_id: str = "run-7",
    usage: Usage | None = None,
) -> CallRequest:
    return CallRequest(
        tool=tool,
        arguments_text=arguments,
        principal=principal,
        run_id=run_id,
        usage=usage or Usage(),
    )


def daily_ledger(principal: str = PRINCIPAL) -> LedgerKey:
    return LedgerKey("daily", "USD", digest_key(principal))


def reasons(evaluation: Evaluation) -> list[dict[str, str | None]]:
    return [finding.as_reason() for finding in evaluation.verdict.reasons]


def assert_policy_error(evaluation: Evaluation) -> None:
    assert evaluation.verdict.status is Status.REFUSED
    assert evaluation.verdict.gates == ()
    assert reasons(evaluation) == [POLICY_ERROR_REASON]


# --- arguments first ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "category"),
    [
        pytest.param('{"amount": "10.00", "amount": "9999"}', DUPLICATE_NAME, id="duplicate-key"),
        pytest.param('{"amount": "1", "Amount": "2"}', CASE_VARIANT_NAMES, id="case-variant"),
        pytest.param('{"amount": NaN}', NON_FINITE_NUMBER, id="nan"),
        pytest.param('{"amount": "1"} x', TRAILING_DATA, id="trailing"),
        pytest.param('["amount"]', NOT_AN_OBJECT, id="array"),
        pytest.param("{amount: 1}", NOT_JSON, id="not-json"),
    ],
)
def test_arguments_not_strict_refuse_before_any_policy(arguments: str, category: str) -> None:
    # Every policy would hold this call: a budget, the mode (pay is dangerous) and a cap.
    state = PolicyState(
        now=NOW,
        mode=Mode.DEFAULT,
        budget=Budget(max_calls=0, action=Action(ActionKind.GATE, "budget")),
        cap_rules=(BIG,),
    )
    evaluation = evaluate_call(request(arguments), state)
    assert evaluation.verdict.status is Status.REFUSED
    assert evaluation.verdict.gates == ()
    assert reasons(evaluation) == [
        {
            "policy": "arguments",
            "rule": None,
            "action": "refuse",
            "gate": "",
            "message": f"arguments are not strict JSON: {category}",
        }
    ]
    assert evaluation.records == ()
    assert evaluation.caps == ()
    assert evaluation.error is None


def test_arguments_not_strict_win_over_unreadable_rules() -> None:
    state = PolicyState(now=NOW, cap_rules_unreadable=True)
    evaluation = evaluate_call(request('{"a": 1, "a": 1}'), state)
    (finding,) = evaluation.verdict.reasons
    assert finding.policy is Policy.ARGUMENTS


def test_arguments_refusal_quotes_nothing() -> None:
    evaluation = evaluate_call(request('{"ZQXJ": 1, "ZQXJ": 2}'), PolicyState(now=NOW))
    assert "ZQXJ" not in json.dumps(reasons(evaluation))


@pytest.mark.parametrize("arguments", ["", "  \n", "{}"])
def test_empty_arguments_are_an_empty_object(arguments: str) -> None:
    state = PolicyState(now=NOW, mode=Mode.ALLOW)
    assert evaluate_call(request(arguments), state).verdict.status is Status.ALLOWED


# --- unreadable rules -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", [Mode.ALLOW, Mode.DEFAULT])
def test_unreadable_cap_rules_refuse_every_call_with_policy_error(mode: Mode) -> None:
    state = PolicyState(now=NOW, mode=mode, cap_rules_unreadable=True)
    evaluation = evaluate_call(request(tool="read_file"), state)
    assert_policy_error(evaluation)
    assert evaluation.records == ()


# --- order and combination ------------------------------------------------------------------


def test_findings_in_order_budget_permission_caps() -> None:
    state = PolicyState(
        now=NOW,
        mode=Mode.DEFAULT,  # pay is dangerous: held at the default gate
        budget=Budget(max_calls=1, action=Action(ActionKind.GATE, "budget-gate")),
        counters=RunCounters(calls=1),
        cap_rules=(BIG, DAILY),
        spent={daily_ledger(): 99_000},
    )
    evaluation = evaluate_call(request('{"amount": "600.00"}'), state)
    verdict = evaluation.verdict
    assert verdict.status is Status.PENDING
    assert [(f.policy, f.rule) for f in verdict.reasons] == [
        (Policy.BUDGET, "budget:calls"),
        (Policy.PERMISSION, "mode:default"),
        (Policy.CAP, "big-payment"),
        (Policy.CAP, "daily"),
    ]
    assert verdict.gates == ("budget-gate", "", "finance")
    # Approval would record the amount in the ledger it went over.
    assert evaluation.records == (LedgerRecord(daily_ledger(), 60_000),)


def test_a_refusing_policy_refuses_and_lists_the_holds_too() -> None:
    state = PolicyState(
        now=NOW,
        mode=Mode.DEFAULT,
        cap_rules=(BIG, TOTAL),
        spent={LedgerKey("total", "USD", None): 499_000},
    )
    verdict = evaluate_call(request('{"amount": "600.00"}'), state).verdict
    assert verdict.status is Status.REFUSED
    assert verdict.gates == ()
    assert [f.rule for f in verdict.reasons] == ["mode:default", "big-payment", "total"]


def test_usage_reaches_the_budget() -> None:
    state = PolicyState(
        now=NOW,
        mode=Mode.ALLOW,
        budget=Budget(max_tokens=1000),
        counters=RunCounters(calls=3, tokens=990),
    )
    fine = evaluate_call(request(usage=Usage(tokens=10)), state)
    assert fine.verdict.status is Status.ALLOWED
    over = evaluate_call(request(usage=Usage(tokens=11)), state)
    assert over.verdict.status is Status.REFUSED
    assert [f.rule for f in over.verdict.reasons] == ["budget:tokens"]


def test_mode_only_hold_is_pending_at_the_default_gate() -> None:
    evaluation = evaluate_call(
        request('{"to": "x"}', tool="transfer_funds"), PolicyState(now=NOW, mode=Mode.DEFAULT)
    )
    verdict = evaluation.verdict
    assert verdict.status is Status.PENDING
    assert verdict.gates == ("",)
    (finding,) = verdict.reasons
    assert finding.policy is Policy.PERMISSION
    assert finding.rule == "mode:default"
    assert finding.action == Action(ActionKind.GATE, "")
    assert evaluation.classification is not None
    assert evaluation.classification.tool_class is ToolClass.DANGEROUS
    assert evaluation.classification.guessed is True


def test_unknown_mode_holds_even_a_read_tool() -> None:
    state = PolicyState(now=NOW, mode=Mode.parse("Allow"))
    evaluation = evaluate_call(request(tool="read_file"), state)
    assert evaluation.verdict.status is Status.PENDING
    assert evaluation.verdict.gates == ("",)


def test_permission_rule_sees_the_run_and_now() -> None:
    rule = PermissionRule(1, "pay", Decision.ALLOW, run_id="run-7")
    state = PolicyState(now=NOW, mode=Mode.DEFAULT, permission_rules=(rule,))
    assert evaluate_call(request(run_id="run-7"), state).verdict.status is Status.ALLOWED
    assert evaluate_call(request(run_id="run-8"), state).verdict.status is Status.PENDING


def test_allowed_call_returns_its_records_and_assessments() -> None:
    state = PolicyState(
        now=NOW,
        mode=Mode.ALLOW,
        cap_rules=(TOTAL, BIG, DAILY),
        spent={daily_ledger(): 0, LedgerKey("total", "USD", None): 0},
    )
    evaluation = evaluate_call(request('{"amount": "250.00"}'), state)
    assert evaluation.verdict.status is Status.ALLOWED
    assert evaluation.verdict.reasons == ()
    assert evaluation.verdict.gates == ()
    assert evaluation.records == (
        LedgerRecord(LedgerKey("total", "USD", None), 25_000),
        LedgerRecord(daily_ledger(), 25_000),
    )
    assert [a.rule.name for a in evaluation.caps] == ["total", "big-payment", "daily"]
    assert evaluation.error is None


def test_not_assessable_cap_holds_and_records_nothing() -> None:
    state = PolicyState(now=NOW, mode=Mode.ALLOW, cap_rules=(DAILY,))
    evaluation = evaluate_call(request('{"amount": "-5"}'), state)
    assert evaluation.verdict.status is Status.PENDING
    (finding,) = evaluation.verdict.reasons
    assert finding.message.startswith("not assessable: ")
    assert evaluation.records == ()


# --- fail-closed ----------------------------------------------------------------------------


def test_ledger_missing_from_spent_is_a_policy_error() -> None:
    state = PolicyState(now=NOW, mode=Mode.ALLOW, cap_rules=(DAILY,), spent={})
    evaluation = evaluate_call(request(principal="ZQXJ-principal"), state)
    assert_policy_error(evaluation)
    assert isinstance(evaluation.error, KeyError)
    assert evaluation.records == ()
    shown = json.dumps(reasons(evaluation))
    assert "KeyError" not in shown
    assert str(evaluation.error) not in shown
    assert digest_key("ZQXJ-principal") not in shown
    assert "ZQXJ" not in shown


def _boom(*_args: object, **_kwargs: object) -> NoReturn:
    raise RuntimeError("boom ZQXJ")


@pytest.mark.parametrize(
    "target",
    ["evaluate_permissions", "evaluate_budget", "assess_caps", "evaluate_caps", "combine_findings"],
)
def test_failure_inside_a_policy_is_a_policy_error_without_detail(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.setattr(capcore.engine, target, _boom)
    state = PolicyState(
        now=NOW,
        mode=Mode.ALLOW,
        budget=Budget(max_calls=100),
        cap_rules=(DAILY,),
        spent={daily_ledger(): 0},
    )
    evaluation = evaluate_call(request(), state)
    assert_policy_error(evaluation)
    assert isinstance(evaluation.error, RuntimeError)
    assert str(evaluation.error) == "boom ZQXJ"
    for reason in reasons(evaluation):
        for value in reason.values():
            assert "ZQXJ" not in (value or "")
            assert "boom" not in (value or "")


def test_naive_now_is_a_policy_error() -> None:
    state = PolicyState(now=datetime(2026, 11, 30, 10, 0), mode=Mode.ALLOW)
    evaluation = evaluate_call(request(), state)
    assert_policy_error(evaluation)
    assert isinstance(evaluation.error, ValueError)


# --- ledgers_of_call ------------------------------------------------------------------------


def test_call_ledgers_are_sorted_for_a_good_call() -> None:
    rules = (
        parse_rule("zeta: pay arg=amount sum USD 100 -> gate"),
        BIG,
        DAILY,
        parse_rule("Alpha: pay arg=amount sum USD 100 by arg=payee -> gate"),
    )
    ledgers = ledgers_of_call(request('{"amount": "1", "payee": "bob"}'), rules)
    assert ledgers == (
        LedgerKey("alpha", "USD", digest_key("bob")),
        daily_ledger(),
        LedgerKey("zeta", "USD", None),
    )
    # They are exactly the ledgers the evaluation reads.
    state = PolicyState(now=NOW, mode=Mode.ALLOW, cap_rules=rules, spent=dict.fromkeys(ledgers, 0))
    evaluation = evaluate_call(request('{"amount": "1", "payee": "bob"}'), state)
    assert evaluation.verdict.status is Status.ALLOWED
    assert {r.ledger for r in evaluation.records} == set(ledgers)


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"amount": "1", "amount": "2"}', id="duplicate-key"),
        pytest.param("[1]", id="not-an-object"),
        pytest.param("{", id="not-json"),
    ],
)
def test_call_ledgers_empty_for_unreadable_arguments(arguments: str) -> None:
    assert ledgers_of_call(request(arguments), (DAILY,)) == ()


def test_call_ledgers_skip_other_tools_and_not_assessable_rules() -> None:
    assert ledgers_of_call(request(tool="refund"), (DAILY,)) == ()
    assert ledgers_of_call(request('{"amount": "x"}'), (DAILY,)) == ()
    assert ledgers_of_call(request('{"amount": "1"}'), (BIG,)) == ()


def test_call_ledgers_empty_when_assessing_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capcore.engine, "assess_caps", _boom)
    assert ledgers_of_call(request(), (DAILY,)) == ()


# --- the concurrency rule at the pure level -------------------------------------------------


def test_of_200_calls_of_10_against_1000_exactly_100_are_allowed() -> None:
    """The server serialises calls per ledger; each call sees the total left by the ones
    before it. At the pure level: a call is allowed exactly when spent <= 990.00."""
    rule = parse_rule("daily: pay arg=amount sum USD 1000.00 per day -> refuse")
    ledger = LedgerKey("daily", "USD", None)
    allowed_at: list[int] = []
    for spent in range(0, 200 * 1000, 1000):
        state = PolicyState(now=NOW, mode=Mode.ALLOW, cap_rules=(rule,), spent={ledger: spent})
        evaluation = evaluate_call(request('{"amount": "10.00"}'), state)
        if evaluation.verdict.status is Status.ALLOWED:
            assert evaluation.records == (LedgerRecord(ledger, 1000),)
            allowed_at.append(spent)
        else:
            assert evaluation.verdict.status is Status.REFUSED
    assert allowed_at == list(range(0, 99_001, 1000))
    assert len(allowed_at) == 100


def test_serial_submissions_stop_at_the_limit() -> None:
    """Feeding each allowed call's record back into the ledger, as the server does."""
    rule = parse_rule("daily: pay arg=amount sum USD 1000.00 per day -> refuse")
    ledger = LedgerKey("daily", "USD", None)
    total = 0
    statuses: list[Status] = []
    for _ in range(200):
        state = PolicyState(now=NOW, mode=Mode.ALLOW, cap_rules=(rule,), spent={ledger: total})
        evaluation = evaluate_call(request('{"amount": "10.00"}'), state)
        statuses.append(evaluation.verdict.status)
        if evaluation.verdict.status is Status.ALLOWED:
            total += sum(r.minor for r in evaluation.records)
    assert statuses.count(Status.ALLOWED) == 100
    assert total == 100_000
