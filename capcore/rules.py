"""The one-line cap-rule grammar (``docs/rules.md``): parsing and canonical lines.

A hand-written scanner over the line, because every refusal must name the column of the
offending token, and a refusal must never quote the line (an admin may paste anything).
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from capcore.amounts import Unit, format_amount, parse_amount
from capcore.currency import has_minor_unit, resolve_exponent
from capcore.errors import (
    AmountOverflow,
    ExponentError,
    FractionDigits,
    RuleError,
    UnknownCurrency,
)
from capcore.findings import Action, ActionKind

MAX_NAME_LENGTH = 64
MAX_TOOL_LENGTH = 128
MAX_WINDOW_SECONDS = 366 * 86_400
# The word before a shadow rule's name: evaluated and recorded, never enforced.
SHADOW = "shadow"

# A rule's or a gate's name (the server checks gate names typed in admin against it too).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*", re.ASCII)
_TOOL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]*", re.ASCII)
_MEMBER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*", re.ASCII)
_CODE = re.compile(r"[A-Z]{3}", re.ASCII)
_DECIMAL = re.compile(r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?", re.ASCII)
_EXPONENT_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_ROLLING = re.compile(r"([1-9][0-9]*)([mhd])", re.ASCII)
_BLANKS = " \t"
# Every character a token of the grammar can contain. Any other character (a "\r", a
# non-breaking space, "$") ends the token before it and is then refused at its own column.
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-:/,=>")
_UNIT_SECONDS = {"m": 60, "h": 3_600, "d": 86_400}
_VISIBLE_ASCII = frozenset(chr(code) for code in range(0x21, 0x7F))
# unicodedata has no name for control characters; these are their Unicode name aliases.
_CONTROL_NAMES = {
    "\x00": "NULL",
    "\t": "CHARACTER TABULATION",
    "\n": "LINE FEED",
    "\x0b": "LINE TABULATION",
    "\x0c": "FORM FEED",
    "\r": "CARRIAGE RETURN",
    "\x1b": "ESCAPE",
    "\x1c": "INFORMATION SEPARATOR FOUR",
    "\x1d": "INFORMATION SEPARATOR THREE",
    "\x1e": "INFORMATION SEPARATOR TWO",
    "\x1f": "INFORMATION SEPARATOR ONE",
    "\x7f": "DELETE",
    "\x85": "NEXT LINE",
}
_UNNAMED = {"Cc": "a control character", "Cs": "a surrogate", "Co": "a private-use character"}
# A second rule of a name (two names that casefold alike would share one ledger): the line
# number of the first is enough to find it, and quotes nothing of the file.
DUPLICATE_NAME = (
    "a rule name not used before (already defined on line {line}; names match ignoring case)"
)


class Calendar(enum.StrEnum):
    """A calendar window's period, in UTC; a str, so ``Calendar.DAY == "day"``."""

    DAY = "day"
    WEEK = "week"  # starts on Monday
    MONTH = "month"


class Kind(enum.Enum):
    MAX = "max"  # caps one call
    SUM = "sum"  # caps a running total


@dataclass(frozen=True, slots=True)
class Limit:
    currency: str
    exponent: int
    minor: int


@dataclass(frozen=True, slots=True)
class Window:
    """A rolling window of ``rolling_seconds``, or a ``calendar`` period in UTC.

    Calendar weeks start on Monday.
    """

    rolling_seconds: int | None = None
    calendar: Calendar | None = None

    def __post_init__(self) -> None:
        if (self.rolling_seconds is None) == (self.calendar is None):
            raise ValueError("a window is either rolling or calendar")
        if self.calendar is not None:
            # A caller may write "day": store the member, so `is Calendar.DAY` holds.
            try:
                object.__setattr__(self, "calendar", Calendar(self.calendar))
            except ValueError:
                raise ValueError("a calendar window is day, week or month") from None
        if self.rolling_seconds is not None and (
            type(self.rolling_seconds) is not int
            or not 0 < self.rolling_seconds <= MAX_WINDOW_SECONDS
            or self.rolling_seconds % 60
        ):
            raise ValueError("a rolling window is whole minutes, at most 366 days")

    def to_text(self) -> str:
        """``per 7d``, ``per day``: the rolling length in its largest whole unit."""
        if self.calendar is not None:
            return f"per {self.calendar}"
        assert self.rolling_seconds is not None
        for unit in "dhm":
            count, rest = divmod(self.rolling_seconds, _UNIT_SECONDS[unit])
            if not rest:
                return f"per {count}{unit}"
        raise AssertionError("rolling windows are whole minutes")


