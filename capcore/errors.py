"""Everything capcore raises on purpose.

No error carries the text it refused: that text was written by a model or typed by an admin
and may be huge or hostile. Errors name a category (and, for rules, a position) only; a rule
error may also name a value from a closed set — a character by its code point and Unicode
name, or an ISO 4217 code the table carries — which is not the refused text (docs/rules.md,
"Error messages").
"""

from __future__ import annotations


class CapcoreError(Exception):
    """Base of every error capcore raises on purpose."""


class NotAssessable(CapcoreError):
    """This amount cannot be read with certainty."""


class AmountSyntax(NotAssessable):
    """Not a plain decimal."""


class FractionDigits(NotAssessable):
    """More fraction digits than the exponent allows (any, for minor units)."""


class AmountOverflow(NotAssessable):
    """Does not fit a signed 64-bit count of minor units."""


class NegativeAmount(NotAssessable):
    """Negative, including -0."""


class AmountType(NotAssessable):
    """Not a JSON number or string."""


class ArgsNotStrict(NotAssessable):
    """The arguments are not strict JSON; ``category`` says which rule they broke."""

    def __init__(self, category: str) -> None:
        super().__init__(category)
        self.category = category


class ArgAbsent(NotAssessable):
    """The member at the path is not there."""


class CurrencyMismatch(NotAssessable):
    """The call's currency is not one the rule has a limit in."""


class UnknownCurrency(CapcoreError):
    """Not three upper-case ASCII letters, or not in the table (and no override)."""


class ExponentError(CapcoreError):
    """An exponent outside 0..18, or an override contradicting the table."""


class RuleError(CapcoreError):
    """A cap-rule line was refused, at ``column`` (and ``line``, when read from a file).

    ``found`` names the character at the column when it is not visible ASCII
    (``U+00A0 NO-BREAK SPACE``): such a character looks like a blank or like nothing.
    """

    def __init__(
        self, column: int, expected: str, line: int | None = None, *, found: str | None = None
    ) -> None:
        super().__init__(column, expected)
        self.column = column
        self.expected = expected
        self.line = line
        self.found = found

    @property
    def message(self) -> str:
        """What was expected (and what was found), without the position."""
        if self.found is None:
            return f"expected {self.expected}"
        return f"expected {self.expected}, found {self.found}"

    def __str__(self) -> str:
        where = f"column {self.column}"
        if self.line is not None:
            where = f"line {self.line}, {where}"
        return f"{where}: {self.message}"
