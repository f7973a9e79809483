"""capcore — the pure policy core of Countersign.

Standard library plus the ``iso4217`` data package; no Django, no I/O, no clock, no floats.
The front door holds the errors, the currency table, amounts, strict JSON, cap rules, and
the engine's entry points with the types they take and return. Helpers (``assess_caps``,
``bounds_of_window``, ``parse_cost``, ``held_by_mode_only``, …) are imported from their
modules; ``docs/capcore.md`` lists which module holds what.
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
from capcore.budgets import Budget, BudgetScope, RunCounters, Usage
from capcore.caps import CapAssessment, LedgerKey, LedgerRecord
from capcore.currency import MAX_EXPONENT, exponent, exponents, resolve_exponent
from capcore.engine import (
    CallRequest,
    Evaluation,
    PolicyState,
    evaluate_call,
    ledgers_of_call,
    recheck_sums,
)
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
from capcore.findings import Action, ActionKind, Finding, Policy
from capcore.permissions import (
    Classification,
    Decision,
    Mode,
    PermissionRule,
    ToolClass,
    ToolClassPin,
)
from capcore.rules import (
    Calendar,
    Key,
    Kind,
    Limit,
    Rule,
    RuleLine,
    Window,
    parse_rule,
    parse_rules,
    parse_rules_with_lines,
)
from capcore.strictjson import MAX_DEPTH, lookup, parse_arguments, strict_loads
from capcore.verdict import Status, Verdict

__all__ = [
    "INT64_MAX",
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "Action",
    "ActionKind",
    "AmountOverflow",
    "AmountSyntax",
    "AmountType",
    "ArgAbsent",
    "ArgsNotStrict",
    "Budget",
    "BudgetScope",
    "Calendar",
    "CallRequest",
    "CapAssessment",
    "CapcoreError",
    "Classification",
    "CurrencyMismatch",
    "Decision",
    "Evaluation",
    "ExponentError",
    "Finding",
    "FractionDigits",
    "JSONNumber",
    "Key",
    "Kind",
    "LedgerKey",
    "LedgerRecord",
    "Limit",
    "Mode",
    "NegativeAmount",
    "NotAssessable",
    "PermissionRule",
    "Policy",
    "PolicyState",
    "Rule",
    "RuleError",
    "RuleLine",
    "RunCounters",
    "Status",
    "ToolClass",
    "ToolClassPin",
    "Unit",
    "UnknownCurrency",
    "Usage",
    "Verdict",
    "Window",
    "add",
    "assess",
    "evaluate_call",
    "exponent",
    "exponents",
    "format_amount",
    "ledgers_of_call",
    "lookup",
    "parse_amount",
    "parse_arguments",
    "parse_rule",
    "parse_rules",
    "parse_rules_with_lines",
    "recheck_sums",
    "resolve_exponent",
    "strict_loads",
]