@dataclass(frozen=True, slots=True)
class Key:
    """Whose total: the call's principal, or the string at ``path`` after ``trim``/``lower``."""

    principal: bool
    path: tuple[str, ...] = ()
    lower: bool = False
    trim: bool = False

    def __post_init__(self) -> None:
        if self.principal and (self.path or self.lower or self.trim):
            raise ValueError("a principal key has no path and no normalisation")
        if not self.principal and not self.path:
            raise ValueError("an argument key needs a path")

    def to_text(self) -> str:
        if self.principal:
            return "by principal"
        text = f"by arg={'.'.join(self.path)}"
        if self.lower:
            text += " lower"
        if self.trim:
            text += " trim"
        return text


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    tools: tuple[str, ...]
    arg: tuple[str, ...]
    unit: Unit
    currency_arg: tuple[str, ...] | None
    limits: tuple[Limit, ...]
    kind: Kind
    window: Window | None
    key: Key | None
    action: Action
    shadow: bool = False  # evaluated and recorded on every call, never enforced

    def limit_for(self, currency: str) -> Limit | None:
        for limit in self.limits:
            if limit.currency == currency:
                return limit
        return None

    def to_line(self) -> str:
        """The canonical line; ``parse_rule(rule.to_line()) == rule``."""
        parts = [SHADOW] if self.shadow else []
        parts += [f"{self.name}:", ",".join(self.tools), f"arg={'.'.join(self.arg)}"]
        if self.unit is Unit.MINOR:
            parts.append("minor")
        if self.currency_arg is not None:
            parts.append(f"currency={'.'.join(self.currency_arg)}")
        parts.append(self.kind.value)
        parts.append(", ".join(_money_text(limit) for limit in self.limits))
        if self.window is not None:
            parts.append(self.window.to_text())
        if self.key is not None:
            parts.append(self.key.to_text())
        parts.append("->")
        parts.append(_action_text(self.action))
        return " ".join(parts)


def _money_text(limit: Limit) -> str:
    text = f"{limit.currency} {format_amount(limit.minor, limit.exponent)}"
    if not has_minor_unit(limit.currency):
        text += f" exponent={limit.exponent}"
    return text


def name_of_character(char: str) -> str:
    """``U+00A0 NO-BREAK SPACE``: a character by its code point and Unicode name, for an
    error to say what an invisible or look-alike character is without quoting the line."""
    name = _CONTROL_NAMES.get(char) or unicodedata.name(char, "")
    if not name:
        name = f"({_UNNAMED.get(unicodedata.category(char), 'unassigned')})"
    return f"U+{ord(char):04X} {name}"


def _action_text(action: Action) -> str:
    if action.kind is ActionKind.REFUSE:
        return "refuse"
    return f"gate {action.gate}" if action.gate else "gate"


