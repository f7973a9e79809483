"""The ISO 4217 exponent table: ``exponent``, ``exponents``, ``resolve_exponent``."""

from __future__ import annotations

import iso4217
import pytest

import capcore
from capcore import (
    MAX_EXPONENT,
    ExponentError,
    UnknownCurrency,
    exponent,
    exponents,
    resolve_exponent,
)

# The codes the published ISO 4217 list carries without a minor unit.
NO_MINOR_UNIT = (
    "XAU",
    "XAG",
    "XPT",
    "XPD",
    "XDR",
    "XBA",
    "XBB",
    "XBC",
    "XBD",
    "XSU",
    "XUA",
    "XTS",
    "XXX",
)

MALFORMED_CODES = [
    pytest.param("usd", id="lower-case"),
    pytest.param("Usd", id="mixed-case"),
    pytest.param("US", id="two-letters"),
    pytest.param("USDX", id="four-letters"),
    pytest.param("", id="empty"),
    pytest.param(" USD", id="leading-space"),
    pytest.param("USD ", id="trailing-space"),
    pytest.param("U$D", id="symbol"),
    pytest.param("US1", id="digit"),
    pytest.param("ÜSD", id="non-ascii-letter"),
    pytest.param("ＵＳＤ", id="fullwidth-letters"),
    pytest.param(123, id="int"),
    pytest.param(None, id="none"),
    pytest.param(b"USD", id="bytes"),
    pytest.param(["U", "S", "D"], id="list"),
]


def test_max_exponent_is_18() -> None:
    assert MAX_EXPONENT == 18
    assert capcore.MAX_EXPONENT == 18


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param("JPY", 0, id="JPY-0"),
        pytest.param("KRW", 0, id="KRW-0"),
        pytest.param("USD", 2, id="USD-2"),
        pytest.param("EUR", 2, id="EUR-2"),
        pytest.param("BHD", 3, id="BHD-3"),
        pytest.param("KWD", 3, id="KWD-3"),
        pytest.param("CLF", 4, id="CLF-4"),
        pytest.param("UYW", 4, id="UYW-4"),
    ],
)
def test_exponent_of_known_codes(code: str, expected: int) -> None:
    assert exponent(code) == expected


def test_exponents_is_the_published_list_with_a_minor_unit() -> None:
    published = {c.code: c.exponent for c in iso4217.Currency if c.exponent is not None}
    assert published  # the comparison below must not be vacuous
    assert exponents() == published


def test_exponents_omits_every_code_without_a_minor_unit() -> None:
    table = exponents()
    for code in NO_MINOR_UNIT:
        assert code not in table


def test_no_minor_unit_list_matches_the_published_list() -> None:
    published = {c.code for c in iso4217.Currency if c.exponent is None}
    assert published == set(NO_MINOR_UNIT)


def test_every_table_exponent_is_in_range() -> None:
    assert all(type(e) is int and 0 <= e <= MAX_EXPONENT for e in exponents().values())


@pytest.mark.parametrize("code", sorted(exponents()))
def test_exponent_agrees_with_the_table_for_every_code(code: str) -> None:
    assert exponent(code) == exponents()[code]


@pytest.mark.parametrize("code", NO_MINOR_UNIT)
def test_exponent_refuses_codes_without_a_minor_unit(code: str) -> None:
    with pytest.raises(UnknownCurrency):
        exponent(code)


@pytest.mark.parametrize(
    "code",
    [pytest.param("USS", id="USS"), pytest.param("ABC", id="ABC"), pytest.param("ZZZ", id="ZZZ")],
)
def test_exponent_refuses_unknown_codes(code: str) -> None:
    with pytest.raises(UnknownCurrency):
        exponent(code)


@pytest.mark.parametrize("code", MALFORMED_CODES)
def test_exponent_refuses_malformed_codes(code: object) -> None:
    with pytest.raises(UnknownCurrency):
        exponent(code)  # type: ignore[arg-type]


