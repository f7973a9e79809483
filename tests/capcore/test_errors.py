"""The error hierarchy, and that no error carries the text it refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import capcore
from capcore import (
    AmountOverflow,
    AmountSyntax,
    AmountType,
    ArgAbsent,
    ArgsNotStrict,
    CapcoreError,
    CurrencyMismatch,
    ExponentError,
    FractionDigits,
    JSONNumber,
    NegativeAmount,
    NotAssessable,
    RuleError,
    Unit,
    UnknownCurrency,
    assess,
    exponent,
    format_amount,
    lookup,
    parse_amount,
    parse_arguments,
    resolve_exponent,
    strict_loads,
)
from capcore import strictjson as sj
from tests.capcore.conftest import assert_no_leak

TOKEN = "ZQXJ-SECRET-7731"
# For inputs that must be all digits to reach the check under test.
DIGITS = "7731904465"
# For inputs that must be three upper-case letters (not an ISO 4217 code).
CODE = "QZJ"

# --- hierarchy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "parent"),
    [
        pytest.param(CapcoreError, Exception, id="CapcoreError"),
        pytest.param(NotAssessable, CapcoreError, id="NotAssessable"),
        pytest.param(AmountSyntax, NotAssessable, id="AmountSyntax"),
        pytest.param(FractionDigits, NotAssessable, id="FractionDigits"),
        pytest.param(AmountOverflow, NotAssessable, id="AmountOverflow"),
        pytest.param(NegativeAmount, NotAssessable, id="NegativeAmount"),
        pytest.param(AmountType, NotAssessable, id="AmountType"),
        pytest.param(ArgsNotStrict, NotAssessable, id="ArgsNotStrict"),
        pytest.param(ArgAbsent, NotAssessable, id="ArgAbsent"),
        pytest.param(CurrencyMismatch, NotAssessable, id="CurrencyMismatch"),
        pytest.param(UnknownCurrency, CapcoreError, id="UnknownCurrency"),
        pytest.param(ExponentError, CapcoreError, id="ExponentError"),
        pytest.param(RuleError, CapcoreError, id="RuleError"),
    ],
)
def test_hierarchy(cls: type[Exception], parent: type[Exception]) -> None:
    assert cls.__bases__ == (parent,)
    assert getattr(capcore, cls.__name__) is cls


@pytest.mark.parametrize("cls", [UnknownCurrency, ExponentError, RuleError])
def test_configuration_errors_are_not_assessability_errors(cls: type[Exception]) -> None:
    assert not issubclass(cls, NotAssessable)


def test_amount_errors_are_not_each_other() -> None:
    leaves = [
        AmountSyntax,
        FractionDigits,
        AmountOverflow,
        NegativeAmount,
        AmountType,
        ArgsNotStrict,
        ArgAbsent,
        CurrencyMismatch,
        UnknownCurrency,
        ExponentError,
        RuleError,
    ]
    for a in leaves:
        for b in leaves:
            assert issubclass(a, b) == (a is b)


def test_args_not_strict_names_its_category() -> None:
    error = ArgsNotStrict(sj.DUPLICATE_NAME)
    assert error.category == sj.DUPLICATE_NAME
    assert error.args == (sj.DUPLICATE_NAME,)
    assert str(error) == sj.DUPLICATE_NAME


def test_rule_error_with_line() -> None:
    error = RuleError(27, "'max' or 'sum'", 3)
    assert (error.line, error.column, error.expected) == (3, 27, "'max' or 'sum'")
    assert str(error) == "line 3, column 27: expected 'max' or 'sum'"


def test_rule_error_without_line() -> None:
    error = RuleError(27, "'max' or 'sum'")
    assert error.line is None
    assert error.column == 27
    assert str(error) == "column 27: expected 'max' or 'sum'"


def test_rule_error_line_can_be_set_later() -> None:
    error = RuleError(5, "a currency code")
    error.line = 12
    assert str(error) == "line 12, column 5: expected a currency code"


# --- assert_no_leak itself --------------------------------------------------------------


def test_no_leak_helper_passes_a_clean_error() -> None:
    assert_no_leak(AmountSyntax("not a plain decimal"), TOKEN)


def _leaky_cause() -> BaseException:
    try:
        try:
            raise ValueError(f"bad input {TOKEN!r}")
        except ValueError as inner:
            raise AmountSyntax("not a plain decimal") from inner
    except AmountSyntax as outer:
        return outer
    raise AssertionError("unreachable")


def _leaky_hidden_context() -> BaseException:
    try:
        try:
            table: dict[str, int] = {}
            table[TOKEN]
        except KeyError:
            raise UnknownCurrency("unknown") from None
    except UnknownCurrency as outer:
        return outer
    raise AssertionError("unreachable")


def _leaky_deep_chain() -> BaseException:
    try:
        try:
            try:
                raise UnicodeDecodeError("utf-8", TOKEN.encode(), 0, 1, "invalid")
            except UnicodeDecodeError:
                raise RuntimeError("middle") from None
        except RuntimeError as middle:
            raise ArgsNotStrict(sj.INVALID_UTF8) from middle
    except ArgsNotStrict as outer:
        return outer
    raise AssertionError("unreachable")


def _cyclic() -> BaseException:
    a = AmountSyntax("a")
    b = AmountSyntax("b")
    a.__context__ = b
    b.__context__ = a
    return a


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: AmountSyntax(TOKEN), id="in-args"),
        pytest.param(lambda: AmountSyntax("x", [TOKEN]), id="nested-in-args"),
        pytest.param(lambda: AmountSyntax(f"bad: {TOKEN}"), id="in-message"),
        pytest.param(_leaky_cause, id="in-cause"),
        pytest.param(_leaky_hidden_context, id="in-suppressed-context"),
        pytest.param(_leaky_deep_chain, id="two-links-down"),
    ],
)
def test_no_leak_helper_catches_leaks(make: Callable[[], BaseException]) -> None:
    with pytest.raises(AssertionError):
        assert_no_leak(make(), TOKEN)


def test_no_leak_helper_survives_cycles() -> None:
    assert_no_leak(_cyclic(), TOKEN)


# --- no error carries the input text ----------------------------------------------------


def raised_by(call: Callable[[], object], expected: type[BaseException]) -> BaseException:
    with pytest.raises(expected) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        pytest.param(TOKEN, Unit.MAJOR, AmountSyntax, id="syntax-token"),
        pytest.param("12.5" + TOKEN, Unit.MAJOR, AmountSyntax, id="syntax-after-digits"),
        pytest.param("1" * 10_000 + TOKEN, Unit.MAJOR, AmountSyntax, id="syntax-long"),
        pytest.param(f"١٢{TOKEN}", Unit.MAJOR, AmountSyntax, id="syntax-non-ascii"),
        pytest.param(f"0.{DIGITS}", Unit.MAJOR, FractionDigits, id="fraction-digits"),
        pytest.param(f"{DIGITS}.5", Unit.MINOR, FractionDigits, id="minor-fraction"),
        pytest.param(DIGITS * 3, Unit.MAJOR, AmountOverflow, id="overflow"),
        pytest.param("-" + DIGITS * 3, Unit.MINOR, AmountOverflow, id="negative-overflow"),
    ],
)
def test_parse_amount_does_not_leak(text: str, unit: Unit, expected: type[Exception]) -> None:
    token = DIGITS if expected in (FractionDigits, AmountOverflow) else TOKEN
    assert token in text
    assert_no_leak(raised_by(lambda: parse_amount(text, unit, 2), expected), token)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({TOKEN: 1}, id="dict"),
        pytest.param([TOKEN], id="list"),
        pytest.param(TOKEN.encode(), id="bytes"),
    ],
)
def test_amount_type_does_not_leak(value: object) -> None:
    assert_no_leak(raised_by(lambda: parse_amount(value, Unit.MAJOR, 2), AmountType), TOKEN)  # type: ignore[arg-type]
    assert_no_leak(raised_by(lambda: assess(value, Unit.MAJOR, 2), AmountType), TOKEN)


@pytest.mark.parametrize(
    ("value", "token", "expected"),
    [
        pytest.param(TOKEN, TOKEN, AmountSyntax, id="syntax-str"),
        pytest.param(JSONNumber(TOKEN), TOKEN, AmountSyntax, id="syntax-number"),
        pytest.param(JSONNumber(f"{DIGITS}e3"), DIGITS, AmountSyntax, id="exponent-form"),
        pytest.param("-" + DIGITS, DIGITS, NegativeAmount, id="negative"),
        pytest.param(JSONNumber("-" + DIGITS), DIGITS, NegativeAmount, id="negative-number"),
        pytest.param(f"0.{DIGITS}", DIGITS, FractionDigits, id="fraction-digits"),
        pytest.param(JSONNumber(DIGITS * 3), DIGITS, AmountOverflow, id="overflow"),
    ],
)
def test_assess_does_not_leak(value: object, token: str, expected: type[Exception]) -> None:
    assert_no_leak(raised_by(lambda: assess(value, Unit.MAJOR, 2), expected), token)


def test_exponent_errors_do_not_leak_the_exponent() -> None:
    bad = TOKEN
    assert_no_leak(raised_by(lambda: parse_amount("1", Unit.MAJOR, bad), ExponentError), TOKEN)  # type: ignore[arg-type]
    assert_no_leak(raised_by(lambda: assess("1", Unit.MAJOR, bad), ExponentError), TOKEN)  # type: ignore[arg-type]
    assert_no_leak(raised_by(lambda: format_amount(1, bad), ExponentError), TOKEN)  # type: ignore[arg-type]
    assert_no_leak(raised_by(lambda: resolve_exponent("XAU", bad), ExponentError), TOKEN)  # type: ignore[arg-type]
    big = int(DIGITS)
    assert_no_leak(raised_by(lambda: parse_amount("1", Unit.MAJOR, big), ExponentError), DIGITS)
    assert_no_leak(raised_by(lambda: resolve_exponent("XAU", big), ExponentError), DIGITS)


@pytest.mark.parametrize(
    ("call", "token"),
    [
        pytest.param(lambda: exponent(TOKEN), TOKEN, id="malformed"),
        pytest.param(lambda: exponent(CODE), CODE, id="unknown-code"),
        pytest.param(lambda: exponent(CODE.lower()), CODE.lower(), id="lower-case"),
        pytest.param(lambda: resolve_exponent(TOKEN, 2), TOKEN, id="resolve-malformed"),
        pytest.param(lambda: resolve_exponent(CODE, 2), CODE, id="resolve-unknown"),
        pytest.param(lambda: resolve_exponent(CODE, None), CODE, id="resolve-unknown-no-override"),
    ],
)
def test_unknown_currency_does_not_leak(call: Callable[[], object], token: str) -> None:
    assert_no_leak(raised_by(call, UnknownCurrency), token)


def test_unknown_currency_for_a_code_without_minor_unit_does_not_leak() -> None:
    assert_no_leak(raised_by(lambda: exponent("XAU"), UnknownCurrency), "XAU")
    assert_no_leak(raised_by(lambda: resolve_exponent("XAU", None), UnknownCurrency), "XAU")


STRICT_LEAK_CASES = [
    pytest.param(TOKEN, sj.NOT_JSON, id="bare-token"),
    pytest.param('{"a": ' + TOKEN + "}", sj.NOT_JSON, id="json-decode-error"),
    pytest.param('{"' + TOKEN + '": 1,}', sj.NOT_JSON, id="json-decode-error-in-name"),
    pytest.param('"' + TOKEN, sj.NOT_JSON, id="unterminated-string"),
    pytest.param("{} " + TOKEN, sj.TRAILING_DATA, id="trailing"),
    pytest.param(f'{{"{TOKEN}": 1, "{TOKEN}": 2}}', sj.DUPLICATE_NAME, id="duplicate-name"),
    pytest.param(
        f'{{"x": {{"{TOKEN}": 1, "{TOKEN}": 2}}}}', sj.DUPLICATE_NAME, id="nested-duplicate"
    ),
    pytest.param(
        f'{{"{TOKEN.lower()}": 1, "{TOKEN}": 2}}', sj.CASE_VARIANT_NAMES, id="case-variant"
    ),
    pytest.param(f'{{"{TOKEN}": "\\ud800"}}', sj.LONE_SURROGATE, id="escaped-surrogate"),
    pytest.param(f'{{"{TOKEN}\\udc00": 1}}', sj.LONE_SURROGATE, id="escaped-surrogate-name"),
    pytest.param(f'{{"{TOKEN}": NaN}}', sj.NON_FINITE_NUMBER, id="nan"),
    pytest.param("[" * 65 + f'"{TOKEN}"' + "]" * 65, sj.TOO_DEEP, id="too-deep"),
    pytest.param("[" * 100_000 + f'"{TOKEN}"' + "]" * 100_000, sj.TOO_DEEP, id="recursion-error"),
    pytest.param("\ufeff" + f'{{"{TOKEN}": 1}}', sj.BYTE_ORDER_MARK, id="bom"),
]


@pytest.mark.parametrize("in_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize(("doc", "category"), STRICT_LEAK_CASES)
def test_strict_loads_does_not_leak(doc: str, category: str, in_bytes: bool) -> None:
    data: bytes | str = doc.encode("utf-8") if in_bytes else doc
    error = raised_by(lambda: strict_loads(data), ArgsNotStrict)
    assert isinstance(error, ArgsNotStrict)
    assert error.category == category
    assert_no_leak(error, TOKEN)


@pytest.mark.parametrize(
    ("data", "category"),
    [
        pytest.param(f'{{"{TOKEN}": "\ud800"}}', sj.LONE_SURROGATE, id="raw-surrogate"),
        pytest.param(f'{{"{TOKEN}": 1}}'.encode() + b"\xff", sj.INVALID_UTF8, id="utf8-after"),
        pytest.param(b"\xff" + TOKEN.encode(), sj.INVALID_UTF8, id="utf8-before"),
        pytest.param(f'{{"{TOKEN}": "'.encode() + b'\xc3"}', sj.INVALID_UTF8, id="utf8-truncated"),
        pytest.param(bytearray(TOKEN.encode()), sj.NOT_BYTES_OR_STR, id="bytearray"),
        pytest.param([TOKEN], sj.NOT_BYTES_OR_STR, id="list"),
    ],
)
def test_strict_loads_special_inputs_do_not_leak(data: object, category: str) -> None:
    error = raised_by(lambda: strict_loads(data), ArgsNotStrict)  # type: ignore[arg-type]
    assert isinstance(error, ArgsNotStrict)
    assert error.category == category
    assert_no_leak(error, TOKEN)


@pytest.mark.parametrize("in_bytes", [False, True], ids=["str", "bytes"])
def test_parse_arguments_not_an_object_does_not_leak(in_bytes: bool) -> None:
    doc = f'["{TOKEN}"]'
    data: bytes | str = doc.encode() if in_bytes else doc
    error = raised_by(lambda: parse_arguments(data), ArgsNotStrict)
    assert_no_leak(error, TOKEN)


@pytest.mark.parametrize(
    ("args", "path"),
    [
        pytest.param('{"a": 1}', [TOKEN], id="missing-member"),
        pytest.param(b'{"a": 1}', [TOKEN], id="missing-member-bytes"),
        pytest.param({"a": JSONNumber("1")}, [TOKEN], id="missing-member-dict"),
        pytest.param(f'{{"a": "{TOKEN}"}}', ["a", TOKEN], id="through-string"),
        pytest.param(f'{{"a": ["{TOKEN}"]}}', ["a", "0"], id="through-list"),
        pytest.param(f'{{"{TOKEN.lower()}": 1}}', [TOKEN], id="case-differs"),
        pytest.param(f'{{"{TOKEN}": 1}}', [], id="empty-path"),
        pytest.param(f'{{"{TOKEN}": 1}}', [""], id="empty-name"),
    ],
)
def test_lookup_absent_does_not_leak(
    args: bytes | str | dict[str, object], path: list[str]
) -> None:
    assert_no_leak(raised_by(lambda: lookup(args, path), ArgAbsent), TOKEN)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(f'{{"a": 1, "{TOKEN}": NaN}}', id="str"),
        pytest.param(f'{{"a": 1, "{TOKEN}": 1, "{TOKEN}": 2}}'.encode(), id="bytes"),
        pytest.param(f'{{"a": 1, "b": "{TOKEN}"}}'.encode() + b"\xff", id="invalid-utf8"),
    ],
)
def test_lookup_not_strict_does_not_leak(args: bytes | str) -> None:
    assert_no_leak(raised_by(lambda: lookup(args, ["a"]), ArgsNotStrict), TOKEN)


def test_lookup_type_error_does_not_leak_the_path() -> None:
    assert_no_leak(raised_by(lambda: lookup('{"a": 1}', TOKEN), TypeError), TOKEN)
