"""Evaluating cap rules against one call (what each part of a rule does: ``docs/rules.md``).

Two steps, so the server can lock exactly the ledgers a call touches, in a fixed order, before
it reads their totals: ``assess_caps`` reads the call (no state), ``evaluate_caps`` compares
with the spent totals the server loaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from capcore.amounts import add, assess, format_amount
from capcore.errors import (
    AmountOverflow,
    AmountSyntax,
    AmountType,
    ArgAbsent,
    CurrencyMismatch,
    FractionDigits,
    NegativeAmount,
    NotAssessable,
)
from capcore.findings import Finding, Policy
from capcore.rules import Calendar, Kind, Limit, Rule, Window
from capcore.strictjson import lookup

AMOUNT_MISSING = "the amount argument is missing"
AMOUNT_NOT_DECIMAL = "the amount is not a plain decimal"
AMOUNT_TOO_PRECISE = "the amount has more fraction digits than its currency allows"
AMOUNT_TOO_LARGE = "the amount does not fit a 64-bit count of minor units"
AMOUNT_NEGATIVE = "the amount is negative"
AMOUNT_WRONG_TYPE = "the amount is neither a number nor a string"
CURRENCY_MISSING = "the currency argument is missing"
CURRENCY_NOT_LIMITED = "the currency is not one this rule has a limit in"
# The key's path comes from the rule (an admin wrote it), never from the call: naming it says
# which argument the agent left out.
KEY_MISSING = "the key argument {path} is missing"
KEY_NOT_TEXT = "the key argument {path} is not a string"
# A shadow rule's ledgers are its own: a blank never stands in a rule's name, so no enforced
# rule's ledger (of this name or any other) is ever one of them.
SHADOW_LEDGER_PREFIX = "shadow "

_AMOUNT_CATEGORIES: dict[type[NotAssessable], str] = {
    ArgAbsent: AMOUNT_MISSING,
    AmountSyntax: AMOUNT_NOT_DECIMAL,
    FractionDigits: AMOUNT_TOO_PRECISE,
    AmountOverflow: AMOUNT_TOO_LARGE,
    NegativeAmount: AMOUNT_NEGATIVE,
    AmountType: AMOUNT_WRONG_TYPE,
}


@dataclass(frozen=True, slots=True, order=True)
class LedgerKey:
    """One running total: a rule (by casefolded name; ``ledger_rule``), a currency, and a key
    digest.

    The key is stored as a SHA-256 digest, never as the text (it may be a payee's address);
    ``None`` is the rule's one total.
    """

    rule: str
    currency: str
    key_digest: str | None


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """An amount to add to a ledger when the call becomes allowed or approved."""

    ledger: LedgerKey
    minor: int


@dataclass(frozen=True, slots=True)
class CapAssessment:
    """What one applicable rule read from the call.

    ``limit`` and ``amount`` are set when the call is assessable; ``ledger`` for an assessable
    ``sum`` rule; otherwise ``not_assessable`` says why, in words that quote nothing.
    """

    rule: Rule
    limit: Limit | None = None
    amount: int | None = None
    ledger: LedgerKey | None = None
    not_assessable: str | None = None


@dataclass(frozen=True, slots=True)
class CapResult:
    findings: tuple[Finding, ...]
    records: tuple[LedgerRecord, ...]


def digest_key(text: str) -> str:
    """The SHA-256 hex digest a ledger stores in place of its key text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _call_limit(rule: Rule, arguments: dict[str, object]) -> Limit:
    if rule.currency_arg is None:
        return rule.limits[0]
    try:
        currency = lookup(arguments, rule.currency_arg)
    except ArgAbsent:
        raise ArgAbsent(CURRENCY_MISSING) from None
    limit = rule.limit_for(currency) if type(currency) is str else None
    if limit is None:
        raise CurrencyMismatch(CURRENCY_NOT_LIMITED)
    return limit


def ledger_rule(rule: Rule) -> str:
    """The rule part of a rule's ledgers' keys: its casefolded name, after
    ``SHADOW_LEDGER_PREFIX`` for a shadow rule."""
    folded = rule.name.casefold()
    return SHADOW_LEDGER_PREFIX + folded if rule.shadow else folded


def _ledger_key(
    rule: Rule, currency: str, arguments: dict[str, object], principal: str
) -> LedgerKey:
    key = rule.key
    if key is None:
        return LedgerKey(ledger_rule(rule), currency, None)
    if key.principal:
        return LedgerKey(ledger_rule(rule), currency, digest_key(principal))
    path = ".".join(key.path)
    try:
        value = lookup(arguments, key.path)
    except ArgAbsent:
        raise ArgAbsent(KEY_MISSING.format(path=path)) from None
    if type(value) is not str:
        raise AmountType(KEY_NOT_TEXT.format(path=path))
    if key.trim:
        value = value.strip()
    if key.lower:
        value = value.lower()
    return LedgerKey(ledger_rule(rule), currency, digest_key(value))


def _assess_one(rule: Rule, arguments: dict[str, object], principal: str) -> CapAssessment:
    try:
        limit = _call_limit(rule, arguments)
    except NotAssessable as error:
        return CapAssessment(rule, not_assessable=str(error))
    try:
        amount = assess(lookup(arguments, rule.arg), rule.unit, limit.exponent)
    except NotAssessable as error:
        return CapAssessment(rule, limit=limit, not_assessable=_AMOUNT_CATEGORIES[type(error)])
    if rule.kind is Kind.MAX:
        return CapAssessment(rule, limit=limit, amount=amount)
    try:
        ledger = _ledger_key(rule, limit.currency, arguments, principal)
    except NotAssessable as error:
        return CapAssessment(rule, limit=limit, amount=amount, not_assessable=str(error))
    return CapAssessment(rule, limit=limit, amount=amount, ledger=ledger)


def assess_caps(
    rules: Sequence[Rule], *, tool: str, arguments: dict[str, object], principal: str
) -> tuple[CapAssessment, ...]:
    """Read the call once for every rule that applies to its tool (rules in their order).

    ``arguments`` is ``parse_arguments`` output.
    """
    return tuple(_assess_one(rule, arguments, principal) for rule in rules if tool in rule.tools)


def ledgers_of_caps(assessments: Sequence[CapAssessment]) -> tuple[LedgerKey, ...]:
    """The ledgers a call touches, sorted: lock them in this order to avoid deadlocks."""
    return tuple(sorted(a.ledger for a in assessments if a.ledger is not None))


def bounds_of_window(window: Window | None, now: datetime) -> tuple[datetime | None, bool]:
    """The window's start before ``now`` and whether the start itself is inside (``None``:
    all time). The window has no end: see ``in_window``.

    A rolling window starts ``window`` before ``now``, excluded; a calendar window at the
    start of the current UTC day, week (Monday) or month, included.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    if window is None:
        return None, True
    if window.rolling_seconds is not None:
        return now - timedelta(seconds=window.rolling_seconds), False
    utc = now.astimezone(UTC)
    midnight = utc.replace(hour=0, minute=0, second=0, microsecond=0)
    if window.calendar is Calendar.DAY:
        return midnight, True
    if window.calendar is Calendar.WEEK:
        return midnight - timedelta(days=utc.weekday()), True
    return midnight.replace(day=1), True


def in_window(window: Window | None, recorded_at: datetime, now: datetime) -> bool:
    """Whether an entry recorded at ``recorded_at`` counts in the window ending at ``now``.

    An entry recorded after ``now`` counts: only a worker whose clock runs ahead writes one,
    and leaving it out could let a call through past the limit (``docs/capcore.md``). The
    server's SQL compares with the same ``bounds_of_window``.
    """
    start, inclusive = bounds_of_window(window, now)
    if start is None:
        return True
    return recorded_at >= start if inclusive else recorded_at > start


def _money(limit: Limit, minor: int) -> str:
    return f"{limit.currency} {format_amount(minor, limit.exponent, grouping=True)}"


def _window_text(window: Window | None) -> str:
    return "in total" if window is None else window.to_text()


def _finding(rule: Rule, message: str) -> Finding:
    return Finding(Policy.CAP, rule.name, rule.action, message)


def _judge(assessment: CapAssessment, spent: Mapping[LedgerKey, int]) -> Finding | None:
    rule = assessment.rule
    if assessment.not_assessable is not None:
        return _finding(rule, f"not assessable: {assessment.not_assessable}")
    limit, amount = assessment.limit, assessment.amount
    assert limit is not None
    assert amount is not None
    if rule.kind is Kind.MAX:
        if amount > limit.minor:
            return _finding(
                rule,
                f"{_money(limit, amount)} is over the limit of "
                f"{_money(limit, limit.minor)} per call",
            )
        return None
    assert assessment.ledger is not None
    # A ledger the server did not load is a KeyError: the verdict becomes a policy error.
    already = spent[assessment.ledger]
    window = _window_text(rule.window)
    try:
        total = add(already, amount)
    except AmountOverflow:
        return _finding(
            rule,
            f"{_money(limit, amount)} would take the total past the limit of "
            f"{_money(limit, limit.minor)} {window} (spent {_money(limit, already)})",
        )
    if total > limit.minor:
        return _finding(
            rule,
            f"{_money(limit, total)} would exceed the limit of {_money(limit, limit.minor)} "
            f"{window} (spent {_money(limit, already)})",
        )
    return None


def evaluate_caps(
    assessments: Sequence[CapAssessment], *, spent: Mapping[LedgerKey, int]
) -> CapResult:
    """Findings for the calls over a limit or not assessable, and the amounts to record.

    ``spent`` holds each touched ledger's total within its rule's window. Records include
    the ledgers the call went over: a human's approval records the amount all the same.
    """
    findings = tuple(f for f in (_judge(a, spent) for a in assessments) if f is not None)
    records = tuple(
        LedgerRecord(a.ledger, a.amount)
        for a in assessments
        if a.ledger is not None and a.amount is not None
    )
    return CapResult(findings, records)
