"""Shadow rules in capcore (docs/rules.md, "Shadow rules"): a line that starts with ``shadow``
parses to a rule that is evaluated — its findings and ledger amounts returned apart — and never
enforced; a shadow rule that fails takes nothing from the verdict."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from capcore import RuleError, parse_rule, parse_rules
from capcore.caps import LedgerKey, LedgerRecord, ledger_rule
from capcore.engine import CallRequest, PolicyState, evaluate_call, ledgers_of_call, recheck_sums
from capcore.permissions import Mode
from capcore.rules import check_rules
from capcore.verdict import Status

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
FULL = Mode.DANGER_FULL_ACCESS  # no mode holds the call: only caps speak
BIG = "big: pay arg=amount max USD 100.00 -> gate"
SHADOW_BIG = "shadow big: pay arg=amount max USD 100.00 -> gate"
SHADOW_DAILY = "shadow daily: pay arg=amount sum USD 1000 per day -> refuse"


def pay(amount: str) -> CallRequest:
    return CallRequest(tool="pay", arguments_text=json.dumps({"amount": amount}), principal="p")


# Grammar


def test_a_shadow_line_parses_to_a_shadow_rule_and_round_trips() -> None:
    rule = parse_rule(SHADOW_BIG)
    assert rule.shadow
    assert rule.name == "big"
    assert rule.to_line() == SHADOW_BIG
    assert parse_rule(rule.to_line()) == rule
    assert not parse_rule(BIG).shadow
    assert parse_rule(BIG).to_line() == BIG


@pytest.mark.parametrize(
    "line",
    [
        "shadow: pay arg=amount max USD 100 -> gate",  # a rule named shadow
        "shadow-cap: pay arg=amount max USD 100 -> gate",
        "shadowy: pay arg=amount max USD 100 -> gate",
    ],
)
def test_a_name_that_starts_with_shadow_is_only_a_name(line: str) -> None:
    rule = parse_rule(line)
    assert not rule.shadow
    assert rule.name == line.split(":")[0]


def test_a_shadow_rule_may_be_named_shadow() -> None:
    rule = parse_rule("shadow shadow: pay arg=amount max USD 100 -> gate")
    assert (rule.shadow, rule.name) == (True, "shadow")


def test_blanks_around_the_word_are_allowed() -> None:
    rule = parse_rule("  shadow \t big: pay arg=amount max USD 100 -> gate")
    assert rule == parse_rule(SHADOW_BIG)


@pytest.mark.parametrize(
    ("line", "column", "expected"),
    [
        ("shadow", 7, "a rule name after 'shadow'"),
        ("shadow   ", 10, "a rule name after 'shadow'"),
        ("shadow shadow big: pay arg=amount max USD 1 -> gate", 14, "':' after the rule name"),
        ("Shadow big: pay arg=amount max USD 1 -> gate", 7, "':' after the rule name"),
    ],
)
def test_a_bad_shadow_line_names_the_column(line: str, column: int, expected: str) -> None:
    with pytest.raises(RuleError) as caught:
        parse_rule(line)
    assert (caught.value.column, caught.value.expected) == (column, expected)


def test_a_file_refuses_a_shadow_and_an_enforced_rule_of_one_name() -> None:
    rules, errors = check_rules(f"{BIG}\n{SHADOW_BIG}\n")
    assert [line.rule.name for line in rules] == ["big"]
    assert [(error.line, error.column) for error in errors] == [(2, 1)]


def test_a_file_keeps_which_rules_are_shadow() -> None:
    rules = parse_rules(
        f"{SHADOW_BIG}\n# a comment\n{SHADOW_DAILY}\nother: x arg=a max EUR 1 -> refuse"
    )
    assert [rule.shadow for rule in rules] == [True, True, False]


# Evaluation


def test_a_shadow_rule_over_its_limit_never_holds_or_refuses() -> None:
    rules = parse_rules(f"{SHADOW_BIG}\n{SHADOW_DAILY}")
    request = pay("5000")
    keys = ledgers_of_call(request, rules)
    daily = LedgerKey(ledger_rule(rules[1]), "USD", None)
    assert keys == (daily,)
    evaluation = evaluate_call(
        request, PolicyState(now=NOW, mode=FULL, cap_rules=rules, spent={daily: 0})
    )
    assert evaluation.verdict.status is Status.ALLOWED
    assert evaluation.verdict.reasons == ()
    assert evaluation.records == ()
    assert evaluation.caps == ()
    assert [(f.rule, f.action.kind.value) for f in evaluation.shadow] == [
        ("big", "gate"),
        ("daily", "refuse"),
    ]
    assert evaluation.shadow_records == (LedgerRecord(daily, 500000),)


def test_a_shadow_rule_keeps_ledgers_apart_from_an_enforced_rule_of_its_name() -> None:
    enforced = parse_rule("daily: pay arg=amount sum USD 1000 per day -> refuse")
    shadow = dataclasses.replace(enforced, shadow=True)
    assert ledger_rule(enforced) == "daily"
    assert ledger_rule(shadow) == "shadow daily"
    keys = ledgers_of_call(pay("10"), [enforced, shadow])
    assert keys == (LedgerKey("daily", "USD", None), LedgerKey("shadow daily", "USD", None))


def test_enforced_rules_decide_as_they_would_without_the_shadow_ones() -> None:
    rules = parse_rules(f"{BIG}\n{SHADOW_DAILY}")
    spent = {LedgerKey("shadow daily", "USD", None): 0}
    with_shadow = evaluate_call(
        pay("500"), PolicyState(now=NOW, mode=FULL, cap_rules=rules, spent=spent)
    )
    alone = evaluate_call(pay("500"), PolicyState(now=NOW, mode=FULL, cap_rules=rules[:1]))
    assert with_shadow.verdict == alone.verdict
    assert with_shadow.records == alone.records
    assert with_shadow.caps == alone.caps
    assert [f.rule for f in with_shadow.shadow] == []  # 500 is within the daily 1000


def test_a_shadow_rule_that_fails_gives_nothing_and_leaves_the_verdict_alone() -> None:
    rules = parse_rules(f"{SHADOW_DAILY}\n{SHADOW_BIG}")
    # The server loaded no total for the shadow ledger: that rule fails, the other speaks.
    evaluation = evaluate_call(
        pay("500"), PolicyState(now=NOW, mode=FULL, cap_rules=rules, spent={})
    )
    assert evaluation.verdict.status is Status.ALLOWED
    assert evaluation.error is None
    assert isinstance(evaluation.shadow_error, KeyError)
    assert [f.rule for f in evaluation.shadow] == ["big"]
    assert evaluation.shadow_records == ()


def test_a_shadow_rule_not_assessable_would_have_held_but_does_not() -> None:
    rules = parse_rules(SHADOW_BIG)
    request = CallRequest(tool="pay", arguments_text="{}", principal="p")
    evaluation = evaluate_call(request, PolicyState(now=NOW, mode=FULL, cap_rules=rules))
    assert evaluation.verdict.status is Status.ALLOWED
    assert "not assessable" in evaluation.shadow[0].message


def test_the_recheck_gives_shadow_sums_records_and_no_verdict() -> None:
    rules = parse_rules(f"{SHADOW_DAILY}\n{SHADOW_BIG}")
    daily = LedgerKey("shadow daily", "USD", None)
    evaluation = recheck_sums(
        pay("5000"), PolicyState(now=NOW, mode=FULL, cap_rules=rules, spent={daily: 0}), held_for=()
    )
    assert evaluation.verdict.status is Status.ALLOWED
    assert evaluation.records == ()
    assert evaluation.shadow_records == (LedgerRecord(daily, 500000),)