def test_exponents_returns_a_copy() -> None:
    first = exponents()
    first["USD"] = 7
    first["QQQ"] = 1
    del first["JPY"]
    first.clear()
    again = exponents()
    assert again["USD"] == 2
    assert again["JPY"] == 0
    assert "QQQ" not in again
    assert exponent("USD") == 2
    assert exponent("JPY") == 0
    with pytest.raises(UnknownCurrency):
        exponent("QQQ")
    assert again is not exponents()


# --- resolve_exponent -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param("USD", 2, id="USD"),
        pytest.param("JPY", 0, id="JPY"),
        pytest.param("BHD", 3, id="BHD"),
        pytest.param("CLF", 4, id="CLF"),
    ],
)
def test_resolve_exponent_without_override_is_the_table(code: str, expected: int) -> None:
    assert resolve_exponent(code, None) == expected


@pytest.mark.parametrize(
    ("code", "override"),
    [
        pytest.param("USD", 2, id="USD-2"),
        pytest.param("JPY", 0, id="JPY-0"),
        pytest.param("BHD", 3, id="BHD-3"),
        pytest.param("UYW", 4, id="UYW-4"),
    ],
)
def test_resolve_exponent_accepts_an_override_equal_to_the_table(code: str, override: int) -> None:
    assert resolve_exponent(code, override) == override


@pytest.mark.parametrize(
    ("code", "override"),
    [
        pytest.param("USD", 3, id="USD-3"),
        pytest.param("USD", 0, id="USD-0"),
        pytest.param("JPY", 2, id="JPY-2"),
        pytest.param("BHD", 2, id="BHD-2"),
        pytest.param("USD", 18, id="USD-18"),
    ],
)
def test_resolve_exponent_refuses_an_override_contradicting_the_table(
    code: str, override: int
) -> None:
    with pytest.raises(ExponentError):
        resolve_exponent(code, override)


@pytest.mark.parametrize("code", NO_MINOR_UNIT)
@pytest.mark.parametrize("override", [0, 3, MAX_EXPONENT])
def test_resolve_exponent_uses_the_override_for_codes_without_a_minor_unit(
    code: str, override: int
) -> None:
    assert resolve_exponent(code, override) == override


@pytest.mark.parametrize("code", NO_MINOR_UNIT)
def test_resolve_exponent_without_override_refuses_codes_without_a_minor_unit(code: str) -> None:
    with pytest.raises(UnknownCurrency):
        resolve_exponent(code, None)


def test_resolve_exponent_xau_with_3_is_3() -> None:
    assert resolve_exponent("XAU", 3) == 3


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("USS", id="USS-typo"),
        pytest.param("ABC", id="ABC"),
        pytest.param("XAX", id="XAX"),
    ],
)
@pytest.mark.parametrize("override", [None, 0, 2])
def test_resolve_exponent_unknown_code_is_unknown_even_with_an_override(
    code: str, override: int | None
) -> None:
    with pytest.raises(UnknownCurrency):
        resolve_exponent(code, override)


BAD_OVERRIDES = [
    pytest.param(19, id="19"),
    pytest.param(-1, id="minus-1"),
    pytest.param(10**100, id="huge"),
    pytest.param(True, id="True"),
    pytest.param(False, id="False"),
    pytest.param("2", id="str-2"),
    pytest.param(b"2", id="bytes-2"),
    pytest.param([2], id="list"),
]


@pytest.mark.parametrize("override", BAD_OVERRIDES)
@pytest.mark.parametrize(
    "code",
    [
        pytest.param("USD", id="in-table"),
        pytest.param("XAU", id="no-minor-unit"),
        pytest.param("USS", id="unknown"),
    ],
)
def test_resolve_exponent_bad_override_is_exponent_error(code: str, override: object) -> None:
    # The override check comes before both the table check and the "unknown code" check.
    with pytest.raises(ExponentError):
        resolve_exponent(code, override)  # type: ignore[arg-type]


@pytest.mark.parametrize("override", [*BAD_OVERRIDES, pytest.param(2, id="good-2")])
@pytest.mark.parametrize("code", MALFORMED_CODES)
def test_resolve_exponent_malformed_code_comes_first(code: object, override: object) -> None:
    with pytest.raises(UnknownCurrency):
        resolve_exponent(code, override)  # type: ignore[arg-type]
