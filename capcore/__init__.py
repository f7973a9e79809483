"""capcore — the pure policy core of Countersign.

Standard library plus the ``iso4217`` data package; no Django, no I/O, no clock, no floats.
Everything public is importable from here.
"""

from __future__ import annotations

from capcore.amounts import (
    INT64_MAX,
    JSONNumber,
    Unit,
    add,
    assess,
    format_amount,
    parse_amount,
)
from capcore.currency import MAX_EXPONENT, exponent, exponents, resolve_exponent
from capcore.errors import (
    AmountOverflow,
    AmountSyntax,
    AmountType,
    ArgAbsent,
    ArgsNotStrict,
    CapcoreError,
    CurrencyMismatch,
    ExponentError,
    FractionDigits,
    NegativeAmount,
    NotAssessable,
    RuleError,
    UnknownCurrency,
)
from capcore.strictjson import MAX_DEPTH, lookup, parse_arguments, strict_loads

__all__ = [
    "INT64_MAX",
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "AmountOverflow",
    "AmountSyntax",
    "AmountType",
    "ArgAbsent",
    "ArgsNotStrict",
    "CapcoreError",
    "CurrencyMismatch",
    "ExponentError",
    "FractionDigits",
    "JSONNumber",
    "NegativeAmount",
    "NotAssessable",
    "RuleError",
    "Unit",
    "UnknownCurrency",
    "add",
    "assess",
    "exponent",
    "exponents",
    "format_amount",
    "lookup",
    "parse_amount",
    "parse_arguments",
    "resolve_exponent",
    "strict_loads",
]