class _Scanner:
    """A position in one line, with the primitives of the grammar.

    ``end`` excludes trailing blanks; a token missing at the end reports ``len(line) + 1``.
    """

    def __init__(self, line: str) -> None:
        self.line = line
        self.end = len(line.rstrip(_BLANKS))
        self.pos = len(line) - len(line.lstrip(_BLANKS))

    def fail(self, expected: str, at: int | None = None) -> RuleError:
        position = self.pos if at is None else at
        if position >= self.end:
            return RuleError(len(self.line) + 1, expected)
        char = self.line[position]
        # A visible ASCII character is plain to see at its column; any other may look like a
        # blank (a no-break space) or like nothing (a zero-width space), so it is named.
        found = None if char in _VISIBLE_ASCII else name_of_character(char)
        return RuleError(position + 1, expected, found=found)

    def at_end(self) -> bool:
        return self.pos >= self.end

    def at_boundary(self, position: int) -> bool:
        """A token ends here: the end, a blank, or a character no token contains."""
        return position >= self.end or self.line[position] not in _TOKEN_CHARS

    def blanks(self, expected: str) -> None:
        """One or more blanks, then something: else the error names what should come."""
        start = self.pos
        while self.pos < self.end and self.line[self.pos] in _BLANKS:
            self.pos += 1
        if self.pos == start or self.at_end():
            raise self.fail(expected)

    def optional_blanks(self) -> None:
        while self.pos < self.end and self.line[self.pos] in _BLANKS:
            self.pos += 1

    def peek_word(self, word: str) -> bool:
        """The keyword ``word`` stands here, followed by a blank or the end."""
        after = self.pos + len(word)
        return (
            self.line.startswith(word, self.pos) and after <= self.end and self.at_boundary(after)
        )

    def peek_prefix(self, prefix: str) -> bool:
        return self.line.startswith(prefix, self.pos) and self.pos + len(prefix) <= self.end

    def word(self, word: str, expected: str) -> int:
        if not self.peek_word(word):
            raise self.fail(expected)
        start = self.pos
        self.pos += len(word)
        return start

    def token(self, pattern: re.Pattern[str], expected: str) -> tuple[int, str]:
        match = pattern.match(self.line, self.pos, self.end)
        if match is None:
            raise self.fail(expected)
        self.pos = match.end()
        return match.start(), match.group()

    def path(self) -> tuple[str, ...]:
        members = [self.token(_MEMBER, "a member name")[1]]
        while self.pos < self.end and self.line[self.pos] == ".":
            self.pos += 1
            members.append(self.token(_MEMBER, "a member name")[1])
        self.expect_boundary("a blank after the path")
        return tuple(members)

    def expect_boundary(self, expected: str) -> None:
        if not self.at_boundary(self.pos):
            raise self.fail(expected)


def _parse_name(scan: _Scanner, expected: str) -> str:
    start, name = scan.token(NAME, expected)
    if len(name) > MAX_NAME_LENGTH:
        raise scan.fail(f"a name of at most {MAX_NAME_LENGTH} characters", start)
    return name


def _parse_tools(scan: _Scanner) -> tuple[str, ...]:
    tools: list[str] = []
    while True:
        start, tool = scan.token(_TOOL, "a tool name")
        if len(tool) > MAX_TOOL_LENGTH:
            raise scan.fail(f"a tool name of at most {MAX_TOOL_LENGTH} characters", start)
        if tool in tools:
            raise scan.fail("a tool not listed before", start)
        tools.append(tool)
        if scan.pos < scan.end and scan.line[scan.pos] == ",":
            scan.pos += 1
            scan.optional_blanks()
            continue
        scan.expect_boundary("',' or a blank after the tool name")
        return tuple(tools)


