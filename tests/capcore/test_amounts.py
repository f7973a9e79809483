"""Exact amounts: ``parse_amount``, ``assess``, ``add``, ``format_amount``."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

import capcore
from capcore import (
    INT64_MAX,
    MAX_EXPONENT,
    AmountOverflow,
    AmountSyntax,
    AmountType,
    ExponentError,
    FractionDigits,
    JSONNumber,
    NegativeAmount,
    NotAssessable,
    Unit,
    add,
    assess,
    format_amount,
    parse_amount,
)

INT64_MIN = -(2**63)
MILLION = 1_000_000

int64s = st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
exps = st.integers(min_value=0, max_value=MAX_EXPONENT)


def test_constants() -> None:
    assert INT64_MAX == 2**63 - 1
    assert capcore.INT64_MAX == 2**63 - 1


def test_unit_has_exactly_major_and_minor() -> None:
    assert {u.name for u in Unit} == {"MAJOR", "MINOR"}


def test_json_number_is_a_str_holding_the_literal() -> None:
    number = JSONNumber("12.50")
    assert isinstance(number, str)
    assert type(number) is JSONNumber
    assert number == "12.50"
    assert str(number) == "12.50"


# --- parse_amount: accepted -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "exp", "expected"),
    [
        pytest.param("0", 2, 0, id="zero"),
        pytest.param("-0", 2, 0, id="minus-zero-is-zero"),
        pytest.param("0.00", 2, 0, id="zero-point-zero-zero"),
        pytest.param("-0.00", 2, 0, id="minus-zero-point-zero-zero"),
        pytest.param("12.5", 2, 1250, id="12.5-exp2"),
        pytest.param("12.50", 2, 1250, id="12.50-exp2"),
        pytest.param("12", 2, 1200, id="integer-exp2"),
        pytest.param("0.01", 2, 1, id="one-cent"),
        pytest.param("0.1", 2, 10, id="ten-cents"),
        pytest.param("-0.05", 2, -5, id="negative-cents"),
        pytest.param("-12.5", 2, -1250, id="negative"),
        pytest.param("5", 0, 5, id="exp0"),
        pytest.param("1.234", 3, 1234, id="exp3"),
        pytest.param("1.5", 4, 15000, id="exp4"),
        pytest.param("10", 1, 100, id="ten-exp1"),
        pytest.param("1000000", 2, 100000000, id="million"),
        pytest.param("9", 18, 9 * 10**18, id="nine-exp18"),
        pytest.param("0.000000000000000001", 18, 1, id="smallest-exp18"),
        pytest.param("9223372036854775807", 0, INT64_MAX, id="int64-max-exp0"),
        pytest.param("92233720368547758.07", 2, INT64_MAX, id="int64-max-exp2"),
        pytest.param("9.223372036854775807", 18, INT64_MAX, id="int64-max-exp18"),
        pytest.param("-9223372036854775808", 0, INT64_MIN, id="int64-min-exp0"),
        pytest.param("-92233720368547758.08", 2, INT64_MIN, id="int64-min-exp2"),
        pytest.param("-9.223372036854775808", 18, INT64_MIN, id="int64-min-exp18"),
    ],
)
def test_parse_amount_major(text: str, exp: int, expected: int) -> None:
    result = parse_amount(text, Unit.MAJOR, exp)
    assert type(result) is int
    assert result == expected


def test_parse_amount_accepts_a_json_number() -> None:
    assert parse_amount(JSONNumber("12.50"), Unit.MAJOR, 2) == 1250


@pytest.mark.parametrize(
    ("text", "exp", "expected"),
    [
        pytest.param("1250", 2, 1250, id="exp2-not-scaled"),
        pytest.param("1250", 0, 1250, id="exp0"),
        pytest.param("1250", 18, 1250, id="exp18-not-scaled"),
        pytest.param("0", 2, 0, id="zero"),
        pytest.param("-0", 2, 0, id="minus-zero"),
        pytest.param("-5", 2, -5, id="negative"),
        pytest.param("9223372036854775807", 2, INT64_MAX, id="int64-max"),
        pytest.param("-9223372036854775808", 2, INT64_MIN, id="int64-min"),
    ],
)
def test_parse_amount_minor(text: str, exp: int, expected: int) -> None:
    result = parse_amount(text, Unit.MINOR, exp)
    assert type(result) is int
    assert result == expected


# --- parse_amount: refused --------------------------------------------------------------

SYNTAX_ERRORS = [
    pytest.param("+1", id="plus-sign"),
    pytest.param("+0", id="plus-zero"),
    pytest.param("1e3", id="exponent"),
    pytest.param("1E3", id="exponent-upper"),
    pytest.param("1.5e2", id="fraction-exponent"),
    pytest.param("1e-2", id="negative-exponent"),
    pytest.param("0x1F", id="hex"),
    pytest.param("0x10", id="hex-digits-only"),
    pytest.param("0b1", id="binary"),
    pytest.param("01", id="leading-zero"),
    pytest.param("00", id="double-zero"),
    pytest.param("-01", id="negative-leading-zero"),
    pytest.param("00.5", id="leading-zero-fraction"),
    pytest.param("1,000", id="thousands-comma"),
    pytest.param("1,000.00", id="thousands-comma-fraction"),
    pytest.param("1_000", id="underscore-separator"),
    pytest.param("1 000", id="space-separator"),
    pytest.param("1'000", id="apostrophe-separator"),
    pytest.param("12,50", id="decimal-comma"),
    pytest.param(" 1", id="leading-space"),
    pytest.param("1 ", id="trailing-space"),
    pytest.param("1\n", id="trailing-newline"),
    pytest.param("\t1", id="leading-tab"),
    pytest.param("- 1", id="space-after-minus"),
    pytest.param("1\u00a0", id="trailing-nbsp"),
    pytest.param("١٢", id="arabic-indic-digits"),
    pytest.param("１２", id="fullwidth-digits"),
    pytest.param("12.٥", id="arabic-indic-fraction-digit"),
    pytest.param("²", id="superscript-two"),
    pytest.param("½", id="vulgar-fraction"),
    pytest.param(".5", id="leading-point"),
    pytest.param("5.", id="trailing-point"),
    pytest.param("-.5", id="negative-leading-point"),
    pytest.param("-5.", id="negative-trailing-point"),
    pytest.param(".", id="point-only"),
    pytest.param("", id="empty"),
    pytest.param("-", id="minus-only"),
    pytest.param("--1", id="double-minus"),
    pytest.param("-+1", id="minus-plus"),
    pytest.param("1-", id="trailing-minus"),
    pytest.param("1.2.3", id="two-points"),
    pytest.param("1..2", id="double-point"),
    pytest.param("NaN", id="nan"),
    pytest.param("Infinity", id="infinity"),
    pytest.param("-Infinity", id="negative-infinity"),
    pytest.param("inf", id="inf"),
    pytest.param("abc", id="letters"),
    pytest.param("12a", id="trailing-letter"),
    pytest.param("1/2", id="slash"),
    pytest.param("\x00", id="nul"),
    pytest.param("1\x00", id="trailing-nul"),
    pytest.param("$12", id="currency-symbol"),
    pytest.param("12 USD", id="currency-code"),
]


@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
@pytest.mark.parametrize("text", SYNTAX_ERRORS)
def test_parse_amount_refuses_syntax(text: str, unit: Unit) -> None:
    with pytest.raises(AmountSyntax):
        parse_amount(text, unit, 2)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(None, id="none"),
        pytest.param(12, id="int"),
        pytest.param(12.5, id="float"),
        pytest.param(True, id="bool"),
        pytest.param(b"12", id="bytes"),
        pytest.param(Decimal("12.5"), id="decimal"),
        pytest.param(["12"], id="list"),
        pytest.param({"amount": "12"}, id="dict"),
    ],
)
@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_parse_amount_refuses_non_str(text: object, unit: Unit) -> None:
    with pytest.raises(AmountType):
        parse_amount(text, unit, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "exp"),
    [
        pytest.param("12.505", 2, id="three-digits-exp2"),
        pytest.param("0.001", 2, id="sub-cent"),
        pytest.param("1.0", 0, id="any-fraction-at-exp0"),
        pytest.param("5.00", 0, id="zero-fraction-at-exp0"),
        pytest.param("1.2345", 3, id="four-digits-exp3"),
        pytest.param("12.500", 2, id="trailing-zeros-count"),
        pytest.param("0.0000000000000000001", 18, id="nineteen-digits-exp18"),
        pytest.param("-0.001", 2, id="negative"),
    ],
)
def test_parse_amount_major_refuses_too_many_fraction_digits(text: str, exp: int) -> None:
    with pytest.raises(FractionDigits):
        parse_amount(text, Unit.MAJOR, exp)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("12.0", id="point-zero"),
        pytest.param("12.5", id="point-five"),
        pytest.param("0.00", id="zero-with-fraction"),
        pytest.param("-1.0", id="negative"),
    ],
)
@pytest.mark.parametrize("exp", [0, 2, 18])
def test_parse_amount_minor_refuses_any_fraction(text: str, exp: int) -> None:
    with pytest.raises(FractionDigits):
        parse_amount(text, Unit.MINOR, exp)


@pytest.mark.parametrize(
    ("text", "unit", "exp"),
    [
        pytest.param("9223372036854775808", Unit.MAJOR, 0, id="int64-max-plus-1-exp0"),
        pytest.param("92233720368547758.08", Unit.MAJOR, 2, id="int64-max-plus-1-exp2"),
        pytest.param("9.223372036854775808", Unit.MAJOR, 18, id="int64-max-plus-1-exp18"),
        pytest.param("-9223372036854775809", Unit.MAJOR, 0, id="int64-min-minus-1-exp0"),
        pytest.param("-92233720368547758.09", Unit.MAJOR, 2, id="int64-min-minus-1-exp2"),
        pytest.param("-9.223372036854775809", Unit.MAJOR, 18, id="int64-min-minus-1-exp18"),
        pytest.param("10", Unit.MAJOR, 18, id="ten-exp18"),
        pytest.param("100000000000000000", Unit.MAJOR, 2, id="1e17-exp2"),
        pytest.param("99999999999999999999", Unit.MAJOR, 0, id="twenty-digits"),
        pytest.param("1" + "0" * 40, Unit.MAJOR, 2, id="forty-one-digits"),
        pytest.param("-" + "9" * 30, Unit.MAJOR, 2, id="negative-thirty-digits"),
        pytest.param("9223372036854775808", Unit.MINOR, 2, id="minor-int64-max-plus-1"),
        pytest.param("-9223372036854775809", Unit.MINOR, 2, id="minor-int64-min-minus-1"),
        pytest.param("9" * 25, Unit.MINOR, 2, id="minor-25-digits"),
    ],
)
def test_parse_amount_refuses_out_of_int64(text: str, unit: Unit, exp: int) -> None:
    with pytest.raises(AmountOverflow):
        parse_amount(text, unit, exp)


# --- parse_amount: check order ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "unit", "exp", "expected"),
    [
        # syntax before fraction digits
        pytest.param("1.234x", Unit.MAJOR, 2, AmountSyntax, id="syntax-before-fraction"),
        pytest.param("1.2345e2", Unit.MAJOR, 2, AmountSyntax, id="exponent-before-fraction"),
        pytest.param("12.0x", Unit.MINOR, 2, AmountSyntax, id="minor-syntax-before-fraction"),
        # syntax before range
        pytest.param("9" * 25 + "x", Unit.MAJOR, 2, AmountSyntax, id="syntax-before-range"),
        pytest.param("0" + "9" * 25, Unit.MAJOR, 2, AmountSyntax, id="leading-zero-before-range"),
        # fraction digits before range
        pytest.param("1" * 25 + ".12345", Unit.MAJOR, 2, FractionDigits, id="fraction-first"),
        pytest.param("9" * 25 + ".0", Unit.MINOR, 2, FractionDigits, id="minor-fraction-first"),
        pytest.param("-" + "9" * 25 + ".123", Unit.MAJOR, 2, FractionDigits, id="negative"),
    ],
)
def test_parse_amount_check_order(
    text: str, unit: Unit, exp: int, expected: type[Exception]
) -> None:
    with pytest.raises(expected):
        parse_amount(text, unit, exp)


def test_parse_amount_syntax_is_not_fraction_digits() -> None:
    # Guard the order test: "1.234x" must not be reported as the (also true) fraction problem.
    with pytest.raises(NotAssessable) as info:
        parse_amount("1.234x", Unit.MAJOR, 2)
    assert type(info.value) is AmountSyntax


def test_parse_amount_fraction_digits_is_not_overflow() -> None:
    with pytest.raises(NotAssessable) as info:
        parse_amount("1" * 25 + ".12345", Unit.MAJOR, 2)
    assert type(info.value) is FractionDigits


# --- exponent out of range, in every function -------------------------------------------

BAD_EXPS = [
    pytest.param(-1, id="minus-1"),
    pytest.param(19, id="19"),
    pytest.param(100, id="100"),
    pytest.param(True, id="True"),
    pytest.param("2", id="str-2"),
    pytest.param(None, id="None"),
]


@pytest.mark.parametrize("exp", BAD_EXPS)
@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_parse_amount_refuses_bad_exponent(exp: object, unit: Unit) -> None:
    with pytest.raises(ExponentError):
        parse_amount("12", unit, exp)  # type: ignore[arg-type]


@pytest.mark.parametrize("exp", BAD_EXPS)
@pytest.mark.parametrize("value", [JSONNumber("12"), "12"], ids=["json-number", "str"])
@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_assess_refuses_bad_exponent(exp: object, value: str, unit: Unit) -> None:
    with pytest.raises(ExponentError):
        assess(value, unit, exp)  # type: ignore[arg-type]


@pytest.mark.parametrize("exp", BAD_EXPS)
@pytest.mark.parametrize("grouping", [False, True], ids=["plain", "grouping"])
def test_format_amount_refuses_bad_exponent(exp: object, grouping: bool) -> None:
    with pytest.raises(ExponentError):
        format_amount(1250, exp, grouping=grouping)  # type: ignore[arg-type]


@pytest.mark.parametrize("exp", [0, MAX_EXPONENT], ids=["0", "18"])
def test_exponent_bounds_are_inclusive(exp: int) -> None:
    assert parse_amount("1", Unit.MAJOR, exp) == 10**exp
    assert assess("1", Unit.MAJOR, exp) == 10**exp
    assert format_amount(10**exp, exp) == "1" + ("." + "0" * exp if exp else "")


# --- assess -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "unit", "exp", "expected"),
    [
        pytest.param(JSONNumber("12.50"), Unit.MAJOR, 2, 1250, id="number-major"),
        pytest.param("12.50", Unit.MAJOR, 2, 1250, id="str-major"),
        pytest.param(JSONNumber("12.5"), Unit.MAJOR, 2, 1250, id="number-one-digit"),
        pytest.param(JSONNumber("12"), Unit.MAJOR, 2, 1200, id="number-integer-major"),
        pytest.param(JSONNumber("1250"), Unit.MINOR, 2, 1250, id="number-minor"),
        pytest.param("1250", Unit.MINOR, 2, 1250, id="str-minor"),
        pytest.param(JSONNumber("0"), Unit.MAJOR, 2, 0, id="number-zero"),
        pytest.param("0.00", Unit.MAJOR, 2, 0, id="str-zero"),
        pytest.param(JSONNumber("5"), Unit.MAJOR, 0, 5, id="exp0"),
        pytest.param(JSONNumber("1.234"), Unit.MAJOR, 3, 1234, id="exp3"),
        pytest.param("9223372036854775807", Unit.MINOR, 2, INT64_MAX, id="int64-max-minor"),
        pytest.param("92233720368547758.07", Unit.MAJOR, 2, INT64_MAX, id="int64-max-major"),
    ],
)
def test_assess_accepts(value: object, unit: Unit, exp: int, expected: int) -> None:
    result = assess(value, unit, exp)
    assert type(result) is int
    assert result == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param(True, id="true"),
        pytest.param(False, id="false"),
        pytest.param(12, id="int"),
        pytest.param(0, id="int-zero"),
        pytest.param(12.5, id="float"),
        pytest.param(Decimal("12.50"), id="decimal"),
        pytest.param({}, id="empty-dict"),
        pytest.param({"amount": JSONNumber("12")}, id="dict"),
        pytest.param([], id="empty-list"),
        pytest.param([JSONNumber("12")], id="list"),
        pytest.param(b"12", id="bytes"),
        pytest.param(bytearray(b"12"), id="bytearray"),
    ],
)
@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_assess_refuses_non_json_number_or_string(value: object, unit: Unit) -> None:
    with pytest.raises(AmountType):
        assess(value, unit, 2)


@pytest.mark.parametrize("text", SYNTAX_ERRORS)
@pytest.mark.parametrize("wrap", [JSONNumber, str], ids=["json-number", "str"])
def test_assess_refuses_syntax(text: str, wrap: type[str]) -> None:
    with pytest.raises(AmountSyntax):
        assess(wrap(text), Unit.MAJOR, 2)


@pytest.mark.parametrize(
    "literal",
    [
        pytest.param("1e3", id="1e3"),
        pytest.param("1E3", id="1E3"),
        pytest.param("1.5e2", id="1.5e2"),
        pytest.param("1e-2", id="1e-2"),
        pytest.param("-1e3", id="negative-exponent-form"),
    ],
)
@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_assess_refuses_json_number_with_exponent(literal: str, unit: Unit) -> None:
    with pytest.raises(AmountSyntax):
        assess(JSONNumber(literal), unit, 2)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("-0", id="str-minus-zero"),
        pytest.param("-0.00", id="str-minus-zero-point-zero-zero"),
        pytest.param(JSONNumber("-0"), id="number-minus-zero"),
        pytest.param(JSONNumber("-0.0"), id="number-minus-zero-point-zero"),
        pytest.param("-1", id="str-minus-one"),
        pytest.param(JSONNumber("-12.50"), id="number-negative"),
        pytest.param(JSONNumber("-9223372036854775808"), id="int64-min"),
    ],
)
@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_assess_refuses_negative(value: str, unit: Unit) -> None:
    # Sign comes before fraction digits, so "-0.00" in minor units is negative, too.
    with pytest.raises(NegativeAmount):
        assess(value, unit, 2)


@pytest.mark.parametrize(
    ("value", "unit", "exp", "expected"),
    [
        # type first
        pytest.param(None, Unit.MAJOR, 2, AmountType, id="type"),
        # syntax before sign
        pytest.param("-1.2x", Unit.MAJOR, 2, AmountSyntax, id="syntax-before-sign"),
        pytest.param(JSONNumber("-1e3"), Unit.MAJOR, 2, AmountSyntax, id="exponent-before-sign"),
        pytest.param("-01", Unit.MAJOR, 2, AmountSyntax, id="leading-zero-before-sign"),
        # sign before fraction digits
        pytest.param("-1.234", Unit.MAJOR, 2, NegativeAmount, id="sign-before-fraction"),
        pytest.param(JSONNumber("-1.234"), Unit.MAJOR, 2, NegativeAmount, id="number-sign"),
        pytest.param("-12.0", Unit.MINOR, 2, NegativeAmount, id="minor-sign-before-fraction"),
        pytest.param("-0.000", Unit.MAJOR, 2, NegativeAmount, id="minus-zero-long-fraction"),
        # sign before range
        pytest.param("-" + "9" * 25, Unit.MAJOR, 2, NegativeAmount, id="sign-before-range"),
        pytest.param(
            "-" + "9" * 25 + ".123", Unit.MAJOR, 2, NegativeAmount, id="sign-before-everything"
        ),
        # fraction digits before range
        pytest.param("9" * 25 + ".123", Unit.MAJOR, 2, FractionDigits, id="fraction-first"),
        pytest.param("1.234", Unit.MAJOR, 2, FractionDigits, id="fraction"),
        pytest.param(JSONNumber("12.0"), Unit.MINOR, 2, FractionDigits, id="minor-fraction"),
        # range last
        pytest.param("9223372036854775808", Unit.MINOR, 2, AmountOverflow, id="range-minor"),
        pytest.param("92233720368547758.08", Unit.MAJOR, 2, AmountOverflow, id="range-major"),
        pytest.param(JSONNumber("1" + "0" * 30), Unit.MAJOR, 0, AmountOverflow, id="range-big"),
    ],
)
def test_assess_check_order(value: object, unit: Unit, exp: int, expected: type[Exception]) -> None:
    with pytest.raises(NotAssessable) as info:
        assess(value, unit, exp)
    assert type(info.value) is expected


def test_assess_str_and_json_number_agree() -> None:
    assert assess("12.50", Unit.MAJOR, 2) == assess(JSONNumber("12.50"), Unit.MAJOR, 2) == 1250


def test_amount_errors_are_not_assessable() -> None:
    for cls in (AmountSyntax, FractionDigits, AmountOverflow, NegativeAmount, AmountType):
        assert issubclass(cls, NotAssessable)


# --- huge inputs ------------------------------------------------------------------------


@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_million_digits_is_overflow(unit: Unit) -> None:
    with pytest.raises(AmountOverflow):
        parse_amount("1" * MILLION, unit, 2)


@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_million_digits_then_a_letter_is_syntax(unit: Unit) -> None:
    with pytest.raises(AmountSyntax):
        parse_amount("1" * MILLION + "x", unit, 2)


def test_million_digits_with_a_letter_in_the_middle_is_syntax() -> None:
    with pytest.raises(AmountSyntax):
        parse_amount("1" * (MILLION // 2) + "x" + "1" * (MILLION // 2), Unit.MAJOR, 2)


@pytest.mark.parametrize("unit", [Unit.MAJOR, Unit.MINOR], ids=["major", "minor"])
def test_million_fraction_digits_is_fraction_digits(unit: Unit) -> None:
    with pytest.raises(FractionDigits):
        parse_amount("0." + "1" * MILLION, unit, 2)


def test_million_zeros_is_syntax() -> None:
    with pytest.raises(AmountSyntax):
        parse_amount("0" * MILLION, Unit.MAJOR, 2)


def test_million_character_non_ascii_is_syntax() -> None:
    with pytest.raises(AmountSyntax):
        parse_amount("1" * MILLION + "٢", Unit.MAJOR, 2)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(JSONNumber("1" * MILLION), AmountOverflow, id="number-digits"),
        pytest.param("1" * MILLION, AmountOverflow, id="str-digits"),
        pytest.param("1" * MILLION + "x", AmountSyntax, id="digits-then-letter"),
        pytest.param(JSONNumber("-" + "1" * MILLION), NegativeAmount, id="negative"),
        pytest.param(JSONNumber("0." + "1" * MILLION), FractionDigits, id="fraction"),
    ],
)
def test_assess_million_characters(value: str, expected: type[Exception]) -> None:
    with pytest.raises(NotAssessable) as info:
        assess(value, Unit.MAJOR, 2)
    assert type(info.value) is expected


# --- add --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        pytest.param(1, 2, 3, id="small"),
        pytest.param(-5, 3, -2, id="mixed-sign"),
        pytest.param(0, 0, 0, id="zeros"),
        pytest.param(INT64_MAX, 0, INT64_MAX, id="max-plus-zero"),
        pytest.param(INT64_MAX - 1, 1, INT64_MAX, id="reaches-max"),
        pytest.param(INT64_MIN, 0, INT64_MIN, id="min-plus-zero"),
        pytest.param(INT64_MIN + 1, -1, INT64_MIN, id="reaches-min"),
        pytest.param(INT64_MAX, INT64_MIN, -1, id="max-plus-min"),
        pytest.param(INT64_MAX, -INT64_MAX, 0, id="cancel"),
    ],
)
def test_add(a: int, b: int, expected: int) -> None:
    assert add(a, b) == expected
    assert add(b, a) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param(INT64_MAX, 1, id="max-plus-one"),
        pytest.param(1, INT64_MAX, id="one-plus-max"),
        pytest.param(INT64_MAX, INT64_MAX, id="max-plus-max"),
        pytest.param(INT64_MIN, -1, id="min-minus-one"),
        pytest.param(-1, INT64_MIN, id="minus-one-plus-min"),
        pytest.param(INT64_MIN, INT64_MIN, id="min-plus-min"),
    ],
)
def test_add_refuses_overflow(a: int, b: int) -> None:
    with pytest.raises(AmountOverflow):
        add(a, b)


@given(a=int64s, b=int64s)
def test_add_matches_integer_sum_or_overflows(a: int, b: int) -> None:
    if INT64_MIN <= a + b <= INT64_MAX:
        assert add(a, b) == a + b
    else:
        with pytest.raises(AmountOverflow):
            add(a, b)


# --- format_amount ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("minor", "exp", "grouping", "expected"),
    [
        pytest.param(1250, 2, False, "12.50", id="spec-12.50"),
        pytest.param(5, 0, False, "5", id="spec-exp0"),
        pytest.param(-5, 2, False, "-0.05", id="spec-negative"),
        pytest.param(125000, 2, True, "1,250.00", id="spec-grouping"),
        pytest.param(0, 2, False, "0.00", id="zero-exp2"),
        pytest.param(0, 0, False, "0", id="zero-exp0"),
        pytest.param(0, 2, True, "0.00", id="zero-grouping"),
        pytest.param(1, 2, False, "0.01", id="one-cent"),
        pytest.param(100, 2, False, "1.00", id="trailing-zeros-kept"),
        pytest.param(-1, 0, False, "-1", id="negative-exp0"),
        pytest.param(1, 18, False, "0.000000000000000001", id="exp18"),
        pytest.param(1234, 3, False, "1.234", id="exp3"),
        pytest.param(15000, 4, False, "1.5000", id="exp4"),
        pytest.param(INT64_MAX, 0, False, "9223372036854775807", id="int64-max-exp0"),
        pytest.param(INT64_MIN, 0, False, "-9223372036854775808", id="int64-min-exp0"),
        pytest.param(INT64_MAX, 2, False, "92233720368547758.07", id="int64-max-exp2"),
        pytest.param(INT64_MAX, 18, False, "9.223372036854775807", id="int64-max-exp18"),
        pytest.param(INT64_MIN, 18, False, "-9.223372036854775808", id="int64-min-exp18"),
        pytest.param(-125000, 2, True, "-1,250.00", id="negative-grouping"),
        pytest.param(-5, 2, True, "-0.05", id="negative-small-grouping"),
        pytest.param(-123456789, 0, True, "-123,456,789", id="negative-grouping-exp0"),
        pytest.param(1000000, 0, True, "1,000,000", id="million-grouping"),
        pytest.param(999, 0, True, "999", id="no-group-needed"),
        pytest.param(1234567, 3, True, "1,234.567", id="grouping-not-in-fraction"),
        pytest.param(123456789012, 4, True, "12,345,678.9012", id="grouping-exp4"),
        pytest.param(INT64_MAX, 0, True, "9,223,372,036,854,775,807", id="int64-max-grouping"),
    ],
)
def test_format_amount(minor: int, exp: int, grouping: bool, expected: str) -> None:
    assert format_amount(minor, exp, grouping=grouping) == expected


def test_format_amount_grouping_defaults_to_false() -> None:
    assert format_amount(125000, 2) == "1250.00"


@given(n=int64s, e=exps)
def test_format_amount_has_exactly_exp_fraction_digits(n: int, e: int) -> None:
    text = format_amount(n, e)
    if e == 0:
        assert "." not in text
    else:
        _integer, point, fraction = text.partition(".")
        assert point == "."
        assert len(fraction) == e
        assert fraction.isascii()
        assert fraction.isdigit()


@given(n=int64s, e=exps)
def test_format_then_parse_round_trips(n: int, e: int) -> None:
    assert parse_amount(format_amount(n, e), Unit.MAJOR, e) == n


@given(n=st.integers(min_value=0, max_value=INT64_MAX), e=exps)
def test_format_then_assess_round_trips_non_negative(n: int, e: int) -> None:
    text = format_amount(n, e)
    assert assess(text, Unit.MAJOR, e) == n
    assert assess(JSONNumber(text), Unit.MAJOR, e) == n


@given(n=int64s, e=exps)
def test_grouping_only_adds_commas(n: int, e: int) -> None:
    grouped = format_amount(n, e, grouping=True)
    assert grouped.replace(",", "") == format_amount(n, e, grouping=False)
    integer = grouped.lstrip("-").partition(".")[0]
    groups = integer.split(",")
    assert 1 <= len(groups[0]) <= 3
    assert all(len(group) == 3 for group in groups[1:])


@given(n=int64s, e=exps)
def test_minor_parse_of_an_integer_is_the_integer(n: int, e: int) -> None:
    assert parse_amount(str(n), Unit.MINOR, e) == n
