"""Policy tests, offline: a TOML file of cases, each one call with the verdict it should get,
checked against a rule file with capcore alone (``manage.py rules_test``; docs/rules.md,
"Testing rules offline").

Pure like the rest of capcore: the caller reads the files and passes ``now``. A fault in the
case file is a ``CasesRefused`` listing every fault with its position; no message quotes the
file's text beyond a case's own short name or a shortened key.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from capcore.amounts import Unit, assess
from capcore.caps import LedgerKey, assess_caps
from capcore.engine import CallRequest, Evaluation, PolicyState, evaluate_call, ledgers_of_call
from capcore.errors import ArgsNotStrict, CapcoreError
from capcore.findings import ActionKind, Finding
from capcore.permissions import Mode
from capcore.rules import MAX_TOOL_LENGTH, Kind, Rule, name_of_character
from capcore.strictjson import parse_arguments
from capcore.verdict import Status

CASE_FIELDS = (
    "name",
    "tool",
    "arguments",
    "principal",
    "mode",
    "spent",
    "expect",
    "expect_rules",
)
REQUIRED_FIELDS = ("name", "tool", "arguments", "expect")
DEFAULT_PRINCIPAL = "principal"
# No mode finding at all: the tool is not even classified, so only caps decide.
DEFAULT_MODE = Mode.ALLOW
EXPECTATIONS = {"allowed": Status.ALLOWED, "held": Status.PENDING, "refused": Status.REFUSED}
WORD_OF_STATUS = {status: word for word, status in EXPECTATIONS.items()}
MAX_NAME_LENGTH = 100
MAX_PRINCIPAL_LENGTH = 200  # as the API takes it
MAX_QUOTED = 40

_TOOL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]*", re.ASCII)
_CASE_HEADER = re.compile(r"[ \t]*\[\[[ \t]*case[ \t]*\]\][ \t]*(#.*)?")
_TOML_POSITION = re.compile(r"^(.*) \(at (?:line (\d+), column (\d+)|end of document)\)$", re.S)
# tomllib's messages that quote nothing of the document, kept as they are (lower-cased).
_TOML_PLAIN_PREFIXES = (
    "Invalid statement",
    "Expected ",
    "Cannot overwrite a value",
    "Unclosed ",
    "Unescaped ",
    "Unterminated string",
    "Invalid hex value",
    "Escaped character is not a Unicode scalar value",
    "Invalid date or datetime",
    "Invalid value",
    "Invalid initial character for a key part",
)
_TOML_REDECLARED = ("Cannot declare", "Cannot redefine", "Cannot mutate", "Duplicate inline")


@dataclass(frozen=True, slots=True)
class CaseError:
    """One fault of a case file: where (``line``/``column`` counting from 1, when known;
    ``case`` counting the cases from 1) and what, in words that quote nothing long."""

    message: str
    line: int | None = None
    column: int | None = None
    case: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.line is not None:
            where = f"{self.line}:{self.column}: " if self.column is not None else f"{self.line}: "
        if self.case is not None:
            where += f"case {self.case}: "
        return f"{where}{self.message}"


class CasesRefused(CapcoreError):
    """The case file is malformed or does not fit the rule file; ``errors`` lists every fault."""

    def __init__(self, errors: Sequence[CaseError]) -> None:
        super().__init__(len(errors))
        self.errors = tuple(errors)


@dataclass(frozen=True, slots=True)
class Case:
    """One call and the verdict it should get. ``spent`` maps a ``sum`` rule's name to the
    total already in the ledger this call falls into, as decimal text in the rule's currency."""

    number: int
    line: int | None
    name: str
    tool: str
    arguments: str
    principal: str = DEFAULT_PRINCIPAL
    mode: Mode = DEFAULT_MODE
    spent: Mapping[str, str] = field(default_factory=dict)
    expect: Status = Status.ALLOWED
    expect_rules: frozenset[str] | None = None  # casefolded