def _parse_money(scan: _Scanner) -> Limit:
    code_start, code = scan.token(_CODE, "a currency code (3 upper-case letters)")
    if not scan.at_boundary(scan.pos):
        raise scan.fail("a currency code (3 upper-case letters)", code_start)
    scan.blanks("an amount in major units")
    decimal_start, decimal = scan.token(_DECIMAL, "an amount in major units")
    _end_of_amount(scan, decimal_start, decimal)
    override: int | None = None
    exponent_start = -1
    if _money_continues_with_exponent(scan):
        scan.optional_blanks()
        exponent_start = scan.pos
        scan.pos += len("exponent=")
        digits = scan.token(_EXPONENT_DIGITS, "an exponent from 0 to 18")[1]
        if not scan.at_boundary(scan.pos) and scan.line[scan.pos] != ",":
            # "exponent=2x": the character that is not a digit, not the exponent's start.
            raise scan.fail("a digit or the end of the exponent")
        if len(digits) > 2 or (len(digits) == 2 and digits[0] == "0"):
            raise scan.fail("an exponent from 0 to 18", exponent_start)
        override = int(digits)
    try:
        exp = resolve_exponent(code, override)
    except UnknownCurrency as error:
        if override is None and _listed_without_minor_unit(code):
            # The code is one of the table's, a closed set: naming it quotes no free text.
            raise scan.fail(
                f"exponent=N after the amount: {code} has no minor unit in ISO 4217"
                f" (e.g. {code} 10 exponent=3)",
                code_start,
            ) from error
        raise scan.fail("a currency code of the ISO 4217 table", code_start) from error
    except ExponentError as error:
        raise scan.fail(
            "an exponent from 0 to 18 that agrees with the table", exponent_start
        ) from error
    try:
        minor = parse_amount(decimal, Unit.MAJOR, exp)
    except FractionDigits as error:
        raise scan.fail(f"an amount with at most {exp} fraction digits", decimal_start) from error
    except AmountOverflow as error:
        raise scan.fail(
            "an amount that fits a 64-bit count of minor units", decimal_start
        ) from error
    return Limit(code, exp, minor)


def _end_of_amount(scan: _Scanner, start: int, decimal: str) -> None:
    """The amount just read ends here (a blank, a ',' or the end of the line); else the
    error points at the character that spoils it (``500.0O``, ``1_000``, ``5e3``), not at
    the start of the amount."""
    if scan.at_boundary(scan.pos) or scan.line[scan.pos] == ",":
        return
    char = scan.line[scan.pos]
    fraction = "." in decimal
    if decimal == "0" and char.isdigit():
        raise scan.fail("an amount without a leading zero", start)
    if char == "." and not fraction:  # "500." or "500.-": a point with no digit after it
        raise scan.fail("digits after the decimal point")
    if char.isalnum() or char in "._":
        raise scan.fail(
            "a digit or the end of the amount"
            if fraction
            else "a digit, '.' or the end of the amount"
        )
    raise scan.fail("a blank after the amount")


def _listed_without_minor_unit(code: str) -> bool:
    """ISO 4217 lists ``code`` without a minor unit (``XAU``, ``XDR``): any exponent resolves."""
    try:
        resolve_exponent(code, 0)
    except UnknownCurrency:
        return False
    return not has_minor_unit(code)


def _money_continues_with_exponent(scan: _Scanner) -> bool:
    """Blanks then ``exponent=`` follow the amount (looked at without moving)."""
    position = scan.pos
    while position < scan.end and scan.line[position] in _BLANKS:
        position += 1
    return position > scan.pos and scan.line.startswith("exponent=", position)


def _parse_limits(scan: _Scanner, *, fixed_currency: bool) -> tuple[Limit, ...]:
    limits: list[Limit] = []
    while True:
        code_start = scan.pos
        if limits and fixed_currency:
            raise scan.fail("a single money (a rule without currency= has one)", code_start)
        limit = _parse_money(scan)
        if any(existing.currency == limit.currency for existing in limits):
            raise scan.fail("a currency not listed before", code_start)
        limits.append(limit)
        if scan.pos < scan.end and scan.line[scan.pos] == ",":
            scan.pos += 1
            scan.optional_blanks()
            if scan.pos < scan.end and scan.line[scan.pos].isdigit():
                raise scan.fail("a currency code (amounts have no thousands separators)")
            continue
        return tuple(limits)


