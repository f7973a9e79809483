"""``capcore``'s front door stays small: the errors, the currency table, amounts, strict JSON,
cap rules, and the engine's entry points with the types they take and return. A helper is
imported from its module; adding a name here is a decision, not a side effect."""

from __future__ import annotations

import importlib

import capcore

ERRORS = {
    "CapcoreError",
    "NotAssessable",
    "AmountSyntax",
    "FractionDigits",
    "AmountOverflow",
    "NegativeAmount",
    "AmountType",
    "ArgsNotStrict",
    "ArgAbsent",
    "CurrencyMismatch",
    "UnknownCurrency",
    "ExponentError",
    "RuleError",
}
CURRENCY = {"MAX_EXPONENT", "exponent", "exponents", "resolve_exponent"}
AMOUNTS = {"Unit", "INT64_MAX", "JSONNumber", "parse_amount", "assess", "add", "format_amount"}
STRICT_JSON = {"MAX_DEPTH", "strict_loads", "parse_arguments", "lookup"}
CAP_RULES = {
    "parse_rule",
    "parse_rules",
    "parse_rules_with_lines",
    "Rule",
    "RuleLine",
    "Limit",
    "Window",
    "Calendar",
    "Key",
    "Kind",
    "Action",
    "ActionKind",
}
ENGINE = {
    "evaluate_call",
    "recheck_sums",
    "ledgers_of_call",
    "CallRequest",
    "PolicyState",
    "Evaluation",
    "Verdict",
    "Status",
    "Finding",
    "Policy",
    "Mode",
    "Budget",
    "BudgetScope",
    "Usage",
    "RunCounters",
    "PermissionRule",
    "Decision",
    "ToolClass",
    "ToolClassPin",
    "Classification",
    "LedgerKey",
    "LedgerRecord",
    "CapAssessment",
}

# Helpers, each imported from the module that holds it.
HELPERS = {
    "capcore.caps": [
        "assess_caps",
        "evaluate_caps",
        "ledgers_of_caps",
        "digest_key",
        "bounds_of_window",
        "in_window",
    ],
    "capcore.budgets": ["COST_EXPONENT", "evaluate_budget", "parse_cost"],
    "capcore.permissions": [
        "evaluate_permissions",
        "classify_tool",
        "guess_tool_class",
        "words_of_tool",
        "held_by_mode_only",
    ],
    "capcore.verdict": ["POLICY_ERROR", "combine_findings", "refusal_of_arguments"],
    "capcore.findings": ["DEFAULT_GATE", "REFUSE"],
}


def test_the_front_door_is_exactly_these_names() -> None:
    assert set(capcore.__all__) == ERRORS | CURRENCY | AMOUNTS | STRICT_JSON | CAP_RULES | ENGINE
    assert len(capcore.__all__) == len(set(capcore.__all__))


def test_every_name_at_the_door_is_there() -> None:
    for name in capcore.__all__:
        assert hasattr(capcore, name), name


def test_helpers_live_in_their_modules_and_not_at_the_door() -> None:
    for module_name, names in HELPERS.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert hasattr(module, name), f"{module_name}.{name}"
            assert name not in capcore.__all__, name
