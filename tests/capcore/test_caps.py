"""Cap rules against one call (``docs/rules.md``, "What each part means" and "Ledgers"):
applicability, max and sum limits, currencies, minor units, not-assessable amounts, ledger
keys, records, windows, and messages that never quote the arguments."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone, tzinfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capcore import INT64_MAX, parse_arguments, parse_rule
from capcore.caps import (
    AMOUNT_MISSING,
    AMOUNT_NEGATIVE,
    AMOUNT_NOT_DECIMAL,
    AMOUNT_TOO_LARGE,
    AMOUNT_TOO_PRECISE,
    AMOUNT_WRONG_TYPE,
    CURRENCY_MISSING,
    CURRENCY_NOT_LIMITED,
    CapAssessment,
    CapResult,
    LedgerKey,
    LedgerRecord,
    assess_caps,
    bounds_of_window,
    digest_key,
    evaluate_caps,
    in_window,
    ledgers_of_caps,
)
from capcore.findings import REFUSE, Action, ActionKind, Finding, Policy
from capcore.rules import MAX_WINDOW_SECONDS, Calendar, Window

PRINCIPAL = "user-42"

BIG_PAYMENT = "big-payment: pay,transfer arg=amount max USD 500.00 -> gate finance"
DAILY = "daily: pay arg=amount sum USD 1000 per day by principal -> gate"
DAILY_SPEND = (
    "daily-spend: pay arg=amount currency=currency sum USD 1000, EUR 900 per day by principal"
    " -> gate"
)
WIRE_CAP = (
    "wire-cap: wire arg=amount.value currency=amount.currency max USD 10000, EUR 9000 -> refuse"
)
PER_PAYEE = "per-payee: pay arg=amount sum USD 2000 per 7d by arg=payee.email lower trim -> gate"
# The reasons name the key's path (from the rule), never its value (from the call).
PAYEE_MISSING = "the key argument payee.email is missing"
PAYEE_NOT_TEXT = "the key argument payee.email is not a string"
REFUNDS = "refunds: refund arg=amount_cents minor max USD 250.00 -> gate"
METAL = "metal: buy_metal arg=grams max XAU 10.000 exponent=3 -> refuse"


def assess_all(
    lines: list[str], arguments: str, *, tool: str = "pay", principal: str = PRINCIPAL
) -> tuple[CapAssessment, ...]:
    rules = [parse_rule(line) for line in lines]
    return assess_caps(rules, tool=tool, arguments=parse_arguments(arguments), principal=principal)


def assess_one(
    line: str, arguments: str, *, tool: str = "pay", principal: str = PRINCIPAL
) -> CapAssessment:
    (assessment,) = assess_all([line], arguments, tool=tool, principal=principal)
    return assessment


def evaluate_one(
    line: str, arguments: str, *, spent: int = 0, tool: str = "pay", principal: str = PRINCIPAL
) -> CapResult:
    """One rule against one call, every touched ledger having ``spent`` minor units."""
    assessments = assess_all([line], arguments, tool=tool, principal=principal)
    return evaluate_caps(assessments, spent=dict.fromkeys(ledgers_of_caps(assessments), spent))


def only_finding(result: CapResult) -> Finding:
    (finding,) = result.findings
    return finding


def gate(name: str = "") -> Action:
    return Action(ActionKind.GATE, name)


# --- applicability --------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["pay", "transfer"])
def test_rule_applies_to_each_of_its_tools(tool: str) -> None:
    (assessment,) = assess_all([BIG_PAYMENT], '{"amount": "10"}', tool=tool)
    assert assessment.rule.name == "big-payment"
    assert assessment.amount == 1000


@pytest.mark.parametrize(
    "tool",
    ["Pay", "PAY", "pay ", " pay", "pay.v2", "transfer_funds", "refund", "pa", "pay,transfer"],
)
def test_rule_does_not_apply_to_other_tools_case_sensitively(tool: str) -> None:
    assert assess_all([BIG_PAYMENT], '{"amount": "9999"}', tool=tool) == ()


def test_rule_names_tools_case_sensitively_when_both_cases_are_listed() -> None:
    line = "two: pay,Pay arg=amount max USD 1 -> refuse"
    assert len(assess_all([line], '{"amount": "1"}', tool="Pay")) == 1
    assert assess_all([line], '{"amount": "1"}', tool="PAY") == ()


def test_assessments_follow_rule_order_and_skip_rules_for_other_tools() -> None:
    lines = [
        "zz-first: pay arg=amount max USD 1 -> refuse",
        "other-tool: refund arg=amount max USD 1 -> refuse",
        "aa-second: pay,refund arg=amount max USD 1 -> refuse",
    ]
    names = [a.rule.name for a in assess_all(lines, '{"amount": "1"}')]
    assert names == ["zz-first", "aa-second"]


def test_no_applicable_rule_gives_no_findings_and_no_records() -> None:
    assessments = assess_all([BIG_PAYMENT, DAILY], '{"amount": "99999"}', tool="read_file")
    assert evaluate_caps(assessments, spent={}) == CapResult((), ())


# --- max ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"amount": "500.00"}', id="string-at-limit"),
        pytest.param('{"amount": "500"}', id="string-integer-at-limit"),
        pytest.param('{"amount": 500.00}', id="number-at-limit"),
        pytest.param('{"amount": "499.99"}', id="one-cent-under"),
        pytest.param('{"amount": "0"}', id="zero"),
    ],
)
def test_max_at_or_under_the_limit_passes(arguments: str) -> None:
    assert evaluate_one(BIG_PAYMENT, arguments).findings == ()


@pytest.mark.parametrize(
    ("arguments", "shown"),
    [
        pytest.param('{"amount": "500.01"}', "USD 500.01", id="one-minor-unit-over"),
        pytest.param('{"amount": 500.01}', "USD 500.01", id="number-one-minor-unit-over"),
        pytest.param('{"amount": "1250.0"}', "USD 1,250.00", id="grouped"),
        pytest.param('{"amount": "1234567.8"}', "USD 1,234,567.80", id="millions"),
    ],
)
def test_max_over_the_limit_is_a_finding_with_decimal_text(arguments: str, shown: str) -> None:
    finding = only_finding(evaluate_one(BIG_PAYMENT, arguments))
    assert finding == Finding(
        Policy.CAP,
        "big-payment",
        gate("finance"),
        f"{shown} is over the limit of USD 500.00 per call",
    )


def test_max_message_matches_the_spec_example() -> None:
    finding = only_finding(evaluate_one(BIG_PAYMENT, '{"amount": "1250"}'))
    assert finding.message == "USD 1,250.00 is over the limit of USD 500.00 per call"


def test_max_over_with_refuse_action_refuses() -> None:
    line = "hard: pay arg=amount max USD 500.00 -> refuse"
    finding = only_finding(evaluate_one(line, '{"amount": "500.01"}'))
    assert finding.action == REFUSE
    assert finding.rule == "hard"


def test_max_rule_has_no_ledger_and_no_record() -> None:
    assessment = assess_one(BIG_PAYMENT, '{"amount": "12.50"}')
    assert assessment.ledger is None
    assert assessment.amount == 1250
    assert ledgers_of_caps([assessment]) == ()
    assert evaluate_caps([assessment], spent={}).records == ()


def test_max_with_exponent_override_currency() -> None:
    assert evaluate_one(METAL, '{"grams": "10.000"}', tool="buy_metal").findings == ()
    finding = only_finding(evaluate_one(METAL, '{"grams": "10.001"}', tool="buy_metal"))
    assert finding.message == "XAU 10.001 is over the limit of XAU 10.000 per call"
    assert finding.action == REFUSE


def test_max_with_zero_exponent_currency() -> None:
    line = "yen: pay arg=amount max JPY 1000 -> refuse"
    assert evaluate_one(line, '{"amount": "1000"}').findings == ()
    assert only_finding(evaluate_one(line, '{"amount": "1001"}')).message == (
        "JPY 1,001 is over the limit of JPY 1,000 per call"
    )
    assessment = assess_one(line, '{"amount": "1.5"}')
    assert assessment.not_assessable == AMOUNT_TOO_PRECISE


# --- sum ------------------------------------------------------------------------------------


def test_sum_message_matches_the_agent_api_example() -> None:
    result = evaluate_one(DAILY, '{"amount": "250.00"}', spent=80_000)
    assert only_finding(result) == Finding(
        Policy.CAP,
        "daily",
        gate(""),
        "USD 1,050.00 would exceed the limit of USD 1,000.00 per day (spent USD 800.00)",
    )


@pytest.mark.parametrize(
    ("spent", "amount", "over"),
    [
        pytest.param(80_000, "200.00", False, id="exactly-reaches-limit"),
        pytest.param(80_000, "200.01", True, id="one-cent-past-limit"),
        pytest.param(0, "1000.00", False, id="first-call-at-limit"),
        pytest.param(0, "1000.01", True, id="first-call-over"),
        pytest.param(100_000, "0", False, id="zero-amount-on-full-ledger"),
        pytest.param(100_000, "0.01", True, id="full-ledger"),
        pytest.param(150_000, "0", True, id="ledger-already-past-limit"),
    ],
)
def test_sum_is_over_when_spent_plus_amount_exceeds_the_limit(
    spent: int, amount: str, over: bool
) -> None:
    result = evaluate_one(DAILY, f'{{"amount": "{amount}"}}', spent=spent)
    assert bool(result.findings) is over


def test_sum_over_records_the_amount_all_the_same() -> None:
    result = evaluate_one(DAILY, '{"amount": "250.00"}', spent=80_000)
    assert len(result.findings) == 1
    (record,) = result.records
    assert record.minor == 25_000
    assert record.ledger == LedgerKey("daily", "USD", digest_key(PRINCIPAL))


def test_sum_total_that_overflows_64_bits_is_over() -> None:
    # The limit is the largest count there is: only the overflow check can catch this call.
    line = "huge: pay arg=amount sum USD 92233720368547758.07 -> refuse"
    assessment = assess_one(line, '{"amount": "0.10"}')
    assert assessment.limit is not None
    assert assessment.limit.minor == INT64_MAX
    assert assessment.ledger is not None
    result = evaluate_caps([assessment], spent={assessment.ledger: INT64_MAX - 5})
    finding = only_finding(result)
    assert finding.rule == "huge"
    assert finding.action == REFUSE
    assert "USD 92,233,720,368,547,758.07" in finding.message
    # The full ledger still passes a zero amount.
    zero = assess_one(line, '{"amount": "0"}')
    assert evaluate_caps([zero], spent={assessment.ledger: INT64_MAX}).findings == ()


@pytest.mark.parametrize(
    ("line", "window_text"),
    [
        pytest.param("s: pay arg=amount sum USD 10 -> gate", "in total", id="all-time"),
        pytest.param("s: pay arg=amount sum USD 10 per 24h -> gate", "per 1d", id="rolling-24h"),
        pytest.param("s: pay arg=amount sum USD 10 per 90m -> gate", "per 90m", id="rolling-90m"),
        pytest.param("s: pay arg=amount sum USD 10 per week -> gate", "per week", id="week"),
        pytest.param("s: pay arg=amount sum USD 10 per month -> gate", "per month", id="month"),
    ],
)
def test_sum_message_names_the_window(line: str, window_text: str) -> None:
    finding = only_finding(evaluate_one(line, '{"amount": "4"}', spent=700))
    assert finding.message == (
        f"USD 11.00 would exceed the limit of USD 10.00 {window_text} (spent USD 7.00)"
    )


# --- currency -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("currency", "limit_minor"),
    [pytest.param("USD", 100_000, id="USD"), pytest.param("EUR", 90_000, id="EUR")],
)
def test_currency_argument_selects_that_limit_and_ledger(currency: str, limit_minor: int) -> None:
    assessment = assess_one(DAILY_SPEND, f'{{"amount": "10", "currency": "{currency}"}}')
    assert assessment.not_assessable is None
    assert assessment.limit is not None
    assert (assessment.limit.currency, assessment.limit.minor) == (currency, limit_minor)
    assert assessment.ledger == LedgerKey("daily-spend", currency, digest_key(PRINCIPAL))


def test_each_currency_has_its_own_limit() -> None:
    eur = evaluate_one(DAILY_SPEND, '{"amount": "900.01", "currency": "EUR"}')
    assert only_finding(eur).message == (
        "EUR 900.01 would exceed the limit of EUR 900.00 per day (spent EUR 0.00)"
    )
    assert evaluate_one(DAILY_SPEND, '{"amount": "900.01", "currency": "USD"}').findings == ()


@pytest.mark.parametrize(
    ("arguments", "category"),
    [
        pytest.param('{"amount": "10"}', CURRENCY_MISSING, id="missing"),
        pytest.param('{"amount": "10", "currency": "usd"}', CURRENCY_NOT_LIMITED, id="lower-case"),
        pytest.param('{"amount": "10", "currency": "Usd"}', CURRENCY_NOT_LIMITED, id="mixed-case"),
        pytest.param('{"amount": "10", "currency": " USD"}', CURRENCY_NOT_LIMITED, id="blank"),
        pytest.param('{"amount": "10", "currency": 840}', CURRENCY_NOT_LIMITED, id="number"),
        pytest.param('{"amount": "10", "currency": null}', CURRENCY_NOT_LIMITED, id="null"),
        pytest.param('{"amount": "10", "currency": ["USD"]}', CURRENCY_NOT_LIMITED, id="array"),
        pytest.param('{"amount": "10", "currency": "GBP"}', CURRENCY_NOT_LIMITED, id="unlisted"),
        pytest.param('{"amount": "10", "currency": "ZQXJ"}', CURRENCY_NOT_LIMITED, id="not-iso"),
        pytest.param('{"amount": "10", "Currency": "USD"}', CURRENCY_MISSING, id="case-variant"),
    ],
)
def test_currency_argument_not_assessable(arguments: str, category: str) -> None:
    assessment = assess_one(DAILY_SPEND, arguments)
    assert assessment.not_assessable == category
    assert assessment.ledger is None
    result = evaluate_caps([assessment], spent={})
    assert only_finding(result) == Finding(
        Policy.CAP, "daily-spend", gate(""), f"not assessable: {category}"
    )
    assert result.records == ()


def test_currency_at_a_nested_path() -> None:
    over = evaluate_one(
        WIRE_CAP, '{"amount": {"value": "9000.01", "currency": "EUR"}}', tool="wire"
    )
    assert only_finding(over).message == "EUR 9,000.01 is over the limit of EUR 9,000.00 per call"
    assert only_finding(over).action == REFUSE
    assert (
        evaluate_one(
            WIRE_CAP, '{"amount": {"value": "9000.01", "currency": "USD"}}', tool="wire"
        ).findings
        == ()
    )
    missing = assess_one(WIRE_CAP, '{"amount": {"value": "1"}}', tool="wire")
    assert missing.not_assessable == CURRENCY_MISSING


def test_fixed_currency_rule_uses_its_only_limit_and_ignores_any_currency_argument() -> None:
    assessment = assess_one(BIG_PAYMENT, '{"amount": "500.00", "currency": "EUR"}')
    assert assessment.not_assessable is None
    assert assessment.limit is not None
    assert assessment.limit.currency == "USD"
    assert assessment.amount == 50_000


# --- minor units ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "over"),
    [
        pytest.param('{"amount_cents": 25000}', False, id="number-at-limit"),
        pytest.param('{"amount_cents": "25000"}', False, id="string-at-limit"),
        pytest.param('{"amount_cents": 25001}', True, id="one-cent-over"),
    ],
)
def test_minor_unit_rule_reads_cents_against_a_major_limit(arguments: str, over: bool) -> None:
    result = evaluate_one(REFUNDS, arguments, tool="refund")
    assert bool(result.findings) is over
    if over:
        assert only_finding(result).message == (
            "USD 250.01 is over the limit of USD 250.00 per call"
        )


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"amount_cents": "12.5"}', id="string-fraction"),
        pytest.param('{"amount_cents": 12.5}', id="number-fraction"),
        pytest.param('{"amount_cents": 12.0}', id="number-dot-zero"),
    ],
)
def test_minor_unit_rule_refuses_fractions(arguments: str) -> None:
    assessment = assess_one(REFUNDS, arguments, tool="refund")
    assert assessment.not_assessable == AMOUNT_TOO_PRECISE
    assert assessment.amount is None


# --- not-assessable amounts -----------------------------------------------------------------

NOT_ASSESSABLE_AMOUNTS = [
    pytest.param("{}", AMOUNT_MISSING, id="missing"),
    pytest.param('{"Amount": "1"}', AMOUNT_MISSING, id="case-variant-name"),
    pytest.param('{"amount": 1e3}', AMOUNT_NOT_DECIMAL, id="json-number-1e3"),
    pytest.param('{"amount": "1e3"}', AMOUNT_NOT_DECIMAL, id="string-1e3"),
    pytest.param('{"amount": "1,000.00"}', AMOUNT_NOT_DECIMAL, id="thousands-separator"),
    pytest.param('{"amount": " 12"}', AMOUNT_NOT_DECIMAL, id="leading-blank"),
    pytest.param('{"amount": ""}', AMOUNT_NOT_DECIMAL, id="empty-string"),
    pytest.param('{"amount": "ZQXJ"}', AMOUNT_NOT_DECIMAL, id="letters"),
    pytest.param('{"amount": "12.345"}', AMOUNT_TOO_PRECISE, id="three-digits-at-USD"),
    pytest.param('{"amount": 12.345}', AMOUNT_TOO_PRECISE, id="number-three-digits-at-USD"),
    pytest.param('{"amount": "-1"}', AMOUNT_NEGATIVE, id="negative"),
    pytest.param('{"amount": "-0"}', AMOUNT_NEGATIVE, id="negative-zero-string"),
    pytest.param('{"amount": -0}', AMOUNT_NEGATIVE, id="negative-zero-number"),
    pytest.param('{"amount": "-0.00"}', AMOUNT_NEGATIVE, id="negative-zero-fraction"),
    pytest.param('{"amount": null}', AMOUNT_WRONG_TYPE, id="null"),
    pytest.param('{"amount": true}', AMOUNT_WRONG_TYPE, id="true"),
    pytest.param('{"amount": false}', AMOUNT_WRONG_TYPE, id="false"),
    pytest.param('{"amount": {"value": "1"}}', AMOUNT_WRONG_TYPE, id="object"),
    pytest.param('{"amount": ["1"]}', AMOUNT_WRONG_TYPE, id="array"),
    pytest.param('{"amount": 1000000000000000000000000000000}', AMOUNT_TOO_LARGE, id="10^30"),
    pytest.param('{"amount": "92233720368547758.08"}', AMOUNT_TOO_LARGE, id="int64-max-plus-1"),
]


@pytest.mark.parametrize(("arguments", "category"), NOT_ASSESSABLE_AMOUNTS)
@pytest.mark.parametrize(
    ("line", "action"),
    [
        pytest.param(
            "cap: pay arg=amount max USD 500.00 -> gate finance", gate("finance"), id="max-gate"
        ),
        pytest.param("cap: pay arg=amount max USD 500.00 -> refuse", REFUSE, id="max-refuse"),
        pytest.param("cap: pay arg=amount sum USD 500.00 per day -> gate", gate(""), id="sum-gate"),
        pytest.param(
            "cap: pay arg=amount sum USD 500.00 by principal -> refuse", REFUSE, id="sum-refuse"
        ),
    ],
)
def test_not_assessable_amount_takes_the_rule_action(
    line: str, action: Action, arguments: str, category: str
) -> None:
    assessment = assess_one(line, arguments)
    assert assessment.not_assessable == category
    assert assessment.amount is None
    assert assessment.ledger is None
    assert ledgers_of_caps([assessment]) == ()
    # No ledger is needed: an empty `spent` must not raise.
    result = evaluate_caps([assessment], spent={})
    assert result.findings == (Finding(Policy.CAP, "cap", action, f"not assessable: {category}"),)
    assert result.records == ()


def test_amount_path_through_a_non_object_is_missing() -> None:
    line = "nested: pay arg=amount.value max USD 1 -> refuse"
    assert assess_one(line, '{"amount": "12"}').not_assessable == AMOUNT_MISSING
    assert assess_one(line, '{"amount": ["12"]}').not_assessable == AMOUNT_MISSING
    assert assess_one(line, '{"amount": {"value": "1"}}').not_assessable is None


def test_not_assessable_on_one_rule_does_not_stop_another() -> None:
    lines = [
        "by-payee: pay arg=amount sum USD 100 by arg=payee -> gate p",
        "plain: pay arg=amount sum USD 100 -> gate q",
    ]
    assessments = assess_all(lines, '{"amount": "150"}')
    ledgers = ledgers_of_caps(assessments)
    assert [ledger.rule for ledger in ledgers] == ["plain"]
    result = evaluate_caps(assessments, spent=dict.fromkeys(ledgers, 0))
    assert [(f.rule, f.action.gate) for f in result.findings] == [("by-payee", "p"), ("plain", "q")]
    assert result.findings[0].message == "not assessable: the key argument payee is missing"
    assert [r.ledger.rule for r in result.records] == ["plain"]


# --- ledger keys ----------------------------------------------------------------------------


def test_digest_key_is_the_sha256_hex_of_the_utf8_text() -> None:
    assert digest_key("bob@x.com") == hashlib.sha256(b"bob@x.com").hexdigest()
    assert digest_key("zoë") == hashlib.sha256("zoë".encode()).hexdigest()
    assert len(digest_key("")) == 64
    assert digest_key("a") != digest_key("A")


def test_ledger_rule_is_the_casefolded_rule_name() -> None:
    line = "Daily-Spend.V2: pay arg=amount sum USD 1000 -> gate"
    assessment = assess_one(line, '{"amount": "1"}')
    assert assessment.ledger == LedgerKey("daily-spend.v2", "USD", None)


def test_sum_without_key_is_one_total_for_everybody() -> None:
    line = "one-total: pay arg=amount sum USD 1000 -> gate"
    alice = assess_one(line, '{"amount": "1"}', principal="alice")
    bob = assess_one(line, '{"amount": "1"}', principal="bob")
    assert alice.ledger == bob.ledger == LedgerKey("one-total", "USD", None)


def test_by_principal_keys_by_the_digest_of_the_principal() -> None:
    alice = assess_one(DAILY, '{"amount": "1"}', principal="alice-ZQXJ")
    alice_again = assess_one(DAILY, '{"amount": "2"}', principal="alice-ZQXJ")
    bob = assess_one(DAILY, '{"amount": "1"}', principal="bob")
    assert alice.ledger == alice_again.ledger == LedgerKey("daily", "USD", digest_key("alice-ZQXJ"))
    assert bob.ledger is not None
    assert alice.ledger != bob.ledger
    assert "ZQXJ" not in repr(alice.ledger)


def test_by_principal_ignores_a_principal_argument() -> None:
    a = assess_one(DAILY, '{"amount": "1", "principal": "mallory"}', principal="alice")
    b = assess_one(DAILY, '{"amount": "1"}', principal="alice")
    assert a.ledger == b.ledger


def _payee_ledger(line: str, email: str) -> LedgerKey | None:
    arguments = '{"amount": "1", "payee": {"email": "' + email + '"}}'
    return assess_one(line, arguments).ledger


NO_NORMALISATION = "per-payee: pay arg=amount sum USD 2000 per 7d by arg=payee.email -> gate"
LOWER_ONLY = "per-payee: pay arg=amount sum USD 2000 per 7d by arg=payee.email lower -> gate"
TRIM_ONLY = "per-payee: pay arg=amount sum USD 2000 per 7d by arg=payee.email trim -> gate"


@pytest.mark.parametrize(
    ("line", "first", "second", "same"),
    [
        pytest.param(PER_PAYEE, " Bob@X.com ", "bob@x.com", True, id="lower-trim-same"),
        pytest.param(PER_PAYEE, "\\tBOB@X.COM\\n", "bob@x.com", True, id="lower-trim-tab-newline"),
        pytest.param(PER_PAYEE, "bob@x.com", "bob@y.com", False, id="lower-trim-other-payee"),
        pytest.param(NO_NORMALISATION, " Bob@X.com ", "bob@x.com", False, id="none-differ"),
        pytest.param(NO_NORMALISATION, "Bob@X.com", "bob@x.com", False, id="none-case-differs"),
        pytest.param(NO_NORMALISATION, "bob@x.com", "bob@x.com", True, id="none-identical"),
        pytest.param(LOWER_ONLY, "Bob@X.com", "bob@x.com", True, id="lower-folds-case"),
        pytest.param(LOWER_ONLY, " bob@x.com", "bob@x.com", False, id="lower-keeps-blanks"),
        pytest.param(TRIM_ONLY, " Bob@X.com ", "Bob@X.com", True, id="trim-strips-blanks"),
        pytest.param(TRIM_ONLY, "Bob@X.com", "bob@x.com", False, id="trim-keeps-case"),
        pytest.param(PER_PAYEE, "Straße", "strasse", False, id="lower-is-not-casefold"),
    ],
)
def test_key_normalisation(line: str, first: str, second: str, same: bool) -> None:
    a = _payee_ledger(line, first)
    b = _payee_ledger(line, second)
    assert a is not None
    assert b is not None
    assert (a == b) is same


def test_normalised_key_is_the_digest_of_the_normalised_text() -> None:
    ledger = _payee_ledger(PER_PAYEE, " Bob@X.com ")
    assert ledger == LedgerKey("per-payee", "USD", digest_key("bob@x.com"))


@pytest.mark.parametrize(
    ("payee", "category"),
    [
        pytest.param("{}", PAYEE_MISSING, id="missing"),
        pytest.param('{"Email": "bob@x.com"}', PAYEE_MISSING, id="case-variant-name"),
        pytest.param('"bob@x.com"', PAYEE_MISSING, id="parent-not-object"),
        pytest.param('{"email": null}', PAYEE_NOT_TEXT, id="null"),
        pytest.param('{"email": 42}', PAYEE_NOT_TEXT, id="number"),
        pytest.param('{"email": true}', PAYEE_NOT_TEXT, id="bool"),
        pytest.param('{"email": ["bob@x.com"]}', PAYEE_NOT_TEXT, id="array"),
        pytest.param('{"email": {"a": "b"}}', PAYEE_NOT_TEXT, id="object"),
    ],
)
def test_key_not_assessable(payee: str, category: str) -> None:
    assessment = assess_one(PER_PAYEE, '{"amount": "5", "payee": ' + payee + "}")
    assert assessment.not_assessable == category
    assert assessment.ledger is None
    assert ledgers_of_caps([assessment]) == ()
    result = evaluate_caps([assessment], spent={})
    assert result.findings == (
        Finding(Policy.CAP, "per-payee", gate(""), f"not assessable: {category}"),
    )
    assert result.records == ()


def test_ledger_key_never_holds_the_key_text() -> None:
    arguments = '{"amount": "5", "payee": {"email": "ZQXJ@example.com"}}'
    assessment = assess_one(PER_PAYEE, arguments)
    assert assessment.ledger is not None
    assert assessment.ledger.key_digest == digest_key("zqxj@example.com")
    for text in (repr(assessment.ledger), str(assessment.ledger)):
        assert "zqxj" not in text.lower()
        assert "example" not in text


# --- ledgers_of_caps and records ----------------------------------------------------------------

LEDGER_RULES = [
    "zeta: pay arg=amount sum USD 100 -> gate",
    "per-call: pay arg=amount max USD 1 -> gate",
    "Alpha: pay arg=amount sum USD 100 by principal -> gate",
    "keyless: pay arg=amount sum USD 100 by arg=payee -> gate",
    "mid: pay arg=amount currency=currency sum USD 100, EUR 100 -> gate",
    "other-tool: refund arg=amount sum USD 100 -> gate",
]


def test_cap_ledgers_are_sorted_and_only_assessable_sum_rules() -> None:
    assessments = assess_all(LEDGER_RULES, '{"amount": "150", "currency": "EUR"}')
    ledgers = ledgers_of_caps(assessments)
    assert ledgers == (
        LedgerKey("alpha", "USD", digest_key(PRINCIPAL)),
        LedgerKey("mid", "EUR", None),
        LedgerKey("zeta", "USD", None),
    )
    assert list(ledgers) == sorted(ledgers)


def test_cap_ledgers_sort_by_currency_then_key_within_a_rule() -> None:
    ledgers = [
        LedgerKey("r", "USD", None),
        LedgerKey("r", "EUR", "ff"),
        LedgerKey("r", "EUR", "00"),
    ]
    assessments = [
        CapAssessment(parse_rule("r: pay arg=amount sum USD 1 -> gate"), ledger=ledger)
        for ledger in ledgers
    ]
    assert ledgers_of_caps(assessments) == (
        LedgerKey("r", "EUR", "00"),
        LedgerKey("r", "EUR", "ff"),
        LedgerKey("r", "USD", None),
    )


def test_records_cover_every_assessable_sum_rule_including_those_gone_over() -> None:
    assessments = assess_all(LEDGER_RULES, '{"amount": "50", "currency": "EUR"}')
    ledgers = ledgers_of_caps(assessments)
    zeta = LedgerKey("zeta", "USD", None)
    result = evaluate_caps(assessments, spent=dict.fromkeys(ledgers, 0) | {zeta: 9_000})
    # Over: zeta (sum) and per-call (max); keyless is not assessable; alpha and mid pass.
    assert [f.rule for f in result.findings] == ["zeta", "per-call", "keyless"]
    assert result.records == (
        LedgerRecord(zeta, 5_000),
        LedgerRecord(LedgerKey("alpha", "USD", digest_key(PRINCIPAL)), 5_000),
        LedgerRecord(LedgerKey("mid", "EUR", None), 5_000),
    )


def test_records_use_the_amount_in_minor_units() -> None:
    line = "refund-total: refund arg=amount_cents minor sum USD 1000 -> gate"
    assessments = assess_all([line], '{"amount_cents": 1234}', tool="refund")
    result = evaluate_caps(assessments, spent=dict.fromkeys(ledgers_of_caps(assessments), 0))
    assert result.records == (LedgerRecord(LedgerKey("refund-total", "USD", None), 1234),)


def test_ledger_missing_from_spent_raises_key_error() -> None:
    assessments = assess_all([DAILY], '{"amount": "1"}')
    with pytest.raises(KeyError):
        evaluate_caps(assessments, spent={})
    other = LedgerKey("daily", "USD", digest_key("someone-else"))
    with pytest.raises(KeyError):
        evaluate_caps(assessments, spent={other: 0})


def test_spent_is_read_per_ledger() -> None:
    assessments = assess_all([DAILY_SPEND], '{"amount": "100", "currency": "EUR"}')
    (ledger,) = ledgers_of_caps(assessments)
    usd = LedgerKey("daily-spend", "USD", digest_key(PRINCIPAL))
    # A full USD ledger does not affect the EUR one.
    assert evaluate_caps(assessments, spent={ledger: 0, usd: 10**9}).findings == ()
    assert len(evaluate_caps(assessments, spent={ledger: 80_001, usd: 0}).findings) == 1


# --- windows --------------------------------------------------------------------------------

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # a Monday
PLUS5 = timezone(timedelta(hours=5))
US = timedelta(microseconds=1)
DAY = Window(calendar=Calendar.DAY)
WEEK = Window(calendar=Calendar.WEEK)
MONTH = Window(calendar=Calendar.MONTH)
ROLLING_24H = Window(rolling_seconds=86_400)


def test_parsed_windows() -> None:
    assert parse_rule("a: pay arg=amount sum USD 1 per 24h -> gate").window == ROLLING_24H
    assert parse_rule("a: pay arg=amount sum USD 1 per week -> gate").window == WEEK
    assert parse_rule("a: pay arg=amount sum USD 1 -> gate").window is None


def test_rolling_window_bounds_exclude_the_start() -> None:
    assert bounds_of_window(ROLLING_24H, NOW) == (NOW - timedelta(days=1), False)


@pytest.mark.parametrize(
    ("recorded_at", "inside"),
    [
        pytest.param(NOW - timedelta(days=1), False, id="exactly-window-ago"),
        pytest.param(NOW - timedelta(days=1) - US, False, id="before-window"),
        pytest.param(NOW - timedelta(days=1) + US, True, id="just-inside"),
        pytest.param(NOW - timedelta(hours=3), True, id="middle"),
        pytest.param(NOW, True, id="now"),
        # After now: only a clock running ahead writes these, and they count (fail-closed).
        pytest.param(NOW + US, True, id="future"),
        pytest.param(NOW + timedelta(hours=1), True, id="later-future"),
        pytest.param((NOW - timedelta(hours=3)).astimezone(PLUS5), True, id="other-timezone"),
    ],
)
def test_rolling_window_contains(recorded_at: datetime, inside: bool) -> None:
    assert in_window(ROLLING_24H, recorded_at, NOW) is inside


def test_rolling_window_of_minutes() -> None:
    window = Window(rolling_seconds=90 * 60)
    assert in_window(window, NOW - timedelta(minutes=90), NOW) is False
    assert in_window(window, NOW - timedelta(minutes=89, seconds=59), NOW) is True


def test_no_window_is_all_time() -> None:
    assert bounds_of_window(None, NOW) == (None, True)
    assert in_window(None, datetime(1970, 1, 1, tzinfo=UTC), NOW) is True
    assert in_window(None, NOW, NOW) is True
    assert in_window(None, NOW + US, NOW) is True


@pytest.mark.parametrize(
    ("window", "now", "start"),
    [
        pytest.param(DAY, NOW, datetime(2026, 11, 30, tzinfo=UTC), id="day"),
        pytest.param(
            DAY, datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC),
            id="day-at-midnight",
        ),
        pytest.param(
            DAY,
            datetime(2026, 12, 1, 3, 0, tzinfo=PLUS5),  # 2026-11-30 22:00 UTC
            datetime(2026, 11, 30, tzinfo=UTC),
            id="day-utc-plus-5-after-local-midnight",
        ),
        pytest.param(
            WEEK,
            datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC),  # Sunday
            datetime(2026, 2, 23, tzinfo=UTC),
            id="week-sunday",
        ),
        pytest.param(
            WEEK,
            datetime(2026, 3, 2, 0, 0, tzinfo=UTC),  # Monday
            datetime(2026, 3, 2, tzinfo=UTC),
            id="week-monday-midnight",
        ),
        pytest.param(
            WEEK,
            datetime(2026, 3, 8, 12, 0, tzinfo=UTC),  # the next Sunday
            datetime(2026, 3, 2, tzinfo=UTC),
            id="week-end-of-week",
        ),
        pytest.param(
            WEEK,
            datetime(2026, 3, 2, 3, 0, tzinfo=PLUS5),  # Monday locally, Sunday 22:00 UTC
            datetime(2026, 2, 23, tzinfo=UTC),
            id="week-utc-plus-5-monday-local-sunday-utc",
        ),
        pytest.param(
            WEEK,
            datetime(2026, 3, 2, 5, 0, tzinfo=PLUS5),  # Monday 00:00 UTC
            datetime(2026, 3, 2, tzinfo=UTC),
            id="week-utc-plus-5-monday-utc",
        ),
        pytest.param(
            MONTH, datetime(2026, 3, 15, 8, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC),
            id="month",
        ),
        pytest.param(
            MONTH, datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC),
            id="month-first-day-midnight",
        ),
        pytest.param(
            MONTH,
            datetime(2026, 3, 1, 2, 0, tzinfo=PLUS5),  # 2026-02-28 21:00 UTC
            datetime(2026, 2, 1, tzinfo=UTC),
            id="month-utc-plus-5-first-day-local",
        ),
        pytest.param(
            MONTH,
            datetime(2028, 2, 29, 23, 0, tzinfo=UTC),
            datetime(2028, 2, 1, tzinfo=UTC),
            id="month-leap-day",
        ),
    ],
)  # fmt: skip
def test_calendar_window_bounds(window: Window, now: datetime, start: datetime) -> None:
    bounds_start, inclusive = bounds_of_window(window, now)
    assert bounds_start == start
    assert bounds_start is not None
    assert bounds_start.utcoffset() == timedelta(0)
    assert inclusive is True
    assert in_window(window, start, now) is True
    assert in_window(window, start - US, now) is False
    assert in_window(window, now, now) is True
    assert in_window(window, now + US, now) is True


ZONES = (UTC, PLUS5, timezone(timedelta(hours=-8)), timezone(timedelta(hours=13, minutes=45)))
WINDOWS = st.one_of(
    st.none(),
    st.sampled_from([DAY, WEEK, MONTH]),
    st.integers(1, MAX_WINDOW_SECONDS // 60).map(lambda m: Window(rolling_seconds=60 * m)),
)
TIMES = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.sampled_from(ZONES)
)


def _counts(window: Window | None, recorded_at: datetime, now: datetime) -> bool:
    """The windows in words, with no window bound: what an entry at ``recorded_at`` counts in."""
    t, n = recorded_at.astimezone(UTC), now.astimezone(UTC)
    if window is None:
        return True
    if window.rolling_seconds is not None:
        return now - recorded_at < timedelta(seconds=window.rolling_seconds)
    if window.calendar is Calendar.DAY:
        return t.date() >= n.date()
    if window.calendar is Calendar.WEEK:
        return t.date() >= n.date() - timedelta(days=n.weekday())
    return (t.year, t.month) >= (n.year, n.month)


@given(window=WINDOWS, recorded_at=TIMES, now=TIMES)
def test_in_window_is_the_bound_the_server_compares_with(
    window: Window | None, recorded_at: datetime, now: datetime
) -> None:
    """The server's SQL counts ``recorded_at >= start`` (or ``>``) and nothing else."""
    start, inclusive = bounds_of_window(window, now)
    expected = start is None or (recorded_at >= start if inclusive else recorded_at > start)
    assert in_window(window, recorded_at, now) is expected
    assert in_window(window, recorded_at, now) is _counts(window, recorded_at, now)