def _parse_window(scan: _Scanner) -> Window:
    scan.blanks("a window: 'day', 'week', 'month' or a count with m, h or d")
    for period in Calendar:
        if scan.peek_word(period):
            scan.pos += len(period)
            return Window(calendar=period)
    start = scan.pos
    match = _ROLLING.match(scan.line, scan.pos, scan.end)
    if match is None or not scan.at_boundary(match.end()):
        raise scan.fail("a window: 'day', 'week', 'month' or a count with m, h or d")
    count, unit = match.groups()
    # Seven digits already exceed 366 days in minutes: no need to convert anything longer.
    if len(count) > 7 or int(count) * _UNIT_SECONDS[unit] > MAX_WINDOW_SECONDS:
        raise scan.fail("a window of at most 366 days", start)
    scan.pos = match.end()
    return Window(rolling_seconds=int(count) * _UNIT_SECONDS[unit])


def _parse_key(scan: _Scanner) -> Key:
    scan.blanks("'principal' or 'arg='")
    if scan.peek_word("principal"):
        scan.pos += len("principal")
        scan.blanks("'->'")
        return Key(principal=True)
    if not scan.peek_prefix("arg="):
        raise scan.fail("'principal' or 'arg='")
    scan.pos += len("arg=")
    path = scan.path()
    lower = trim = False
    while True:
        scan.blanks("'lower', 'trim' or '->'")
        if scan.peek_word("lower"):
            if lower:
                raise scan.fail("'lower' only once")
            lower = True
            scan.pos += len("lower")
        elif scan.peek_word("trim"):
            if trim:
                raise scan.fail("'trim' only once")
            trim = True
            scan.pos += len("trim")
        else:
            return Key(principal=False, path=path, lower=lower, trim=trim)


def _parse_action(scan: _Scanner) -> Action:
    for word in ("refuse", "gate"):
        after = scan.pos + len(word)
        if scan.line.startswith(word, scan.pos) and not scan.at_boundary(after):
            # "gatex" or "refusex": point at what follows the keyword, not at the keyword.
            raise scan.fail("a blank or the end of the line", after)
    if scan.peek_word("refuse"):
        scan.pos += len("refuse")
        return Action(ActionKind.REFUSE)
    scan.word("gate", "'gate' or 'refuse'")
    if scan.at_end():
        return Action(ActionKind.GATE, "")
    scan.blanks("a gate name or the end of the line")
    return Action(ActionKind.GATE, _parse_name(scan, "a gate name or the end of the line"))


def _expected_before_arrow(kind: Kind, window: Window | None, key: Key | None) -> str:
    if kind is Kind.MAX or (key is not None and key.principal):
        return "'->'"
    if key is not None:
        return "'lower', 'trim' or '->'"
    if window is not None:
        return "'by' or '->'"
    return "'per', 'by' or '->'"


