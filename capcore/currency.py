"""The ISO 4217 exponent table, read from the ``iso4217`` package (the published list)."""

from __future__ import annotations

import iso4217

from capcore.errors import ExponentError, UnknownCurrency

MAX_EXPONENT = 18

_TABLE: dict[str, int] = {}
_WITHOUT_MINOR_UNIT: set[str] = set()
for _currency in iso4217.Currency:
    if _currency.exponent is None:
        _WITHOUT_MINOR_UNIT.add(_currency.code)
    else:
        _TABLE[_currency.code] = _currency.exponent
del _currency

_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _check_code(code: object) -> str:
    if type(code) is not str or len(code) != 3 or not _UPPER.issuperset(code):
        raise UnknownCurrency("not three upper-case ASCII letters")
    return code


def exponent(code: str) -> int:
    """The ISO 4217 minor-unit digits of ``code`` (``"USD"`` → 2)."""
    # No try/except KeyError: the KeyError (holding the code) would stay on __context__.
    exp = _TABLE.get(_check_code(code))
    if exp is None:
        raise UnknownCurrency("no minor unit for this currency in the table")
    return exp


def exponents() -> dict[str, int]:
    """A copy of the whole table: every code that has a minor unit."""
    return dict(_TABLE)


def has_minor_unit(code: str) -> bool:
    """Whether ``code`` is in the table (so an ``exponent=`` for it is redundant)."""
    return code in _TABLE


def check_exponent(exp: object) -> int:
    """``exp`` itself, if it is an ``int`` in 0..MAX_EXPONENT; else ``ExponentError``."""
    if type(exp) is not int or not 0 <= exp <= MAX_EXPONENT:
        raise ExponentError(f"exponent must be an integer from 0 to {MAX_EXPONENT}")
    return exp


def resolve_exponent(code: str, override: int | None) -> int:
    """The table's exponent for ``code``, or ``override`` for a code the published list
    carries without a minor unit (``XAU``, ``XDR``, …)."""
    _check_code(code)
    if override is not None:
        check_exponent(override)
    table_exp = _TABLE.get(code)
    if table_exp is not None:
        if override is not None and override != table_exp:
            raise ExponentError("exponent contradicts the ISO 4217 table")
        return table_exp
    if code not in _WITHOUT_MINOR_UNIT:
        raise UnknownCurrency("not in the ISO 4217 list")
    if override is None:
        raise UnknownCurrency("this currency has no minor unit: give an exponent")
    return override