@given(window=WINDOWS, now=TIMES, ahead=st.timedeltas(min_value=US, max_value=timedelta(days=400)))
def test_entries_after_now_count(window: Window | None, now: datetime, ahead: timedelta) -> None:
    assert in_window(window, now + ahead, now) is True
    assert in_window(window, now, now) is True


def test_calendar_is_a_str_enum() -> None:
    day: str = "day"
    assert DAY.calendar is Calendar.DAY
    assert DAY.calendar == day
    assert Window(calendar="week").calendar is Calendar.WEEK  # type: ignore[arg-type]


def test_calendar_day_counts_utc_midnight_not_local_midnight() -> None:
    now = datetime(2026, 12, 1, 3, 0, tzinfo=PLUS5)  # 2026-11-30 22:00 UTC
    local_midnight = datetime(2026, 12, 1, 0, 0, tzinfo=PLUS5)  # 2026-11-30 19:00 UTC
    before_local_midnight = datetime(2026, 11, 30, 23, 0, tzinfo=PLUS5)  # 18:00 UTC
    assert in_window(DAY, local_midnight, now) is True
    assert in_window(DAY, before_local_midnight, now) is True
    assert in_window(DAY, datetime(2026, 11, 30, 4, 59, tzinfo=PLUS5), now) is False