def parse_rule(line: str) -> Rule:
    """One cap-rule line to a ``Rule``; ``RuleError`` (with the column) if it is refused."""
    if not isinstance(line, str):
        raise TypeError("a rule line is text")
    scan = _Scanner(line)
    # "shadow:" is a rule named shadow; "shadow big:" the shadow rule big.
    shadow = scan.peek_word(SHADOW)
    if shadow:
        scan.pos += len(SHADOW)
        scan.blanks("a rule name after 'shadow'")
    name = _parse_name(scan, "a rule name")
    if scan.pos >= scan.end or line[scan.pos] != ":":
        raise scan.fail("':' after the rule name")
    scan.pos += 1
    scan.expect_boundary("a blank after ':'")
    scan.blanks("the tool names")
    tools = _parse_tools(scan)
    scan.blanks("'arg='")
    if not scan.peek_prefix("arg="):
        raise scan.fail("'arg='")
    scan.pos += len("arg=")
    arg = scan.path()
    scan.blanks("'max' or 'sum'")
    unit = Unit.MAJOR
    if scan.peek_word("minor"):
        unit = Unit.MINOR
        scan.pos += len("minor")
        scan.blanks("'max' or 'sum'")
    currency_arg: tuple[str, ...] | None = None
    if scan.peek_prefix("currency="):
        scan.pos += len("currency=")
        currency_arg = scan.path()
        scan.blanks("'max' or 'sum'")
    if scan.peek_word("max"):
        kind = Kind.MAX
    elif scan.peek_word("sum"):
        kind = Kind.SUM
    else:
        raise scan.fail("'max' or 'sum'")
    scan.pos += len(kind.value)
    scan.blanks("a currency code and an amount")
    limits = _parse_limits(scan, fixed_currency=currency_arg is None)
    scan.blanks("'->'" if kind is Kind.MAX else "'per', 'by' or '->'")
    window: Window | None = None
    key: Key | None = None
    if scan.peek_word("per"):
        if kind is Kind.MAX:
            raise scan.fail("'->' (a max rule has no window)")
        scan.pos += len("per")
        window = _parse_window(scan)
        scan.blanks("'by' or '->'")
    if scan.peek_word("by"):
        if kind is Kind.MAX:
            raise scan.fail("'->' (a max rule has no key)")
        scan.pos += len("by")
        key = _parse_key(scan)
    if not scan.peek_word("->"):
        raise scan.fail(_expected_before_arrow(kind, window, key))
    scan.pos += len("->")
    scan.blanks("'gate' or 'refuse'")
    action = _parse_action(scan)
    if not scan.at_end():
        scan.optional_blanks()
        raise scan.fail("the end of the line")
    return Rule(
        name=name,
        tools=tools,
        arg=arg,
        unit=unit,
        currency_arg=currency_arg,
        limits=limits,
        kind=kind,
        window=window,
        key=key,
        action=action,
        shadow=shadow,
    )


def _lines(text: str | Iterable[str]) -> Iterable[str]:
    if isinstance(text, str):
        for line in text.split("\n"):
            yield line.removesuffix("\r")
    else:
        for item in text:
            yield item.removesuffix("\n").removesuffix("\r")


@dataclass(frozen=True, slots=True)
class RuleLine:
    """A rule with the line of the file it came from: ``number`` counts from 1, ``text`` is
    the line as parsed (a trailing ``\\r`` removed, blanks kept)."""

    number: int
    text: str
    rule: Rule


def check_rules(text: str | Iterable[str]) -> tuple[list[RuleLine], list[RuleError]]:
    """Every rule of a rules file and every refusal, each with its line number, in file order:
    a caller that reports a whole file (``import_rules``) shows every bad line at once.

    A name equal under ``casefold`` to an earlier rule's is a refusal at its line.
    """
    rules: list[RuleLine] = []
    errors: list[RuleError] = []
    first_line: dict[str, int] = {}  # each casefolded name, and the line that defined it
    for number, line in enumerate(_lines(text), start=1):
        content = line.strip(_BLANKS)
        if not content or content.startswith("#"):
            continue
        try:
            rule = parse_rule(line)
        except RuleError as error:
            error.line = number
            errors.append(error)
            continue
        folded = rule.name.casefold()
        if folded in first_line:
            column = len(line) - len(line.lstrip(_BLANKS)) + 1
            expected = DUPLICATE_NAME.format(line=first_line[folded])
            errors.append(RuleError(column, expected, number))
            continue
        first_line[folded] = number
        rules.append(RuleLine(number, line, rule))
    return rules, errors


def parse_rules_with_lines(text: str | Iterable[str]) -> list[RuleLine]:
    """``parse_rules``, with each rule's line number and text (for a caller that stores lines)."""
    rules, errors = check_rules(text)
    if errors:
        raise errors[0]
    return rules


def parse_rules(text: str | Iterable[str]) -> list[Rule]:
    """Every rule of a rules file; blank lines and ``#`` comments are skipped. The first
    refused line raises its ``RuleError`` (``check_rules`` collects them all).

    Two names equal under ``casefold`` are refused (they would share one ledger).
    """
    return [line.rule for line in parse_rules_with_lines(text)]
