"""A held call's ``sum`` rules checked again when its quorum is met (``recheck_sums``): only
rules it was not held for give findings, ``max`` rules and permissions are not asked again,
and any failure refuses with ``policy error``."""

from __future__ import annotations

from datetime import UTC, datetime

import capcore.engine
from capcore import parse_rule
from capcore.caps import LedgerKey, LedgerRecord, digest_key
from capcore.engine import CallRequest, PolicyState, recheck_sums
from capcore.permissions import Mode
from capcore.verdict import POLICY_ERROR, Status

NOW = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
DAILY = parse_rule("daily-spend: pay arg=amount sum USD 2000 per day -> gate finance")
TOTAL = parse_rule("total: pay arg=amount sum USD 5000 -> refuse")
BIG = parse_rule("big: pay arg=amount max USD 100 -> gate")
DAILY_KEY = LedgerKey("daily-spend", "USD", None)
TOTAL_KEY = LedgerKey("total", "USD", None)
PAY = CallRequest(tool="pay", arguments_text='{"amount": "450.00"}', principal="carol")


def state(spent: dict[LedgerKey, int], *, unreadable: bool = False) -> PolicyState:
    return PolicyState(
        now=NOW,
        mode=Mode.PROMPT,
        cap_rules=(DAILY, TOTAL, BIG),
        cap_rules_unreadable=unreadable,
        spent=spent,
    )


def test_within_every_sum_the_call_is_allowed_with_its_records() -> None:
    evaluation = recheck_sums(PAY, state({DAILY_KEY: 155000, TOTAL_KEY: 0}), held_for=())
    assert evaluation.verdict.status is Status.ALLOWED  # the mode and the max rule not asked
    assert evaluation.records == (
        LedgerRecord(DAILY_KEY, 45000),
        LedgerRecord(TOTAL_KEY, 45000),
    )


def test_a_sum_now_over_holds_at_its_gate_unless_the_call_was_held_for_it() -> None:
    over = state({DAILY_KEY: 155001, TOTAL_KEY: 0})
    held = recheck_sums(PAY, over, held_for=())
    assert held.verdict.status is Status.PENDING
    assert held.verdict.gates == ("finance",)
    (finding,) = held.verdict.reasons
    assert finding.rule == "daily-spend"
    assert recheck_sums(PAY, over, held_for={"daily-spend"}).verdict.status is Status.ALLOWED


def test_a_refusing_sum_now_over_refuses() -> None:
    evaluation = recheck_sums(PAY, state({DAILY_KEY: 0, TOTAL_KEY: 460000}), held_for=())
    assert evaluation.verdict.status is Status.REFUSED
    assert [f.rule for f in evaluation.verdict.reasons] == ["total"]


def test_unreadable_rules_or_a_missing_total_refuse_with_policy_error() -> None:
    unreadable = recheck_sums(
        PAY, state({DAILY_KEY: 0, TOTAL_KEY: 0}, unreadable=True), held_for=()
    )
    missing = recheck_sums(PAY, state({DAILY_KEY: 0}), held_for=())
    for evaluation in (unreadable, missing):
        assert evaluation.verdict.status is Status.REFUSED
        assert [f.message for f in evaluation.verdict.reasons] == [POLICY_ERROR]
    assert isinstance(missing.error, KeyError)


def test_a_keyed_ledger_is_checked_for_the_calls_own_key() -> None:
    rule = parse_rule("each: pay arg=amount sum USD 1000 by principal -> gate")
    key = LedgerKey("each", "USD", digest_key("carol"))
    rules = (rule,)
    assert capcore.engine.ledgers_of_call(PAY, rules) == (key,)
    within = PolicyState(now=NOW, cap_rules=rules, spent={key: 55000})
    assert recheck_sums(PAY, within, held_for=()).verdict.status is Status.ALLOWED
    over = PolicyState(now=NOW, cap_rules=rules, spent={key: 55001})
    assert recheck_sums(PAY, over, held_for=()).verdict.status is Status.PENDING