class _NoOffset(tzinfo):
    """A tzinfo that knows no offset: a datetime carrying it is naive."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


@pytest.mark.parametrize(
    "window",
    [
        pytest.param(None, id="all-time"),
        pytest.param(ROLLING_24H, id="rolling"),
        pytest.param(DAY, id="day"),
        pytest.param(WEEK, id="week"),
        pytest.param(MONTH, id="month"),
    ],
)
@pytest.mark.parametrize(
    "now",
    [
        pytest.param(datetime(2026, 11, 30, 10, 0), id="no-tzinfo"),
        pytest.param(datetime(2026, 11, 30, 10, 0, tzinfo=_NoOffset()), id="tzinfo-without-offset"),
    ],
)
def test_naive_now_is_refused(window: Window | None, now: datetime) -> None:
    with pytest.raises(ValueError, match="aware"):
        bounds_of_window(window, now)
    with pytest.raises(ValueError, match="aware"):
        in_window(window, NOW, now)


# --- messages quote nothing from the arguments ----------------------------------------------


@pytest.mark.parametrize(
    ("line", "arguments"),
    [
        pytest.param(DAILY_SPEND, '{"amount": "1", "currency": "ZQXJ"}', id="currency"),
        pytest.param(DAILY_SPEND, '{"amount": "1", "currency": "zqxj"}', id="currency-lower"),
        pytest.param(BIG_PAYMENT, '{"amount": "ZQXJ"}', id="amount-letters"),
        pytest.param(BIG_PAYMENT, '{"amount": "1ZQXJ"}', id="amount-digits-then-letters"),
        pytest.param(BIG_PAYMENT, '{"amount": {"ZQXJ": "1"}}', id="amount-object"),
        pytest.param(BIG_PAYMENT, '{"amount": ["ZQXJ"]}', id="amount-array"),
        pytest.param(BIG_PAYMENT, '{"amount": "9999.9"}', id="amount-over-raw-literal"),
        pytest.param(BIG_PAYMENT, '{"amount": 9999.9}', id="number-over-raw-literal"),
        pytest.param(BIG_PAYMENT, '{"amount": "9999.999"}', id="amount-too-precise"),
        pytest.param(BIG_PAYMENT, '{"amount": 9999e9}', id="amount-exponent"),
        pytest.param(PER_PAYEE, '{"amount": "1", "payee": {"email": 7777}}', id="key-number"),
        pytest.param(PER_PAYEE, '{"amount": "9999.9", "payee": {"email": "ZQXJ"}}', id="key-over"),
        pytest.param(PER_PAYEE, '{"amount": "1", "payee": {"ZQXJ": "x"}}', id="key-missing"),
    ],
)
def test_no_finding_message_quotes_the_arguments(line: str, arguments: str) -> None:
    result = evaluate_one(line, arguments, spent=0)
    finding = only_finding(result)
    reason = finding.as_reason()
    for forbidden in ("ZQXJ", "zqxj", "9999.9", "9999.999", "9999e9", "7777"):
        for value in reason.values():
            assert forbidden not in (value or "")
