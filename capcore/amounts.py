"""Decimal amounts as exact integer counts of minor units. No float anywhere."""

from __future__ import annotations

import enum

from capcore.currency import check_exponent
from capcore.errors import (
    AmountOverflow,
    AmountSyntax,
    AmountType,
    FractionDigits,
    NegativeAmount,
)

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# 2**63 has 19 digits: an integer part longer than this cannot fit whatever the exponent.
_MAX_INTEGER_DIGITS = 19
_POWERS_OF_TEN: tuple[int, ...] = tuple(10**digits for digits in range(19))


class Unit(enum.Enum):
    MAJOR = "major"  # decimal text in currency units: "12.50"
    MINOR = "minor"  # an integer count of minor units: 1250


class JSONNumber(str):
    """A JSON number literal exactly as written (``JSONNumber("12.50")``)."""

    __slots__ = ()


def _split(text: object) -> tuple[bool, bytes, bytes]:
    """``(negative, integer digits, fraction digits)`` of ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``.

    Every step is a linear scan in C over bytes (no regex, nothing that can backtrack), so a
    million-character string is refused in well under a millisecond.
    """
    if not isinstance(text, str):
        raise AmountType("not a JSON number or string")
    # isascii() is O(1) on CPython; within ASCII, bytes.isdigit() is exactly [0-9].
    if not text.isascii():
        raise AmountSyntax("not a plain decimal")
    body = text.encode("ascii")
    negative = body.startswith(b"-")
    integer, point, fraction = (body[1:] if negative else body).partition(b".")
    if not integer.isdigit() or (point and not fraction.isdigit()):
        raise AmountSyntax("not a plain decimal")
    if len(integer) > 1 and integer.startswith(b"0"):
        raise AmountSyntax("not a plain decimal")
    return negative, integer, fraction


def _scale(negative: bool, integer: bytes, fraction: bytes, digits_allowed: int, exp: int) -> int:
    if len(fraction) > digits_allowed:
        raise FractionDigits("more fraction digits than the currency allows")
    if len(integer) > _MAX_INTEGER_DIGITS:
        raise AmountOverflow("does not fit a signed 64-bit count of minor units")
    magnitude = int(integer) * _POWERS_OF_TEN[exp]
    if fraction:
        magnitude += int(fraction) * _POWERS_OF_TEN[exp - len(fraction)]
    value = -magnitude if negative else magnitude
    if not INT64_MIN <= value <= INT64_MAX:
        raise AmountOverflow("does not fit a signed 64-bit count of minor units")
    return value


def parse_amount(text: str, unit: Unit, exp: int) -> int:
    """Decimal text to a signed count of minor units.

    Checks run in the order: exponent, type, syntax, fraction digits, range.
    """
    check_exponent(exp)
    negative, integer, fraction = _split(text)
    if unit is Unit.MINOR:
        return _scale(negative, integer, fraction, 0, 0)
    return _scale(negative, integer, fraction, exp, exp)


def assess(value: object, unit: Unit, exp: int) -> int:
    """One JSON value (as ``strict_loads`` returns it) to a non-negative count of minor units.

    Order: type, syntax, sign, fraction digits, range. A ``JSONNumber`` is parsed from its
    literal, a ``str`` as decimal text; anything else (``None``, ``bool``, Python numbers,
    containers) is ``AmountType``.
    """
    check_exponent(exp)
    if type(value) is not JSONNumber and type(value) is not str:
        raise AmountType("not a JSON number or string")
    negative, integer, fraction = _split(value)
    if negative:
        raise NegativeAmount("negative amount")
    if unit is Unit.MINOR:
        return _scale(False, integer, fraction, 0, 0)
    return _scale(False, integer, fraction, exp, exp)


def add(a: int, b: int) -> int:
    """``a + b``, refusing a result outside the signed 64-bit range."""
    total = a + b
    if not INT64_MIN <= total <= INT64_MAX:
        raise AmountOverflow("sum does not fit a signed 64-bit count of minor units")
    return total


def format_amount(minor: int, exp: int, *, grouping: bool = False) -> str:
    """A count of minor units as decimal text with exactly ``exp`` fraction digits."""
    check_exponent(exp)
    sign = "-" if minor < 0 else ""
    integer, fraction = divmod(abs(minor), _POWERS_OF_TEN[exp])
    integer_text = f"{integer:,}" if grouping else str(integer)
    if exp == 0:
        return f"{sign}{integer_text}"
    return f"{sign}{integer_text}.{fraction:0{exp}d}"