@dataclass(frozen=True, slots=True)
class CaseResult:
    case: Case
    evaluation: Evaluation
    rules: tuple[str, ...]  # the rule names among the reasons, as the rules spell them

    @property
    def status_passed(self) -> bool:
        return self.evaluation.verdict.status is self.case.expect

    @property
    def rules_passed(self) -> bool:
        expected = self.case.expect_rules
        return expected is None or expected == {name.casefold() for name in self.rules}

    @property
    def passed(self) -> bool:
        return self.status_passed and self.rules_passed


def _quoted(text: str) -> str:
    """A key the file wrote, short enough to show: at most ``MAX_QUOTED`` characters."""
    if len(text) <= MAX_QUOTED:
        return repr(text)
    return f"{text[:MAX_QUOTED]!r}…"


def _position_of_end(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _toml_message(message: str, text: str, line: int, column: int) -> str:
    if message.startswith(_TOML_PLAIN_PREFIXES):
        plain = message
    elif message.startswith(_TOML_REDECLARED):
        plain = "a table or key defined twice"
    elif message.startswith(("Found invalid character", "Illegal character")):
        lines = text.split("\n")
        row = lines[line - 1] if line <= len(lines) else ""
        found = row[column - 1] if 0 < column <= len(row) else ""
        plain = "invalid character" + (f" {name_of_character(found)}" if found else "")
    else:
        plain = "not valid TOML"
    return f"not valid TOML: {plain[0].lower()}{plain[1:]}"


def _toml_error(error: tomllib.TOMLDecodeError, text: str) -> CaseError:
    match = _TOML_POSITION.match(str(error))
    if match is None:
        return CaseError("not valid TOML")
    message, line_text, column_text = match.groups()
    if line_text is None:
        line, column = _position_of_end(text)
    else:
        line, column = int(line_text), int(column_text)
    return CaseError(_toml_message(message, text, line, column), line, column)


def _header_lines(text: str, count: int) -> list[int | None]:
    """The line of each case's ``[[case]]`` header, when the file writes one per case (an
    inline array of tables has none; the cases are then known by number only)."""
    found = [
        number
        for number, line in enumerate(text.split("\n"), start=1)
        if _CASE_HEADER.fullmatch(line.removesuffix("\r"))
    ]
    if len(found) != count:
        return [None] * count
    return list(found)


def _text(value: object, *, printable: bool = False) -> str | None:
    if type(value) is not str or "\x00" in value:
        return None
    if printable and not value.isprintable():
        return None
    return value


class _CaseReader:
    def __init__(self, number: int, line: int | None, raw: dict[str, object]) -> None:
        self.number = number
        self.line = line
        self.raw = raw
        self.errors: list[CaseError] = []

    def fail(self, message: str) -> None:
        self.errors.append(CaseError(message, self.line, None, self.number))

    def read(self) -> Case | None:
        for key in self.raw:
            if key not in CASE_FIELDS:
                self.fail(f"unknown key {_quoted(key)} (a case has {', '.join(CASE_FIELDS)})")
        for key in REQUIRED_FIELDS:
            if key not in self.raw:
                self.fail(f"{key} is missing")
        name = self._name()
        tool = self._tool()
        arguments = self._arguments()
        principal = self._principal()
        mode = self._mode()
        spent = self._spent()
        expect = self._expect()
        expect_rules = self._expect_rules()
        if (
            self.errors
            or name is None
            or tool is None
            or arguments is None
            or principal is None
            or mode is None
            or spent is None
            or expect is None
        ):
            return None
        return Case(
            self.number,
            self.line,
            name,
            tool,
            arguments,
            principal,
            mode,
            spent,
            expect,
            expect_rules,
        )

    def _name(self) -> str | None:
        if "name" not in self.raw:
            return None
        name = _text(self.raw["name"], printable=True)
        if name is None or not name.strip() or len(name) > MAX_NAME_LENGTH:
            self.fail(f"name must be text of 1 to {MAX_NAME_LENGTH} printable characters")
            return None
        return name

    def _tool(self) -> str | None:
        if "tool" not in self.raw:
            return None
        tool = _text(self.raw["tool"])
        if tool is None or len(tool) > MAX_TOOL_LENGTH or not _TOOL.fullmatch(tool):
            self.fail(f"tool must be a tool name matching {_TOOL.pattern}, at most 128 characters")
            return None
        return tool

    def _arguments(self) -> str | None:
        if "arguments" not in self.raw:
            return None
        arguments = _text(self.raw["arguments"])
        if arguments is None:
            self.fail("arguments must be JSON text in a string, without U+0000")
        return arguments

    def _principal(self) -> str | None:
        principal = _text(self.raw.get("principal", DEFAULT_PRINCIPAL))
        if principal is None or len(principal) > MAX_PRINCIPAL_LENGTH:
            self.fail(f"principal must be text of at most {MAX_PRINCIPAL_LENGTH} characters")
            return None
        return principal

    def _mode(self) -> Mode | None:
        raw = self.raw.get("mode", DEFAULT_MODE.value)
        # Read exactly: Mode.parse would take a typo for ``prompt`` and the case would test
        # something its author did not mean.
        for mode in Mode:
            if raw == mode.value:
                return mode
        self.fail(f"mode must be one of {', '.join(mode.value for mode in Mode)}")
        return None

    def _spent(self) -> dict[str, str] | None:
        raw = self.raw.get("spent", {})
        if type(raw) is not dict or not all(
            _text(name) is not None and type(amount) is str for name, amount in raw.items()
        ):
            self.fail('spent must be a table of rule names to decimal text, e.g. {"daily" = "800"}')
            return None
        return dict(raw)

    def _expect(self) -> Status | None:
        if "expect" not in self.raw:
            return None
        raw = self.raw["expect"]
        if type(raw) is not str or raw not in EXPECTATIONS:
            self.fail(f"expect must be one of {', '.join(EXPECTATIONS)}")
            return None
        return EXPECTATIONS[raw]

    def _expect_rules(self) -> frozenset[str] | None:
        if "expect_rules" not in self.raw:
            return None
        raw = self.raw["expect_rules"]
        if type(raw) is not list or not all(type(name) is str for name in raw):
            self.fail("expect_rules must be a list of rule names")
            return None
        return frozenset(name.casefold() for name in raw)


def read_cases(text: str) -> list[Case]:
    """The cases of a TOML case file: a list of ``[[case]]`` tables and nothing else.

    Raises ``CasesRefused`` with every fault found: a TOML error (one, at its line and
    column), an unknown or missing key, a value of the wrong type, two cases of one name.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CasesRefused([_toml_error(error, text)]) from None
    errors = [
        CaseError(f"unknown key {_quoted(key)} (the file holds [[case]] tables only)")
        for key in document
        if key != "case"
    ]
    raw_cases = document.get("case", [])
    if type(raw_cases) is not list or not all(type(raw) is dict for raw in raw_cases):
        raise CasesRefused([*errors, CaseError("case must be an array of tables: [[case]]")])
    if not raw_cases:
        raise CasesRefused([*errors, CaseError("no cases: write at least one [[case]]")])
    cases: list[Case] = []
    first_of_name: dict[str, int] = {}
    for number, (line, raw) in enumerate(
        zip(_header_lines(text, len(raw_cases)), raw_cases, strict=True), start=1
    ):
        reader = _CaseReader(number, line, raw)
        case = reader.read()
        errors += reader.errors
        if case is None:
            continue
        if case.name in first_of_name:
            reason = f"the name is already used by case {first_of_name[case.name]}"
            errors.append(CaseError(reason, line, None, number))
            continue
        first_of_name[case.name] = number
        cases.append(case)
    if errors:
        raise CasesRefused(errors)
    return cases


def _rule_named(rules: Sequence[Rule], name: str) -> Rule | None:
    folded = name.casefold()
    return next((rule for rule in rules if rule.name.casefold() == folded), None)


def _spent_ledger(
    case: Case, rules: Sequence[Rule], name: str, amount: str
) -> tuple[LedgerKey, int] | CaseError:
    """The ledger this case's call falls into for the ``sum`` rule ``name``, and ``amount``
    in its currency's minor units; or why there is none."""

    def fail(message: str) -> CaseError:
        return CaseError(f"spent for {_quoted(name)}: {message}", case.line, None, case.number)

    rule = _rule_named(rules, name)
    if rule is None or rule.kind is not Kind.SUM:
        return fail("the rule file has no sum rule of that name")
    try:
        arguments = parse_arguments(case.arguments)
    except ArgsNotStrict:
        return fail("the arguments are not strict JSON, so the call falls into no ledger")
    assessments = assess_caps([rule], tool=case.tool, arguments=arguments, principal=case.principal)
    if not assessments:
        return fail("the rule does not apply to this tool")
    assessment = assessments[0]
    if assessment.ledger is None or assessment.limit is None:
        return fail(
            f"the call falls into no ledger of it (not assessable: {assessment.not_assessable})"
        )
    limit = assessment.limit
    try:
        return assessment.ledger, assess(amount, Unit.MAJOR, limit.exponent)
    except CapcoreError:
        return fail(
            f"expected a decimal amount in {limit.currency} with at most {limit.exponent} "
            "decimals, not negative"
        )


def _state_of_case(
    case: Case, rules: Sequence[Rule], now: datetime
) -> tuple[CallRequest, PolicyState] | list[CaseError]:
    request = CallRequest(tool=case.tool, arguments_text=case.arguments, principal=case.principal)
    # Every ledger the call touches starts empty; ``spent`` fills the ones it names.
    spent: dict[LedgerKey, int] = dict.fromkeys(ledgers_of_call(request, rules), 0)
    errors: list[CaseError] = []
    for name, amount in case.spent.items():
        found = _spent_ledger(case, rules, name, amount)
        if isinstance(found, CaseError):
            errors.append(found)
        else:
            ledger, minor = found
            spent[ledger] = minor
    if errors:
        return errors
    state = PolicyState(now=now, mode=case.mode, cap_rules=tuple(rules), spent=spent)
    return request, state


def run_cases(cases: Sequence[Case], rules: Sequence[Rule], *, now: datetime) -> list[CaseResult]:
    """Each case's call evaluated against ``rules`` alone (no permission rules, pins or
    budget), in the case's mode, with its ``spent`` totals.

    Raises ``CasesRefused`` before evaluating anything when a case's ``spent`` does not fit
    the rules: a name that is no ``sum`` rule, a call that falls into no ledger of it, an
    amount that is not decimal text in the rule's currency.
    """
    prepared: list[tuple[Case, CallRequest, PolicyState]] = []
    errors: list[CaseError] = []
    for case in cases:
        state = _state_of_case(case, rules, now)
        if isinstance(state, list):
            errors += state
        else:
            prepared.append((case, *state))
    if errors:
        raise CasesRefused(errors)
    results = []
    for case, request, policy_state in prepared:
        evaluation = evaluate_call(request, policy_state)
        names = tuple(
            dict.fromkeys(f.rule for f in evaluation.verdict.reasons if f.rule is not None)
        )
        results.append(CaseResult(case, evaluation, names))
    return results


def _reason_text(finding: Finding) -> str:
    who = f"rule {finding.rule}" if finding.rule is not None else finding.policy.value
    if finding.action.kind is ActionKind.REFUSE:
        what = "refused"
    else:
        what = f"held at gate {finding.action.gate or '(default)'}"
    return f"{who} {what}: {finding.message}"


def line_of_result(result: CaseResult) -> str:
    """``ok  <name>``, or ``FAIL <name>: expected …, got … (reasons: …)``."""
    case = result.case
    if result.passed:
        return f"ok  {case.name}"
    verdict = result.evaluation.verdict
    faults = []
    if not result.status_passed:
        expected, got = WORD_OF_STATUS[case.expect], WORD_OF_STATUS[verdict.status]
        faults.append(f"expected {expected}, got {got}")
    if not result.rules_passed:
        assert case.expect_rules is not None
        expected_rules = ", ".join(sorted(case.expect_rules)) or "none"
        got_rules = ", ".join(result.rules) or "none"
        faults.append(f"expected rules {expected_rules}, got {got_rules}")
    reasons = "; ".join(_reason_text(f) for f in verdict.reasons) or "none"
    return f"FAIL {case.name}: {'; '.join(faults)} (reasons: {reasons})"


def summary_of_results(results: Sequence[CaseResult]) -> str:
    failed = sum(1 for result in results if not result.passed)
    total = len(results)
    return f"{total} case{'' if total == 1 else 's'}: {total - failed} passed, {failed} failed"
