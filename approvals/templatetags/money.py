"""``{{ amount|money }}`` → ``USD 1,250.00``: the one way pages show amounts.

It wraps ``capcore.format_amount`` with the exponent the rule's limit carries (the same table
the caps use), so a page never formats money on its own.
"""

from __future__ import annotations

from django import template

import capcore

register = template.Library()


@register.filter
def money(value: capcore.Limit | int | None, currency: str | None = None) -> str:
    """An amount as a ``capcore.Limit`` (a currency, its exponent and a count of minor
    units), or a count of minor units with its currency code as the argument
    (``{{ minor|money:"JPY" }}``). The text is plain (autoescaped like any other)."""
    if isinstance(value, capcore.Limit):
        digits = capcore.format_amount(value.minor, value.exponent, grouping=True)
        return f"{value.currency} {digits}"
    if value is None or currency is None:
        return ""
    digits = capcore.format_amount(int(value), capcore.exponent(currency), grouping=True)
    return f"{currency} {digits}"
