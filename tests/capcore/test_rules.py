"""Cap rules: ``parse_rule``, ``parse_rules``, ``parse_rules_with_lines``, ``Rule.to_line``
and ``RuleError`` (the grammar: ``docs/rules.md``)."""

from __future__ import annotations

import dataclasses
import io
import string
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import capcore
from capcore import (
    INT64_MAX,
    Action,
    ActionKind,
    AmountOverflow,
    Calendar,
    ExponentError,
    FractionDigits,
    Key,
    Kind,
    Limit,
    Rule,
    RuleError,
    RuleLine,
    Unit,
    UnknownCurrency,
    Window,
    exponent,
    parse_rule,
    parse_rules,
    parse_rules_with_lines,
)
from capcore.rules import (
    MAX_NAME_LENGTH,
    MAX_TOOL_LENGTH,
    MAX_WINDOW_SECONDS,
    check_rules,
    name_of_character,
)
from tests.capcore.conftest import assert_no_leak

DEFAULT_GATE = Action(ActionKind.GATE, "")
REFUSE = Action(ActionKind.REFUSE)
DAY = 86_400

# A distinctive token that must never come back in an error.
LEAK = "ZQXJ7731"


def col(line: str, token: str, occurrence: int = 1) -> int:
    """The 1-based column of the ``occurrence``-th ``token`` in ``line``."""
    index = -1
    for _ in range(occurrence):
        index = line.index(token, index + 1)
    return index + 1


def refused(line: str) -> RuleError:
    """The ``RuleError`` of ``parse_rule(line)``, checked for the fields every one carries."""
    with pytest.raises(RuleError) as info:
        parse_rule(line)
    error = info.value
    assert error.line is None
    assert isinstance(error.expected, str)
    assert error.expected
    assert 1 <= error.column <= len(line) + 1
    assert str(error) == f"column {error.column}: {error.message}"
    at = line[error.column - 1 : error.column]
    if at and not ("!" <= at <= "~"):
        # Not visible ASCII: named by code point, as the message says.
        assert error.found == name_of_character(at)
        assert error.message == f"expected {error.expected}, found {error.found}"
    else:
        assert error.found is None
        assert error.message == f"expected {error.expected}"
    return error


def refused_file(text: str | list[str]) -> RuleError:
    with pytest.raises(RuleError) as info:
        parse_rules(text)
    error = info.value
    assert error.line is not None
    assert str(error) == f"line {error.line}, column {error.column}: {error.message}"
    return error


def make(
    *,
    name: str = "r",
    tools: tuple[str, ...] = ("pay",),
    arg: tuple[str, ...] = ("amount",),
    unit: Unit = Unit.MAJOR,
    currency_arg: tuple[str, ...] | None = None,
    limits: tuple[Limit, ...] = (Limit("USD", 2, 500),),
    kind: Kind = Kind.MAX,
    window: Window | None = None,
    key: Key | None = None,
    action: Action = DEFAULT_GATE,
) -> Rule:
    return Rule(name, tools, arg, unit, currency_arg, limits, kind, window, key, action)


def parses_to(line: str, expected: Rule) -> None:
    """``line`` parses to ``expected``, whose canonical line parses back to it."""
    rule = parse_rule(line)
    assert rule == expected
    assert parse_rule(rule.to_line()) == rule


# ---------------------------------------------------------------------------------------------
# 1. The examples of docs/rules.md
# ---------------------------------------------------------------------------------------------

EXAMPLES = [
    pytest.param(
        "big-payment: pay,transfer arg=amount max USD 500.00 -> gate finance",
        Rule(
            name="big-payment",
            tools=("pay", "transfer"),
            arg=("amount",),
            unit=Unit.MAJOR,
            currency_arg=None,
            limits=(Limit("USD", 2, 50000),),
            kind=Kind.MAX,
            window=None,
            key=None,
            action=Action(ActionKind.GATE, "finance"),
        ),
        "big-payment: pay,transfer arg=amount max USD 500.00 -> gate finance",
        id="big-payment",
    ),
    pytest.param(
        "daily-spend: pay arg=amount currency=currency sum USD 1000, EUR 900 per day"
        " by principal -> gate",
        Rule(
            name="daily-spend",
            tools=("pay",),
            arg=("amount",),
            unit=Unit.MAJOR,
            currency_arg=("currency",),
            limits=(Limit("USD", 2, 100000), Limit("EUR", 2, 90000)),
            kind=Kind.SUM,
            window=Window(calendar=Calendar.DAY),
            key=Key(principal=True),
            action=Action(ActionKind.GATE, ""),
        ),
        "daily-spend: pay arg=amount currency=currency sum USD 1000.00, EUR 900.00 per day"
        " by principal -> gate",
        id="daily-spend",
    ),
    pytest.param(
        "wire-cap: wire arg=amount.value currency=amount.currency max USD 10000, EUR 9000"
        " -> refuse",
        Rule(
            name="wire-cap",
            tools=("wire",),
            arg=("amount", "value"),
            unit=Unit.MAJOR,
            currency_arg=("amount", "currency"),
            limits=(Limit("USD", 2, 1000000), Limit("EUR", 2, 900000)),
            kind=Kind.MAX,
            window=None,
            key=None,
            action=Action(ActionKind.REFUSE),
        ),
        "wire-cap: wire arg=amount.value currency=amount.currency max USD 10000.00,"
        " EUR 9000.00 -> refuse",
        id="wire-cap",
    ),
    pytest.param(
        "per-payee: pay arg=amount sum USD 2000 per 7d by arg=payee.email lower trim"
        " -> gate treasury",
        Rule(
            name="per-payee",
            tools=("pay",),
            arg=("amount",),
            unit=Unit.MAJOR,
            currency_arg=None,
            limits=(Limit("USD", 2, 200000),),
            kind=Kind.SUM,
            window=Window(rolling_seconds=604800),
            key=Key(False, ("payee", "email"), True, True),
            action=Action(ActionKind.GATE, "treasury"),
        ),
        "per-payee: pay arg=amount sum USD 2000.00 per 7d by arg=payee.email lower trim"
        " -> gate treasury",
        id="per-payee",
    ),
    pytest.param(
        "refunds: refund arg=amount_cents minor max USD 250.00 -> gate",
        Rule(
            name="refunds",
            tools=("refund",),
            arg=("amount_cents",),
            unit=Unit.MINOR,
            currency_arg=None,
            limits=(Limit("USD", 2, 25000),),
            kind=Kind.MAX,
            window=None,
            key=None,
            action=Action(ActionKind.GATE, ""),
        ),
        "refunds: refund arg=amount_cents minor max USD 250.00 -> gate",
        id="refunds",
    ),
    pytest.param(
        "metal: buy_metal arg=grams max XAU 10.000 exponent=3 -> refuse",
        Rule(
            name="metal",
            tools=("buy_metal",),
            arg=("grams",),
            unit=Unit.MAJOR,
            currency_arg=None,
            limits=(Limit("XAU", 3, 10000),),
            kind=Kind.MAX,
            window=None,
            key=None,
            action=Action(ActionKind.REFUSE),
        ),
        "metal: buy_metal arg=grams max XAU 10.000 exponent=3 -> refuse",
        id="metal",
    ),
]


@pytest.mark.parametrize(("line", "expected", "canonical"), EXAMPLES)
def test_spec_example_parses_to_the_exact_rule(line: str, expected: Rule, canonical: str) -> None:
    rule = parse_rule(line)
    assert rule == expected
    # Field by field too, so a failure names the field.
    for field in dataclasses.fields(Rule):
        assert getattr(rule, field.name) == getattr(expected, field.name), field.name
    assert rule.to_line() == canonical
    assert parse_rule(canonical) == expected


def test_spec_examples_as_one_file() -> None:
    lines = [str(param.values[0]) for param in EXAMPLES]
    expected = [param.values[1] for param in EXAMPLES]
    assert all(isinstance(rule, Rule) for rule in expected)
    assert parse_rules("\n".join(lines)) == expected
    assert parse_rules("\n".join(lines) + "\n") == expected


def test_public_names() -> None:
    for name in ("parse_rule", "parse_rules", "Rule", "Limit", "Window", "Key", "Kind"):
        assert hasattr(capcore, name), name
    assert MAX_NAME_LENGTH == 64
    assert MAX_TOOL_LENGTH == 128
    assert MAX_WINDOW_SECONDS == 366 * DAY


def test_rule_is_frozen() -> None:
    rule = parse_rule("r: pay arg=amount max USD 5 -> gate")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.name = "other"  # type: ignore[misc]


def test_limit_for() -> None:
    rule = parse_rule("r: pay arg=a currency=c max USD 1, EUR 2 -> gate")
    assert rule.limit_for("EUR") == Limit("EUR", 2, 200)
    assert rule.limit_for("JPY") is None


# ---------------------------------------------------------------------------------------------
# 2. Every production
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tools_text",
    ["pay,transfer", "pay, transfer", "pay,  transfer", "pay,\ttransfer", "pay, \t transfer"],
)
def test_tools_with_and_without_blank_after_comma(tools_text: str) -> None:
    line = f"r: {tools_text} arg=amount max USD 5 -> gate"
    parses_to(line, make(tools=("pay", "transfer")))
    assert parse_rule(line).to_line() == "r: pay,transfer arg=amount max USD 5.00 -> gate"


def test_three_tools_in_written_order() -> None:
    parses_to(
        "r: wire, pay,refund arg=amount max USD 5 -> gate",
        make(tools=("wire", "pay", "refund")),
    )


@pytest.mark.parametrize(
    "tool",
    [
        "mcp:bank/pay.v2-x",
        "_private",
        "0day",
        "a",
        "a.b.c",
        "ns::tool",
        "path/to/tool/",
        "t-",
        "T_1:2/3.4-5",
    ],
)
def test_tool_characters(tool: str) -> None:
    parses_to(f"r: {tool} arg=amount max USD 5 -> gate", make(tools=(tool,)))


@pytest.mark.parametrize(
    ("tools_text", "bad"),
    [
        (".pay", "."),
        (":pay", ":"),
        ("/pay", "/"),
        ("-pay", "-"),
        ("pay!", "!"),
        ("pay,,transfer", ",transfer"),
        ("pay,.x", "."),
        ("pa$y", "$"),
        ("päy", "ä"),
    ],
)
def test_tool_characters_refused(tools_text: str, bad: str) -> None:
    line = f"r: {tools_text} arg=amount max USD 5 -> gate"
    assert refused(line).column == len("r: ") + tools_text.index(bad) + 1


def test_tool_names_are_case_sensitive() -> None:
    parses_to("r: pay,Pay,PAY arg=amount max USD 5 -> gate", make(tools=("pay", "Pay", "PAY")))


@pytest.mark.parametrize(
    ("arg_text", "arg"),
    [
        ("amount", ("amount",)),
        ("amount.value", ("amount", "value")),
        ("a.b.c.d", ("a", "b", "c", "d")),
        ("_x.y-z.Q9", ("_x", "y-z", "Q9")),
        ("minor", ("minor",)),
        ("max", ("max",)),
    ],
)
def test_paths_with_dots(arg_text: str, arg: tuple[str, ...]) -> None:
    parses_to(f"r: pay arg={arg_text} max USD 5 -> gate", make(arg=arg))


@pytest.mark.parametrize(
    ("arg_text", "bad"),
    [
        (".amount", ".amount"),
        ("amount.", " "),  # the member missing after the dot: where it should start
        ("a..b", ".b"),
        ("1amount", "1amount"),
        ("-amount", "-amount"),
        ("a.1b", "1b"),
        ("am@ount", "@"),
        ("amount,x", ","),
        ("amount\u00a0", "\u00a0"),
    ],
)
def test_paths_refused(arg_text: str, bad: str) -> None:
    line = f"r: pay arg={arg_text} max USD 5 -> gate"
    start = len("r: pay arg=")
    assert refused(line).column == line.index(bad, start) + 1


def test_empty_path_refused() -> None:
    line = "r: pay arg= max USD 5 -> gate"
    assert refused(line).column == col(line, " max")
    line = "r: pay arg=amount currency= max USD 5 -> gate"
    assert refused(line).column == col(line, " max")


def test_minor() -> None:
    parses_to(
        "r: pay arg=cents minor max USD 2.50 -> gate",
        make(arg=("cents",), unit=Unit.MINOR, limits=(Limit("USD", 2, 250),)),
    )
    parses_to(
        "r: pay arg=cents minor currency=cur max USD 2.50, JPY 300 -> gate",
        make(
            arg=("cents",),
            unit=Unit.MINOR,
            currency_arg=("cur",),
            limits=(Limit("USD", 2, 250), Limit("JPY", 0, 300)),
        ),
    )


def test_minor_after_currency_refused() -> None:
    line = "r: pay arg=cents currency=cur minor max USD 2.50 -> gate"
    assert refused(line).column == col(line, "minor")


def test_minor_twice_refused() -> None:
    line = "r: pay arg=cents minor minor max USD 2.50 -> gate"
    assert refused(line).column == col(line, "minor", 2)


def test_currency_arg() -> None:
    parses_to(
        "r: pay arg=amount currency=money.code max EUR 5 -> gate",
        make(currency_arg=("money", "code"), limits=(Limit("EUR", 2, 500),)),
    )


@pytest.mark.parametrize(
    "limits_text",
    [
        "USD 1, EUR 2, JPY 3",
        "USD 1,EUR 2,JPY 3",
        "USD 1,\tEUR 2,  JPY 3",
        "USD 1.00, EUR 2.0,JPY 3",
    ],
)
def test_several_limits(limits_text: str) -> None:
    line = f"r: pay arg=amount currency=cur sum {limits_text} -> gate"
    expected = make(
        currency_arg=("cur",),
        kind=Kind.SUM,
        limits=(Limit("USD", 2, 100), Limit("EUR", 2, 200), Limit("JPY", 0, 3)),
    )
    parses_to(line, expected)
    assert parse_rule(line).to_line() == (
        "r: pay arg=amount currency=cur sum USD 1.00, EUR 2.00, JPY 3 -> gate"
    )


def test_limits_with_exponent_between_commas() -> None:
    parses_to(
        "r: pay arg=amount currency=cur max XAU 1.5 exponent=1,USD 2, XAG 3 exponent=0 -> gate",
        make(
            currency_arg=("cur",),
            limits=(Limit("XAU", 1, 15), Limit("USD", 2, 200), Limit("XAG", 0, 3)),
        ),
    )


def test_blank_before_comma_in_limits_refused() -> None:
    line = "r: pay arg=amount currency=cur max USD 1 , EUR 2 -> gate"
    assert refused(line).column == col(line, ",")


@pytest.mark.parametrize(
    ("limit_text", "limit"),
    [
        ("USD 500.00", Limit("USD", 2, 50000)),
        ("USD 500", Limit("USD", 2, 50000)),
        ("USD 0", Limit("USD", 2, 0)),
        ("USD 0.05", Limit("USD", 2, 5)),
        ("USD 0.5", Limit("USD", 2, 50)),
        ("JPY 5", Limit("JPY", 0, 5)),
        ("BHD 1.5", Limit("BHD", 3, 1500)),
        ("CLF 1.2345", Limit("CLF", 4, 12345)),
        ("XAU 10.000 exponent=3", Limit("XAU", 3, 10000)),
        ("XAU 10 exponent=0", Limit("XAU", 0, 10)),
        ("XAG 1 exponent=18", Limit("XAG", 18, 10**18)),
        ("XDR 7.25 exponent=2", Limit("XDR", 2, 725)),
        ("USD 5 exponent=2", Limit("USD", 2, 500)),
        ("JPY 5 exponent=0", Limit("JPY", 0, 5)),
        ("USD 92233720368547758.07", Limit("USD", 2, INT64_MAX)),
        ("JPY 9223372036854775807", Limit("JPY", 0, INT64_MAX)),
        ("XAU 9.223372036854775807 exponent=18", Limit("XAU", 18, INT64_MAX)),
    ],
)
def test_money(limit_text: str, limit: Limit) -> None:
    parses_to(f"r: pay arg=amount max {limit_text} -> gate", make(limits=(limit,)))


@pytest.mark.parametrize(
    ("window_text", "window"),
    [
        ("1m", Window(rolling_seconds=60)),
        ("90m", Window(rolling_seconds=5400)),
        ("527040m", Window(rolling_seconds=366 * DAY)),
        ("1h", Window(rolling_seconds=3600)),
        ("24h", Window(rolling_seconds=DAY)),
        ("8784h", Window(rolling_seconds=366 * DAY)),
        ("1d", Window(rolling_seconds=DAY)),
        ("7d", Window(rolling_seconds=604800)),
        ("366d", Window(rolling_seconds=366 * DAY)),
        ("day", Window(calendar=Calendar.DAY)),
        ("week", Window(calendar=Calendar.WEEK)),
        ("month", Window(calendar=Calendar.MONTH)),
    ],
)
def test_windows(window_text: str, window: Window) -> None:
    parses_to(
        f"r: pay arg=amount sum USD 5 per {window_text} -> gate",
        make(kind=Kind.SUM, window=window),
    )


@pytest.mark.parametrize(
    "window_text", ["367d", "8785h", "527041m", "1000d", "99999999999999999999d"]
)
def test_window_longer_than_366_days_refused(window_text: str) -> None:
    line = f"r: pay arg=amount sum USD 5 per {window_text} -> gate"
    assert refused(line).column == col(line, window_text)


@pytest.mark.parametrize(
    "window_text",
    ["0d", "0m", "01d", "7", "d", "7w", "7s", "7D", "1.5d", "-1d", "Day", "WEEK", "days", "year"],
)
def test_window_syntax_refused(window_text: str) -> None:
    line = f"r: pay arg=amount sum USD 5 per {window_text} -> gate"
    assert refused(line).column == col(line, window_text)


def test_window_and_key() -> None:
    parses_to(
        "r: pay arg=amount sum USD 5 per week by principal -> gate",
        make(kind=Kind.SUM, window=Window(calendar=Calendar.WEEK), key=Key(principal=True)),
    )


def test_key_before_window_refused() -> None:
    line = "r: pay arg=amount sum USD 5 by principal per week -> gate"
    assert refused(line).column == col(line, "per")


@pytest.mark.parametrize(
    ("norm", "lower", "trim"),
    [
        ("", False, False),
        (" lower", True, False),
        (" trim", False, True),
        (" lower trim", True, True),
        (" trim lower", True, True),
        ("\tlower\ttrim", True, True),
    ],
)
def test_key_arg(norm: str, lower: bool, trim: bool) -> None:
    line = f"r: pay arg=amount sum USD 5 by arg=payee.email{norm} -> gate"
    key = Key(False, ("payee", "email"), lower, trim)
    parses_to(line, make(kind=Kind.SUM, key=key))
    canonical = parse_rule(line).to_line()
    expected_norm = " lower" * lower + " trim" * trim
    assert canonical == f"r: pay arg=amount sum USD 5.00 by arg=payee.email{expected_norm} -> gate"


def test_key_principal() -> None:
    parses_to(
        "r: pay arg=amount sum USD 5 by principal -> gate",
        make(kind=Kind.SUM, key=Key(principal=True)),
    )


@pytest.mark.parametrize(
    ("action_text", "action"),
    [
        ("gate", DEFAULT_GATE),
        ("gate finance", Action(ActionKind.GATE, "finance")),
        ("gate\tfinance", Action(ActionKind.GATE, "finance")),
        ("gate a.b-c_d", Action(ActionKind.GATE, "a.b-c_d")),
        ("gate 0", Action(ActionKind.GATE, "0")),
        ("gate refuse", Action(ActionKind.GATE, "refuse")),
        ("gate gate", Action(ActionKind.GATE, "gate")),
        ("refuse", REFUSE),
    ],
)
def test_actions(action_text: str, action: Action) -> None:
    parses_to(f"r: pay arg=amount max USD 5 -> {action_text}", make(action=action))


def test_default_gate_and_refuse_have_empty_gate_names() -> None:
    assert parse_rule("r: pay arg=amount max USD 5 -> gate").action.gate == ""
    assert parse_rule("r: pay arg=amount max USD 5 -> refuse").action.gate == ""


def test_tabs_are_blanks() -> None:
    line = (
        "per-payee:\tpay,\ttransfer\targ=amount\tminor\tcurrency=cur\tsum\tUSD\t2000,\tEUR\t5"
        "\tper\t7d\tby\targ=payee.email\tlower\ttrim\t->\tgate\ttreasury"
    )
    parses_to(
        line,
        make(
            name="per-payee",
            tools=("pay", "transfer"),
            unit=Unit.MINOR,
            currency_arg=("cur",),
            limits=(Limit("USD", 2, 200000), Limit("EUR", 2, 500)),
            kind=Kind.SUM,
            window=Window(rolling_seconds=7 * DAY),
            key=Key(False, ("payee", "email"), True, True),
            action=Action(ActionKind.GATE, "treasury"),
        ),
    )


@pytest.mark.parametrize("blanks", [" ", "  ", "\t", " \t ", "\t\t"])
def test_leading_trailing_and_repeated_blanks(blanks: str) -> None:
    parts = ["r:", "pay", "arg=amount", "max", "USD", "5", "->", "gate", "finance"]
    line = blanks + blanks.join(parts) + blanks
    parses_to(line, make(action=Action(ActionKind.GATE, "finance")))
    assert parse_rule(line).to_line() == "r: pay arg=amount max USD 5.00 -> gate finance"


def test_trailing_blanks_after_default_gate_and_refuse() -> None:
    parses_to("r: pay arg=amount max USD 5 -> gate \t ", make())
    parses_to("r: pay arg=amount max USD 5 -> refuse\t", make(action=REFUSE))


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "0",
        "Z9",
        "a.b-c_d",
        "big-payment",
        "x" * MAX_NAME_LENGTH,
        "A" + "_.-" * 21,
    ],
)
def test_names(name: str) -> None:
    assert len(name) <= MAX_NAME_LENGTH
    parses_to(f"{name}: pay arg=amount max USD 5 -> gate", make(name=name))


def test_name_too_long_refused() -> None:
    line = "x" * (MAX_NAME_LENGTH + 1) + ": pay arg=amount max USD 5 -> gate"
    assert refused(line).column == 1
    line = "  " + line
    assert refused(line).column == 3


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("_r: pay arg=amount max USD 5 -> gate", "_"),
        ("-r: pay arg=amount max USD 5 -> gate", "-"),
        (".r: pay arg=amount max USD 5 -> gate", "."),
        ("r/s: pay arg=amount max USD 5 -> gate", "/"),
        ("r:s: pay arg=amount max USD 5 -> gate", "s"),
        ("r;: pay arg=amount max USD 5 -> gate", ";"),
        ("r : pay arg=amount max USD 5 -> gate", " "),
        ("r:pay arg=amount max USD 5 -> gate", "pay"),
        ("ré: pay arg=amount max USD 5 -> gate", "é"),
        (": pay arg=amount max USD 5 -> gate", ":"),
    ],
)
def test_name_syntax_refused(line: str, bad: str) -> None:
    assert refused(line).column == col(line, bad)


def test_gate_name_at_max_length() -> None:
    gate = "g" * MAX_NAME_LENGTH
    parses_to(
        f"r: pay arg=amount max USD 5 -> gate {gate}", make(action=Action(ActionKind.GATE, gate))
    )
    line = f"r: pay arg=amount max USD 5 -> gate {gate}g"
    assert refused(line).column == col(line, gate)


def test_tool_at_max_length() -> None:
    tool = "t" * MAX_TOOL_LENGTH
    parses_to(f"r: pay,{tool} arg=amount max USD 5 -> gate", make(tools=("pay", tool)))
    line = f"r: pay,{tool}t arg=amount max USD 5 -> gate"
    assert refused(line).column == col(line, tool)


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("r: pay arg=amount MAX USD 5 -> gate", "MAX"),
        ("r: pay arg=amount Max USD 5 -> gate", "Max"),
        ("r: pay arg=amount SUM USD 5 -> gate", "SUM"),
        ("r: pay arg=amount maximum USD 5 -> gate", "maximum"),
        ("r: pay arg=amount max USD 5 -> Gate", "Gate"),
        ("r: pay arg=amount max USD 5 -> GATE finance", "GATE"),
        ("r: pay arg=amount max USD 5 -> Refuse", "Refuse"),
        ("r: pay arg=amount max USD 5 -> deny", "deny"),
        ("r: pay ARG=amount max USD 5 -> gate", "ARG=amount"),
        ("r: pay Arg=amount max USD 5 -> gate", "Arg=amount"),
        ("r: pay arg = amount max USD 5 -> gate", "arg"),
        ("r: pay arg=amount Minor max USD 5 -> gate", "Minor"),
        ("r: pay arg=amount MINOR max USD 5 -> gate", "MINOR"),
        ("r: pay arg=amount Currency=c max USD 5 -> gate", "Currency=c"),
        ("r: pay arg=amount max usd 5 -> gate", "usd"),
        ("r: pay arg=amount max Usd 5 -> gate", "Usd"),
        ("r: pay arg=amount max USD 5 Exponent=2 -> gate", "Exponent=2"),
        ("r: pay arg=amount sum USD 5 Per day -> gate", "Per"),
        ("r: pay arg=amount sum USD 5 per Day -> gate", "Day"),
        ("r: pay arg=amount sum USD 5 BY principal -> gate", "BY"),
        ("r: pay arg=amount sum USD 5 by Principal -> gate", "Principal"),
        ("r: pay arg=amount sum USD 5 by ARG=x -> gate", "ARG=x"),
        ("r: pay arg=amount sum USD 5 by arg=x Lower -> gate", "Lower"),
        ("r: pay arg=amount sum USD 5 by arg=x TRIM -> gate", "TRIM"),
        ("r: pay arg=amount max USD 5 => gate", "=>"),
        ("r: pay arg=amount max USD 5 - > gate", "-"),
        ("r: pay arg=amount max USD 5 → gate", "→"),
        ("r: pay arg=amount max USD 5 gate", "gate"),
    ],
)
def test_keywords_are_exact_case_and_exact(line: str, bad: str) -> None:
    assert refused(line).column == col(line, bad)


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("r: pay arg=amount max USD 5 ->gate", "->gate"),
        ("r: pay arg=amount max USD 5-> gate", "->"),  # at what follows the amount
        ("r: pay arg=amount max USD5 -> gate", "USD5"),
        ("r: pay arg=amount maxUSD 5 -> gate", "maxUSD"),
        ("r: pay arg=amount max USD 5 -> gate  finance x", " x"),
    ],
)
def test_missing_blanks_refused(line: str, bad: str) -> None:
    error = refused(line)
    assert error.column == col(line, bad) + (1 if bad.startswith(" ") else 0)


@pytest.mark.parametrize(
    ("limit_text", "bad"),
    [
        ("USD 05", "05"),
        ("USD 1.", "."),  # the point with no digit after it
        ("USD .5", ".5"),
        ("USD -5", "-5"),
        ("USD +5", "+5"),
        ("USD 1e3", "e3"),  # the character that ends the amount, not its start
        ("USD 1_000", "_"),
        ("USD ５", "５"),
        ("USD 0x10", "x10"),
        ("US 5", "US"),
        ("USDX 5", "USDX"),
        ("U1D 5", "U1D"),
    ],
)
def test_money_syntax_refused(limit_text: str, bad: str) -> None:
    line = f"r: pay arg=amount max {limit_text} -> gate"
    assert refused(line).column == col(line, bad)


@pytest.mark.parametrize(
    ("limit_text", "bad", "expected"),
    [
        ("USD 500.0O", "O", "a digit or the end of the amount"),
        ("USD 500x", "x", "a digit, '.' or the end of the amount"),
        ("USD 12.5.0", ".0", "a digit or the end of the amount"),
        ("USD 500.", ".", "digits after the decimal point"),
        ("USD 0500", "0500", "an amount without a leading zero"),
        ("USD 5:3", ":", "a blank after the amount"),
        ("XAU 5 exponent=3x", "x ", "a digit or the end of the exponent"),
    ],
)
def test_an_amount_error_points_at_the_character_that_spoils_it(
    limit_text: str, bad: str, expected: str
) -> None:
    line = f"r: pay arg=amount max {limit_text} -> gate"
    error = refused(line)
    assert (error.column, error.expected) == (col(line, bad, line.count(bad)), expected)


def test_thousands_separator_refused() -> None:
    line = "r: pay arg=amount currency=c max USD 1,000 -> gate"
    assert refused(line).column == col(line, "000")
    line = "r: pay arg=amount max USD 1,000 -> gate"
    assert refused(line).column == col(line, "000")


def test_sum_without_window_or_key() -> None:
    parses_to("r: pay arg=amount sum USD 5 -> gate", make(kind=Kind.SUM))


# ---------------------------------------------------------------------------------------------
# 3. Refusals and their columns
# ---------------------------------------------------------------------------------------------

# (line, offending token, which occurrence of it, the expected __cause__ type or None)
REFUSALS = [
    # window or key on a max rule [per / by]
    pytest.param("r: pay arg=amount max USD 5 per day -> gate", "per", 1, None, id="window-on-max"),
    pytest.param("r: pay arg=amount max USD 5 per 7d -> gate", "per", 1, None, id="rolling-on-max"),
    pytest.param(
        "r: pay arg=amount max USD 5 by principal -> gate", "by", 1, None, id="key-on-max"
    ),
    pytest.param(
        "r: pay arg=amount currency=c max USD 5, EUR 6 by arg=payee lower -> refuse",
        "by",
        1,
        None,
        id="arg-key-on-max",
    ),
    # more than one money without currency= [the second code]
    pytest.param("r: pay arg=amount max USD 5, EUR 6 -> gate", "EUR", 1, None, id="second-money"),
    pytest.param(
        "r: pay arg=amount sum USD 5,EUR 6 per day -> gate",
        "EUR",
        1,
        None,
        id="second-money-no-blank",
    ),
    pytest.param(
        "r: pay arg=amount max USD 5, USD 6 -> gate",
        "USD",
        2,
        None,
        id="second-money-same-code",
    ),
    # lower / trim twice [the second one]
    pytest.param(
        "r: pay arg=amount sum USD 5 by arg=payee lower lower -> gate",
        "lower",
        2,
        None,
        id="lower-twice",
    ),
    pytest.param(
        "r: pay arg=amount sum USD 5 by arg=payee trim trim -> gate",
        "trim",
        2,
        None,
        id="trim-twice",
    ),
    pytest.param(
        "r: pay arg=amount sum USD 5 by arg=payee lower trim lower -> gate",
        "lower",
        2,
        None,
        id="lower-trim-lower",
    ),
    pytest.param(
        "r: pay arg=amount sum USD 5 by arg=payee trim lower trim -> gate",
        "trim",
        2,
        None,
        id="trim-lower-trim",
    ),
    # too many fraction digits [the decimal]
    pytest.param(
        "r: pay arg=amount max USD 1.234 -> gate", "1.234", 1, FractionDigits, id="usd-3-digits"
    ),
    pytest.param(
        "r: pay arg=amount max USD 1.000 -> gate", "1.000", 1, FractionDigits, id="usd-zeros"
    ),
    pytest.param(
        "r: pay arg=amount max JPY 1.5 -> gate", "1.5", 1, FractionDigits, id="jpy-fraction"
    ),
    pytest.param(
        "r: pay arg=amount max JPY 1.0 -> gate", "1.0", 1, FractionDigits, id="jpy-point-zero"
    ),
    pytest.param("r: pay arg=amount max BHD 0.0001 -> gate", "0.0001", 1, FractionDigits, id="bhd"),
    pytest.param(
        "r: pay arg=amount max XAU 1.5 exponent=0 -> gate",
        "1.5",
        1,
        FractionDigits,
        id="xau-exponent-0",
    ),
    pytest.param(
        "r: pay arg=amount currency=c max USD 5, EUR 1.001 -> gate",
        "1.001",
        1,
        FractionDigits,
        id="second-limit",
    ),
    pytest.param(
        "r: pay arg=amount minor max USD 2.505 -> gate",
        "2.505",
        1,
        FractionDigits,
        id="minor-unit-limit-still-major",
    ),
    # 64-bit overflow [the decimal]
    pytest.param(
        "r: pay arg=amount max USD 92233720368547758.08 -> gate",
        "92233720368547758.08",
        1,
        AmountOverflow,
        id="usd-int64-max-plus-1",
    ),
    pytest.param(
        "r: pay arg=amount max JPY 9223372036854775808 -> gate",
        "9223372036854775808",
        1,
        AmountOverflow,
        id="jpy-int64-max-plus-1",
    ),
    pytest.param(
        "r: pay arg=amount max USD 100000000000000000000000 -> gate",
        "100000000000000000000000",
        1,
        AmountOverflow,
        id="many-digits",
    ),
    pytest.param(
        "r: pay arg=amount max XAU 10 exponent=18 -> gate",
        "10",
        1,
        AmountOverflow,
        id="xau-exponent-18",
    ),
    # unknown currency, or a code without a minor unit and no exponent= [the code]
    pytest.param("r: pay arg=amount max USS 5 -> gate", "USS", 1, UnknownCurrency, id="unknown"),
    pytest.param(
        "r: pay arg=amount max ABC 5 -> gate", "ABC", 1, UnknownCurrency, id="unknown-abc"
    ),
    pytest.param(
        "r: pay arg=amount max USS 5 exponent=2 -> gate",
        "USS",
        1,
        UnknownCurrency,
        id="unknown-with-exponent",
    ),
    pytest.param(
        "r: pay arg=amount max XAU 5 -> gate", "XAU", 1, UnknownCurrency, id="xau-no-exponent"
    ),
    pytest.param(
        "r: pay arg=amount max XDR 5 -> gate", "XDR", 1, UnknownCurrency, id="xdr-no-exponent"
    ),
    pytest.param(
        "r: pay arg=amount max XXX 5 -> gate", "XXX", 1, UnknownCurrency, id="xxx-no-exponent"
    ),
    pytest.param(
        "r: pay arg=amount currency=c max USD 5, XAG 6 -> gate",
        "XAG",
        1,
        UnknownCurrency,
        id="second-limit-no-exponent",
    ),
    # exponent= contradicting the table or outside 0..18 [the exponent= token]
    pytest.param(
        "r: pay arg=amount max USD 5 exponent=3 -> gate",
        "exponent=",
        1,
        ExponentError,
        id="usd-exponent-3",
    ),
    pytest.param(
        "r: pay arg=amount max JPY 5 exponent=2 -> gate",
        "exponent=",
        1,
        ExponentError,
        id="jpy-exponent-2",
    ),
    pytest.param(
        "r: pay arg=amount max USD 5 exponent=0 -> gate",
        "exponent=",
        1,
        ExponentError,
        id="usd-exponent-0",
    ),
    pytest.param(
        "r: pay arg=amount max XAU 5 exponent=19 -> gate",
        "exponent=",
        1,
        ExponentError,
        id="xau-exponent-19",
    ),
    pytest.param(
        "r: pay arg=amount max XAU 5 exponent=99 -> gate",
        "exponent=",
        1,
        ExponentError,
        id="xau-exponent-99",
    ),
    pytest.param(
        "r: pay arg=amount max XAU 5 exponent=100 -> gate",
        "exponent=",
        1,
        None,
        id="xau-exponent-100",
    ),
    pytest.param(
        "r: pay arg=amount max XAU 5 exponent=05 -> gate",
        "exponent=",
        1,
        None,
        id="xau-exponent-leading-zero",
    ),
    pytest.param(
        "r: pay arg=amount max XAU 5 exponent=" + "9" * 40 + " -> gate",
        "exponent=",
        1,
        None,
        id="xau-exponent-huge",
    ),
    pytest.param(
        "r: pay arg=amount currency=c max USD 5, XAU 5 exponent=19, EUR 1 -> gate",
        "exponent=",
        1,
        ExponentError,
        id="second-limit-exponent",
    ),
    # a repeated tool or currency [the repeat]
    pytest.param(
        "r: pay,transfer,pay arg=amount max USD 5 -> gate", "pay", 2, None, id="repeated-tool"
    ),
    pytest.param(
        "r: pay, pay arg=amount max USD 5 -> gate", "pay", 2, None, id="repeated-tool-blank"
    ),
    pytest.param(
        "r: pay,Pay,pay arg=amount max USD 5 -> gate", "pay", 2, None, id="repeated-tool-case"
    ),
    pytest.param(
        "r: pay arg=amount currency=c max USD 5, EUR 6, USD 7 -> gate",
        "USD",
        2,
        None,
        id="repeated-currency",
    ),
    pytest.param(
        "r: pay arg=amount currency=c max XAU 5 exponent=3,XAU 6 exponent=3 -> gate",
        "XAU",
        2,
        None,
        id="repeated-currency-exponent",
    ),
    # anything after the action [the first extra token]
    pytest.param(
        "r: pay arg=amount max USD 5 -> gate finance extra",
        "extra",
        1,
        None,
        id="after-gate-name",
    ),
    pytest.param(
        "r: pay arg=amount max USD 5 -> gate finance \t extra more",
        "extra",
        1,
        None,
        id="after-gate-name-blanks",
    ),
    pytest.param(
        "r: pay arg=amount max USD 5 -> refuse extra", "extra", 1, None, id="after-refuse"
    ),
    pytest.param(
        "r: pay arg=amount max USD 5 -> refuse finance",
        "finance",
        1,
        None,
        id="refuse-with-gate-name",
    ),
    pytest.param("r: pay arg=amount max USD 5 -> gate ->", "->", 2, None, id="gate-then-arrow"),
    pytest.param(
        "r: pay arg=amount max USD 5 -> gate finance #comment",
        "#",
        1,
        None,
        id="no-trailing-comments",
    ),
]


@pytest.mark.parametrize(("line", "token", "occurrence", "cause"), REFUSALS)
def test_refusal_column(
    line: str, token: str, occurrence: int, cause: type[BaseException] | None
) -> None:
    error = refused(line)
    assert error.column == col(line, token, occurrence)
    if cause is None:
        assert error.__cause__ is None
    else:
        assert type(error.__cause__) is cause


def test_the_same_line_is_accepted_without_the_offending_part() -> None:
    """The refusal fixtures are one mistake away from a valid rule."""
    parse_rule("r: pay arg=amount sum USD 5 per day -> gate")
    parse_rule("r: pay arg=amount sum USD 5 by arg=payee lower trim -> gate")
    parse_rule("r: pay arg=amount currency=c max USD 5, EUR 6 -> gate")
    parse_rule("r: pay arg=amount max XAU 5 exponent=18 -> gate")
    parse_rule("r: pay arg=amount max USD 5 -> gate finance")


@pytest.mark.parametrize(
    "line",
    [
        "r: pay arg=amount max USD 5 -> gate\r",
        "r: pay arg=amount max USD 5 -> gate finance\r",
        "r: pay arg=amount max USD 5 -> refuse\r",
        "r: pay arg=amount max USD 5 -> refuse \r",
        "r: pay arg=amount max USD 5 -> gate\r\n",
        "r\r: pay arg=amount max USD 5 -> gate",
        "r:\rpay arg=amount max USD 5 -> gate",
        "r: pay\r arg=amount max USD 5 -> gate",
        "r: pay,\rtransfer arg=amount max USD 5 -> gate",
        "r: pay arg=amount\r max USD 5 -> gate",
        "r: pay arg=amount max\rUSD 5 -> gate",
        "r: pay arg=amount max USD\r5 -> gate",
        "r: pay arg=amount max USD 5\r-> gate",
        "r: pay arg=amount max USD 5 ->\rgate",
        "r: pay arg=amount max USD 5 -> gate\rfinance",
        "r: pay arg=amount max USD 5 exponent=2\r-> gate",
        "r: pay arg=amount sum USD 5 per\rday -> gate",
        "r: pay arg=amount sum USD 5 per day\r-> gate",
        "r: pay arg=amount sum USD 5 per 7d\r-> gate",
        "r: pay arg=amount sum USD 5 by\rprincipal -> gate",
        "r: pay arg=amount sum USD 5 by principal\r-> gate",
        "r: pay arg=amount sum USD 5 by arg=p lower\r-> gate",
        "\rr: pay arg=amount max USD 5 -> gate",
    ],
)
@pytest.mark.parametrize("foreign", ["\r", "\u00a0", "\u2003", "\x0b", "\x0c", "\u200b"])
def test_foreign_character_is_an_error_at_its_column(line: str, foreign: str) -> None:
    """No character but space and tab is blank; the error points at the intruder."""
    line = line.replace("\r", foreign)
    assert refused(line).column == line.index(foreign) + 1


def test_nbsp_between_every_pair_of_tokens() -> None:
    line = "r: pay arg=amount minor currency=c sum USD 5 per day by principal -> gate x"
    tokens = line.split(" ")
    for position in range(1, len(tokens)):
        line = " ".join(tokens[:position]) + "\u00a0" + " ".join(tokens[position:])
        assert refused(line).column == line.index("\u00a0") + 1, line


@pytest.mark.parametrize(
    "line",
    [
        "",
        "r",
        "r:",
        "r: ",
        "r: pay",
        "r: pay,",
        "r: pay, ",
        "r: pay arg=",
        "r: pay arg=amount",
        "r: pay arg=amount.",
        "r: pay arg=amount minor",
        "r: pay arg=amount currency=",
        "r: pay arg=amount currency=c",
        "r: pay arg=amount max",
        "r: pay arg=amount max USD",
        "r: pay arg=amount max USD 5",
        "r: pay arg=amount max USD 5 exponent=",
        "r: pay arg=amount currency=c max USD 5,",
        "r: pay arg=amount sum USD 5 per",
        "r: pay arg=amount sum USD 5 per day",
        "r: pay arg=amount sum USD 5 by",
        "r: pay arg=amount sum USD 5 by principal",
        "r: pay arg=amount sum USD 5 by arg=",
        "r: pay arg=amount sum USD 5 by arg=p",
        "r: pay arg=amount sum USD 5 by arg=p lower",
        "r: pay arg=amount sum USD 5 by arg=p lower trim",
        "r: pay arg=amount max USD 5 ->",
    ],
)
@pytest.mark.parametrize("trailing", ["", " ", "\t  "])
def test_token_missing_at_the_end(line: str, trailing: str) -> None:
    line += trailing
    assert refused(line).column == len(line) + 1


def test_error_fields_and_text_from_parse_rule() -> None:
    line = "r: pay arg=amount"
    error = refused(line)
    assert error.line is None
    assert error.column == 18
    assert error.expected == "'max' or 'sum'"
    assert str(error) == "column 18: expected 'max' or 'sum'"
    assert isinstance(error, capcore.CapcoreError)


def test_leading_blanks_count_in_columns() -> None:
    for lead in ["", " ", "   ", "\t", " \t \t"]:
        line = f"{lead}r: pay arg=amount MAX USD 5 -> gate"
        assert refused(line).column == len(lead) + 19


def test_a_tab_counts_one_column() -> None:
    line = "r:\tpay\targ=amount\tmax\tUSD\t5\t->\tgate\tx\ty"
    assert refused(line).column == col(line, "\ty") + 1 == 39


def test_columns_count_code_points() -> None:
    # Each of these is one code point (and more than one UTF-8/UTF-16 unit).
    line = "r: pay arg=amount max USD 5 -> gate x 😀é"
    assert refused(line).column == col(line, "😀") == len(line) - 1


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("r: pay arg=amount max USS 5 -> gate", UnknownCurrency),
        ("r: pay arg=amount max XAU 5 -> gate", UnknownCurrency),
        ("r: pay arg=amount max USD 5 exponent=3 -> gate", ExponentError),
        ("r: pay arg=amount max XAU 5 exponent=19 -> gate", ExponentError),
        ("r: pay arg=amount max USD 5.001 -> gate", FractionDigits),
        ("r: pay arg=amount max USD 92233720368547758.08 -> gate", AmountOverflow),
    ],
)
def test_table_and_amount_errors_are_rule_errors_with_cause(
    line: str, cause: type[Exception]
) -> None:
    error = refused(line)
    assert type(error) is RuleError
    assert type(error.__cause__) is cause
    assert not isinstance(error, cause)


# ---------------------------------------------------------------------------------------------
# 4. parse_rules
# ---------------------------------------------------------------------------------------------

A = "a: pay arg=amount max USD 1 -> gate"
B = "b: pay arg=amount sum USD 2 per day -> refuse"
C = "c: wire arg=amount max JPY 3 -> gate finance"
RULES_ABC = [parse_rule(A), parse_rule(B), parse_rule(C)]


def test_parse_rules_str() -> None:
    assert parse_rules(f"{A}\n{B}\n{C}") == RULES_ABC
    assert parse_rules(f"{A}\n{B}\n{C}\n") == RULES_ABC
    assert parse_rules("") == []
    assert parse_rules("\n\n") == []


def test_parse_rules_crlf() -> None:
    assert parse_rules(f"{A}\r\n{B}\r\n{C}\r\n") == RULES_ABC
    assert parse_rules(f"{A}\r\n{B}\n{C}\r") == RULES_ABC
    assert parse_rules(f"{A}\r\n\r\n# note\r\n  \r\n{B}\r\n{C}") == RULES_ABC


def test_parse_rules_drops_only_one_cr() -> None:
    error = refused_file(f"{A}\n{B}\r\r\n{C}")
    assert (error.line, error.column) == (2, len(B) + 1)


@pytest.mark.parametrize(
    "separator", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
)
def test_parse_rules_splits_on_newline_only(separator: str) -> None:
    error = refused_file(f"{A}\n{B}{separator}{C}\n")
    assert (error.line, error.column) == (2, len(B) + 1)


def test_parse_rules_iterable() -> None:
    assert parse_rules([f"{A}\n", f"{B}\r\n", C]) == RULES_ABC
    assert parse_rules(iter([A, B, C])) == RULES_ABC
    assert parse_rules(line for line in [A + "\n", "\n", "# x\r\n", B + "\n", C]) == RULES_ABC
    assert parse_rules([]) == []


def test_parse_rules_file_objects() -> None:
    assert parse_rules(io.StringIO(f"{A}\n{B}\n{C}\n")) == RULES_ABC
    # A file opened with newline="" keeps the "\r\n" on each line.
    assert parse_rules(io.StringIO(f"{A}\r\n{B}\r\n{C}\r\n", newline="")) == RULES_ABC


def test_parse_rules_iterable_items_lose_one_line_ending() -> None:
    error = refused_file([A, B + "\n\n", C])
    assert (error.line, error.column) == (2, len(B) + 1)
    error = refused_file([A, B + "\r\n\r\n", C])
    assert (error.line, error.column) == (2, len(B) + 1)
    error = refused_file([A, f"{B}\n{C}"])
    assert (error.line, error.column) == (2, len(B) + 1)


@pytest.mark.parametrize(
    "skipped",
    [
        "",
        " ",
        "   ",
        "\t",
        " \t \t",
        "#",
        "# comment",
        "#" + LEAK,
        "   # indented",
        "\t#x",
        "# \r\u00a0 junk",
    ],
)
def test_parse_rules_skips_blank_and_comment_lines(skipped: str) -> None:
    assert parse_rules(f"{skipped}\n{A}\n{skipped}\n{B}\n{skipped}\n{C}\n{skipped}") == RULES_ABC
    assert parse_rules([skipped, A, skipped, B, C, skipped]) == RULES_ABC


@pytest.mark.parametrize("not_blank", ["\u00a0", "\x0c", "\x0b", " \u3000 ", "\u200b"])
def test_parse_rules_only_spaces_and_tabs_are_blank(not_blank: str) -> None:
    error = refused_file(f"{A}\n{not_blank}\n{B}")
    assert error.line == 2
    assert error.column == len(not_blank) - len(not_blank.lstrip(" \t")) + 1


def test_parse_rules_line_numbers_count_skipped_lines() -> None:
    bad = "d: pay arg=amount MAX USD 5 -> gate"
    text = f"# header\n\n{A}\n   \n# {B}\n{bad}\n{C}"
    error = refused_file(text)
    assert error.line == 6
    assert error.column == col(bad, "MAX")
    assert str(error) == f"line 6, column {col(bad, 'MAX')}: expected {error.expected}"
    assert str(error).startswith("line 6, column 19:")
    # The same with CRLF and as an iterable.
    error = refused_file(text.replace("\n", "\r\n"))
    assert (error.line, error.column) == (6, 19)
    error = refused_file(text.splitlines(keepends=True))
    assert (error.line, error.column) == (6, 19)


def test_parse_rules_error_on_first_line() -> None:
    error = refused_file("r: pay arg=amount")
    assert (error.line, error.column) == (1, 18)
    assert str(error) == "line 1, column 18: expected 'max' or 'sum'"


def test_parse_rules_token_missing_at_the_end_of_a_crlf_line() -> None:
    # The "\r" is dropped first, so the missing token is just after the line's text.
    error = refused_file(f"{A}\r\nr: pay arg=amount\r\n")
    assert (error.line, error.column) == (2, 18)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("daily", "daily"),
        ("daily", "Daily"),
        ("Daily", "daily"),
        ("daily", "DAILY"),
        ("a-B.c_D", "A-b.C_d"),
        ("x1", "X1"),
    ],
)
def test_parse_rules_refuses_names_equal_under_casefold(first: str, second: str) -> None:
    text = (
        f"{first}: pay arg=amount max USD 1 -> gate\n# c\n\n"
        f"{second}: wire arg=x max EUR 2 -> refuse"
    )
    error = refused_file(text)
    assert (error.line, error.column) == (4, 1)
    assert error.__cause__ is None


def test_a_duplicate_name_names_the_line_that_defined_it_first() -> None:
    text = f"# rules\n{A}\n{B}\n\n{C}\nB: wire arg=x max EUR 2 -> refuse\n"
    error = refused_file(text)
    assert (error.line, error.column) == (6, 1)
    assert str(error) == (
        "line 6, column 1: expected a rule name not used before "
        "(already defined on line 3; names match ignoring case)"
    )


def test_parse_rules_duplicate_name_on_indented_line() -> None:
    text = f"{A}\n{B}\n  \ta: wire arg=x max EUR 2 -> refuse\n"
    error = refused_file(text)
    assert (error.line, error.column) == (3, 4)
    error = refused_file([A, B, "  \tA: wire arg=x max EUR 2 -> refuse"])
    assert (error.line, error.column) == (3, 4)


def test_parse_rules_distinct_names_accepted() -> None:
    rules = parse_rules(
        [
            "daily: pay arg=amount max USD 1 -> gate",
            "daily2: pay arg=amount max USD 1 -> gate",
            "daily-: pay arg=amount max USD 1 -> gate",
            "dai.ly: pay arg=amount max USD 1 -> gate",
        ]
    )
    assert [rule.name for rule in rules] == ["daily", "daily2", "daily-", "dai.ly"]


def test_parse_rules_keeps_order() -> None:
    assert parse_rules([C, A, B]) == [RULES_ABC[2], RULES_ABC[0], RULES_ABC[1]]


def test_parse_rules_with_lines_numbers_each_rule_with_its_line() -> None:
    text = f"# header\r\n\r\n  {A}\t\r\n# {B}\n{B}\n\n{C}"
    assert parse_rules_with_lines(text) == [
        RuleLine(3, f"  {A}\t", RULES_ABC[0]),
        RuleLine(5, B, RULES_ABC[1]),
        RuleLine(7, C, RULES_ABC[2]),
    ]
    assert parse_rules_with_lines([f"{A}\n", "\n", f"{B}\r\n"]) == [
        RuleLine(1, A, RULES_ABC[0]),
        RuleLine(3, B, RULES_ABC[1]),
    ]
    assert parse_rules_with_lines("") == []


def test_parse_rules_with_lines_is_parse_rules() -> None:
    text = f"# x\n{C}\n\n{A}\r\n  {B}"
    assert [line.rule for line in parse_rules_with_lines(text)] == parse_rules(text)
    for line in parse_rules_with_lines(text):
        assert parse_rule(line.text) == line.rule
        assert text.replace("\r", "").split("\n")[line.number - 1] == line.text


def test_parse_rules_with_lines_refuses_as_parse_rules_does() -> None:
    for text in (f"{A}\nr: pay arg=amount\n", f"{A}\n{B}\nA: wire arg=x max EUR 2 -> refuse"):
        with pytest.raises(RuleError) as with_lines:
            parse_rules_with_lines(text)
        error = refused_file(text)
        assert (with_lines.value.line, with_lines.value.column) == (error.line, error.column)


def test_check_rules_collects_every_bad_line_in_file_order() -> None:
    text = (
        f"{A}\n"
        "r: pay arg=amount\n"  # line 2: kind missing
        "# comment\n"
        f"{B}\n"
        "A: wire arg=x max EUR 2 -> refuse\n"  # line 5: the name of line 1
        "\n"
        "s: pay arg=amount max usd 5 -> gate\n"  # line 7: lower-case code
        f"{C}\n"
        "t: pay arg=amount max XAU 5 -> gate\n"  # line 9: no exponent=
    )
    rules, errors = check_rules(text)
    assert rules == parse_rules_with_lines(f"{A}\n\n\n{B}\n\n\n\n{C}")
    assert [(error.line, error.column) for error in errors] == [(2, 18), (5, 1), (7, 23), (9, 23)]
    assert all(isinstance(error, RuleError) for error in errors)
    # parse_rules still raises on the first of them.
    assert (refused_file(text).line, refused_file(text).column) == (2, 18)


def test_check_rules_of_a_clean_file_has_no_errors() -> None:
    assert check_rules(f"{A}\n{B}\n{C}") == (parse_rules_with_lines(f"{A}\n{B}\n{C}"), [])
    assert check_rules("") == ([], [])


def test_a_refused_line_does_not_reserve_its_name() -> None:
    # The bad line's name is unknown, so a later rule of that name is not a duplicate.
    rules, errors = check_rules(["a: pay arg=amount", "a: pay arg=amount max USD 1 -> gate"])
    assert [line.number for line in rules] == [2]
    assert [error.line for error in errors] == [1]


# ---------------------------------------------------------------------------------------------
# 4b. Error texts that say what is wrong
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["XAU", "XAG", "XDR", "XPT"])
def test_a_code_without_minor_unit_and_no_exponent_names_the_fix(code: str) -> None:
    line = f"r: pay arg=amount max {code} 10 -> gate"
    error = refused(line)
    assert error.column == col(line, code)
    assert error.expected == (
        f"exponent=N after the amount: {code} has no minor unit in ISO 4217"
        f" (e.g. {code} 10 exponent=3)"
    )
    # The fix it names parses.
    parse_rule(f"r: pay arg=amount max {code} 10 exponent=3 -> gate")


def test_an_unknown_code_is_not_named() -> None:
    error = refused("r: pay arg=amount max ZQX 10 -> gate")
    assert error.expected == "a currency code of the ISO 4217 table"
    assert "ZQX" not in str(error)


@pytest.mark.parametrize(
    ("char", "name"),
    [
        ("\u00a0", "U+00A0 NO-BREAK SPACE"),
        ("\u200b", "U+200B ZERO WIDTH SPACE"),
        ("\u3000", "U+3000 IDEOGRAPHIC SPACE"),
        ("\ufeff", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
        ("\x0b", "U+000B LINE TABULATION"),
        ("\r", "U+000D CARRIAGE RETURN"),
        ("\x01", "U+0001 (a control character)"),
        ("\ue000", "U+E000 (a private-use character)"),
        ("\U000e0080", "U+E0080 (unassigned)"),
    ],
)
def test_an_invisible_character_is_named_by_code_point(char: str, name: str) -> None:
    line = f"r: pay arg=amount{char}max USD 5 -> gate"
    error = refused(line)
    assert error.column == line.index(char) + 1
    assert error.found == name
    assert str(error) == f"column {error.column}: expected 'max' or 'sum', found {name}"


def test_the_no_break_space_of_the_issue() -> None:
    error = refused("r: pay arg=amount\u00a0max USD 5 -> gate")
    assert str(error) == "column 18: expected 'max' or 'sum', found U+00A0 NO-BREAK SPACE"


def test_a_tab_where_a_token_must_start_is_named() -> None:
    error = refused("r: pay arg=\tamount max USD 5 -> gate")
    assert (error.column, error.found) == (12, "U+0009 CHARACTER TABULATION")


def test_a_visible_non_ascii_character_is_named_too() -> None:
    error = refused("r: pay arg=amount max USD \uff15 -> gate")
    assert error.found == "U+FF15 FULLWIDTH DIGIT FIVE"


def test_a_visible_ascii_character_is_not_named() -> None:
    error = refused("r: pay arg=amount MAX USD 5 -> gate")
    assert error.found is None
    assert str(error) == "column 19: expected 'max' or 'sum'"


def test_a_token_missing_at_the_end_names_nothing() -> None:
    assert refused("r: pay arg=amount \t ").found is None


def test_a_named_character_never_brings_the_rest_of_the_line() -> None:
    error = refused(f"r: pay arg=amount\u00a0{LEAK} USD 5 -> gate {LEAK}")
    assert_no_leak(error, LEAK)
    assert error.found == name_of_character("\u00a0")


# ---------------------------------------------------------------------------------------------
# 5. Errors never contain the line's text
# ---------------------------------------------------------------------------------------------

LEAKY_LINES = [
    pytest.param(f"r: pay arg=amount max {LEAK} 5 -> gate", LEAK, id="as-currency"),
    pytest.param("r: pay arg=amount max ZQX 5 -> gate", "ZQX", id="unknown-3-letter-code"),
    pytest.param(f"r: pay arg=amount max ZQX 5 exponent=2 -> gate {LEAK}", LEAK, id="code+tail"),
    pytest.param(f"r: pay arg=amount max USD 5{LEAK} -> gate", LEAK, id="amount-suffix"),
    pytest.param(f"r: pay arg=amount max USD 5.{LEAK} -> gate", LEAK, id="amount-fraction"),
    pytest.param(
        "r: pay arg=amount max USD 1.7731773177 -> gate", "7731773177", id="fraction-digits"
    ),
    pytest.param(
        "r: pay arg=amount max USD 77317731773177317731 -> gate",
        "77317731773177317731",
        id="overflow",
    ),
    pytest.param(f"r: pay arg=amount max USD 5 exponent={LEAK} -> gate", LEAK, id="exponent-junk"),
    pytest.param(
        "r: pay arg=amount max XAU 5 exponent=77 -> gate", "exponent=77", id="exponent-77"
    ),
    pytest.param(f"r: pay arg=amount max USD 5 -> gate finance {LEAK}", LEAK, id="trailing"),
    pytest.param(f"r: pay arg=amount max USD 5 -> refuse {LEAK}", LEAK, id="after-refuse"),
    pytest.param(f"r: pay arg=amount max USD 5 -> gate{LEAK}", LEAK, id="glued-to-gate"),
    pytest.param(f"{LEAK * 9}: pay arg=amount max USD 5 -> gate", LEAK, id="name-too-long"),
    pytest.param(f"r: {LEAK * 17} arg=amount max USD 5 -> gate", LEAK, id="tool-too-long"),
    pytest.param(f"r: pay arg=amount max USD 5 -> gate {LEAK * 9}", LEAK, id="gate-name-too-long"),
    pytest.param(f"r: pay,{LEAK},{LEAK} arg=amount max USD 5 -> gate", LEAK, id="repeat-tool"),
    pytest.param(f"r: pay arg=amount {LEAK} USD 5 -> gate", LEAK, id="as-kind"),
    pytest.param(f"r: pay arg={LEAK}! max USD 5 -> gate", LEAK, id="in-path"),
    pytest.param(f"r: pay arg=amount sum USD 5 per {LEAK} -> gate", LEAK, id="as-window"),
    pytest.param(f"r: pay arg=amount sum USD 5 by arg={LEAK} lower lower -> gate", LEAK, id="key"),
    pytest.param(f"r: pay arg=amount max USD 5 -> gate {LEAK}\r ", LEAK, id="before-cr"),
    pytest.param(f"{LEAK}\u00a0: pay arg=amount max USD 5 -> gate", LEAK, id="before-nbsp"),
    pytest.param(LEAK * 10_000, LEAK, id="huge"),
    pytest.param(f"r: pay arg=amount max USD {'7' * 5000} -> gate", "7" * 50, id="huge-amount"),
]


@pytest.mark.parametrize(("line", "token"), LEAKY_LINES)
def test_errors_never_contain_the_line(line: str, token: str) -> None:
    error = refused(line)
    assert token not in error.expected
    assert token not in str(error)
    assert token not in repr(error)
    assert all(token not in repr(arg) for arg in error.args)
    assert_no_leak(error, token)
    assert len(str(error)) < 200


@pytest.mark.parametrize(("line", "token"), LEAKY_LINES)
def test_errors_from_parse_rules_never_contain_the_line(line: str, token: str) -> None:
    error = refused_file(f"{A}\n{line}")
    assert error.line == 2
    assert_no_leak(error, token)


def test_duplicate_name_error_never_contains_the_name() -> None:
    name = LEAK + "-rule"
    error = refused_file(
        [
            f"{name}: pay arg=amount max USD 1 -> gate",
            f"{name.upper()}: pay arg=a max USD 1 -> gate",
        ]
    )
    assert_no_leak(error, LEAK)
    assert_no_leak(error, LEAK.lower())


# ---------------------------------------------------------------------------------------------
# 6. Window and Key refuse inconsistent construction
# ---------------------------------------------------------------------------------------------


def test_window_construction() -> None:
    assert Window(calendar=Calendar.DAY).rolling_seconds is None
    assert Window(rolling_seconds=60).calendar is None
    with pytest.raises(ValueError, match="window"):
        Window()
    with pytest.raises(ValueError, match="window"):
        Window(None, None)
    with pytest.raises(ValueError, match="window"):
        Window(rolling_seconds=DAY, calendar=Calendar.DAY)
    with pytest.raises(ValueError, match="window"):
        Window(calendar="year")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        Window(rolling_seconds=0)
    with pytest.raises(ValueError, match="window"):
        Window(rolling_seconds=-60)
    with pytest.raises(ValueError, match="window"):
        Window(rolling_seconds=MAX_WINDOW_SECONDS + 60)


def test_key_construction() -> None:
    assert Key(principal=True) == Key(True, (), False, False)
    assert Key(False, ("a",), True, True).path == ("a",)
    with pytest.raises(ValueError, match="key"):
        Key(True, ("a",))
    with pytest.raises(ValueError, match="key"):
        Key(True, (), True, False)
    with pytest.raises(ValueError, match="key"):
        Key(True, (), False, True)
    with pytest.raises(ValueError, match="key"):
        Key(True, ("a",), True, True)
    # A member-path key needs a member path.
    with pytest.raises(ValueError, match="key"):
        Key(False, ())
    with pytest.raises(ValueError, match="key"):
        Key(False)


# ---------------------------------------------------------------------------------------------
# 7. Canonical lines
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit_text", "canonical"),
    [
        ("USD 1000", "USD 1000.00"),
        ("USD 1000.5", "USD 1000.50"),
        ("USD 0", "USD 0.00"),
        ("USD 0.05", "USD 0.05"),
        ("JPY 5", "JPY 5"),
        ("JPY 0", "JPY 0"),
        ("BHD 1.5", "BHD 1.500"),
        ("CLF 2", "CLF 2.0000"),
        ("USD 5 exponent=2", "USD 5.00"),
        ("JPY 5 exponent=0", "JPY 5"),
        ("BHD 1 exponent=3", "BHD 1.000"),
        ("XAU 10 exponent=3", "XAU 10.000 exponent=3"),
        ("XAU 10.000 exponent=3", "XAU 10.000 exponent=3"),
        ("XAU 10 exponent=0", "XAU 10 exponent=0"),
        ("XAG 1.5 exponent=18", "XAG 1.500000000000000000 exponent=18"),
        ("XDR 3 exponent=2", "XDR 3.00 exponent=2"),
    ],
)
def test_to_line_limits(limit_text: str, canonical: str) -> None:
    line = f"r: pay arg=amount max {limit_text} -> gate"
    assert parse_rule(line).to_line() == f"r: pay arg=amount max {canonical} -> gate"


def test_to_line_several_limits() -> None:
    line = (
        "r: pay arg=amount currency=c max USD 1,EUR 2.5,\tXAU 3 exponent=1, JPY 4 exponent=0"
        " -> gate"
    )
    assert parse_rule(line).to_line() == (
        "r: pay arg=amount currency=c max USD 1.00, EUR 2.50, XAU 3.0 exponent=1, JPY 4 -> gate"
    )


@pytest.mark.parametrize(
    ("window_text", "canonical"),
    [
        ("24h", "1d"),
        ("90m", "90m"),
        ("120m", "2h"),
        ("60m", "1h"),
        ("1440m", "1d"),
        ("2880m", "2d"),
        ("1500m", "25h"),
        ("48h", "2d"),
        ("36h", "36h"),
        ("7d", "7d"),
        ("8784h", "366d"),
        ("527040m", "366d"),
        ("day", "day"),
        ("week", "week"),
        ("month", "month"),
    ],
)
def test_to_line_windows(window_text: str, canonical: str) -> None:
    line = f"r: pay arg=amount sum USD 5 per {window_text} -> gate"
    assert parse_rule(line).to_line() == f"r: pay arg=amount sum USD 5.00 per {canonical} -> gate"


def test_to_line_single_spaces_and_default_gate() -> None:
    line = (
        "  big:\tpay,  transfer\t arg=amount  minor currency=c  sum USD 1,\t EUR 2  per 24h"
        "  by  arg=p.q  trim  lower  ->  gate  "
    )
    assert parse_rule(line).to_line() == (
        "big: pay,transfer arg=amount minor currency=c sum USD 1.00, EUR 2.00 per 1d"
        " by arg=p.q lower trim -> gate"
    )


def test_to_line_of_constructed_rules() -> None:
    assert make().to_line() == "r: pay arg=amount max USD 5.00 -> gate"
    assert make(action=REFUSE).to_line() == "r: pay arg=amount max USD 5.00 -> refuse"
    rule = make(
        kind=Kind.SUM,
        limits=(Limit("XPT", 4, 12345),),
        window=Window(rolling_seconds=3 * 3600),
        key=Key(False, ("who",), False, True),
        action=Action(ActionKind.GATE, "ops"),
    )
    assert rule.to_line() == (
        "r: pay arg=amount sum XPT 1.2345 exponent=4 per 3h by arg=who trim -> gate ops"
    )
    assert parse_rule(rule.to_line()) == rule


# ---------------------------------------------------------------------------------------------
# 8. Properties
# ---------------------------------------------------------------------------------------------

NAME_FIRST = string.ascii_letters + string.digits
NAME_REST = NAME_FIRST + "_.-"
TOOL_FIRST = NAME_FIRST + "_"
TOOL_REST = TOOL_FIRST + ".:/-"
MEMBER_FIRST = string.ascii_letters + "_"
MEMBER_REST = MEMBER_FIRST + string.digits + "-"
TABLE_CODES = ("USD", "EUR", "JPY", "BHD", "CLF")
NO_MINOR_UNIT_CODES = ("XAU", "XAG")


def words(first: str, rest: str, max_size: int) -> st.SearchStrategy[str]:
    return st.builds(
        lambda head, tail: head + tail,
        st.sampled_from(first),
        st.text(rest, max_size=max_size - 1),
    )


names = st.one_of(
    words(NAME_FIRST, NAME_REST, 12),
    words(NAME_FIRST, NAME_REST, MAX_NAME_LENGTH),
)
tools_ = words(TOOL_FIRST, TOOL_REST, 16) | words(TOOL_FIRST, TOOL_REST, MAX_TOOL_LENGTH)
members = words(MEMBER_FIRST, MEMBER_REST, 10)
paths = st.lists(members, min_size=1, max_size=3).map(tuple)
windows = st.one_of(
    st.sampled_from(list(Calendar)).map(lambda c: Window(calendar=c)),
    st.integers(1, MAX_WINDOW_SECONDS // 60).map(lambda m: Window(rolling_seconds=m * 60)),
    st.integers(1, 8784).map(lambda h: Window(rolling_seconds=h * 3600)),
    st.integers(1, 366).map(lambda d: Window(rolling_seconds=d * DAY)),
)
keys = st.one_of(
    st.just(Key(principal=True)),
    st.builds(Key, st.just(False), paths, st.booleans(), st.booleans()),
)
actions = st.one_of(
    st.just(REFUSE),
    st.just(DEFAULT_GATE),
    names.map(lambda gate: Action(ActionKind.GATE, gate)),
)


@st.composite
def limits_of(draw: st.DrawFn, count: int) -> tuple[Limit, ...]:
    codes = draw(
        st.lists(
            st.sampled_from(TABLE_CODES + NO_MINOR_UNIT_CODES),
            min_size=count,
            max_size=count,
            unique=True,
        )
    )
    limits = []
    for code in codes:
        exp = draw(st.integers(0, 18)) if code in NO_MINOR_UNIT_CODES else exponent(code)
        minor = draw(st.integers(0, INT64_MAX) | st.sampled_from([0, 1, INT64_MAX]))
        limits.append(Limit(code, exp, minor))
    return tuple(limits)


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    currency_arg = draw(st.none() | paths)
    count = 1 if currency_arg is None else draw(st.integers(1, 4))
    kind = draw(st.sampled_from(Kind))
    return Rule(
        name=draw(names),
        tools=tuple(draw(st.lists(tools_, min_size=1, max_size=3, unique=True))),
        arg=draw(paths),
        unit=draw(st.sampled_from(Unit)),
        currency_arg=currency_arg,
        limits=draw(limits_of(count)),
        kind=kind,
        window=draw(st.none() | windows) if kind is Kind.SUM else None,
        key=draw(st.none() | keys) if kind is Kind.SUM else None,
        action=draw(actions),
    )


@given(rules())
@settings(max_examples=400)
def test_round_trip(rule: Rule) -> None:
    line = rule.to_line()
    assert parse_rule(line) == rule
    assert parse_rule(line).to_line() == line
    assert "  " not in line
    assert line == line.strip()


@given(rules(), st.data())
def test_round_trip_with_any_blanks(rule: Rule, data: st.DataObject) -> None:
    """Every space of a canonical line may be any run of blanks, and blanks may surround it."""
    parts = rule.to_line().split(" ")
    blanks = st.text(" \t", min_size=1, max_size=3)
    line = data.draw(st.text(" \t", max_size=3)) + parts[0]
    for part in parts[1:]:
        separator = data.draw(blanks)
        if line.endswith(",") and data.draw(st.booleans()):
            separator = ""
        line += separator + part
    line += data.draw(st.text(" \t", max_size=3))
    assert parse_rule(line) == rule
    assert parse_rules([line, "# " + line]) == [rule]


def check_any_line(line: str) -> None:
    """``parse_rule`` either returns a rule that round-trips, or raises a well-formed RuleError;
    never anything else."""
    failure: RuleError | None = None
    try:
        rule = parse_rule(line)
    except RuleError as error:
        failure = error
    if failure is not None:
        assert 1 <= failure.column <= len(line) + 1
        assert failure.line is None
        assert str(failure) == f"column {failure.column}: {failure.message}"
        assert_no_leak(failure, LEAK)
    else:
        assert parse_rule(rule.to_line()) == rule
        assert parse_rule(rule.to_line()).to_line() == rule.to_line()


FRAGMENTS = [
    "r:",
    "big-payment:",
    ":",
    "pay",
    "Pay",
    "pay,transfer",
    "pay,",
    ",",
    "arg=amount",
    "arg=a.b",
    "arg=",
    "minor",
    "currency=c",
    "currency=",
    "max",
    "sum",
    "MAX",
    "USD",
    "EUR",
    "JPY",
    "XAU",
    "ZZZ",
    "usd",
    "500.00",
    "5",
    "0",
    "1.234",
    "92233720368547758.08",
    "9" * 30,
    "exponent=3",
    "exponent=19",
    "exponent=",
    "per",
    "day",
    "7d",
    "367d",
    "24h",
    "90m",
    "by",
    "principal",
    "arg=payee.email",
    "lower",
    "trim",
    "->",
    "gate",
    "refuse",
    "finance",
    "\r",
    "\u00a0",
    "\n",
    "#",
    ".",
    "=",
    "-",
    "😀",
    LEAK,
]
SEPARATORS = ["", " ", "  ", "\t", ",", ", ", "\u00a0"]

grammar_soup = st.lists(
    st.tuples(st.sampled_from(SEPARATORS), st.sampled_from(FRAGMENTS)), max_size=25
).map(lambda pairs: "".join(sep + fragment for sep, fragment in pairs))


@given(st.text())
def test_any_text_is_a_rule_or_a_rule_error(line: str) -> None:
    check_any_line(line)


@given(grammar_soup)
@settings(max_examples=500)
def test_grammar_soup_is_a_rule_or_a_rule_error(line: str) -> None:
    check_any_line(line)


@given(rules(), st.data())
@settings(max_examples=300)
def test_mutated_valid_lines_are_a_rule_or_a_rule_error(rule: Rule, data: st.DataObject) -> None:
    line = rule.to_line()
    start = data.draw(st.integers(0, len(line)))
    end = data.draw(st.integers(start, min(len(line), start + 12)))
    insert = data.draw(st.sampled_from(["", *FRAGMENTS, *SEPARATORS]))
    check_any_line(line[:start] + insert + line[end:])


@given(st.lists(st.text() | grammar_soup, max_size=5))
def test_parse_rules_any_text(lines: list[str]) -> None:
    text = "\n".join(lines)
    failure: RuleError | None = None
    try:
        result = parse_rules(text)
    except RuleError as error:
        failure = error
    if failure is not None:
        assert failure.line is not None
        physical = text.split("\n")
        assert 1 <= failure.line <= len(physical)
        bad = physical[failure.line - 1].removesuffix("\r")
        assert 1 <= failure.column <= len(bad) + 1
        assert str(failure) == (f"line {failure.line}, column {failure.column}: {failure.message}")
        assert_no_leak(failure, LEAK)
    else:
        assert parse_rules(rule.to_line() for rule in result) == result


def _lines(text: str) -> Iterator[str]:
    yield from text.splitlines(keepends=True)


@given(st.lists(rules(), max_size=4))
def test_parse_rules_round_trip_of_files(rule_list: list[Rule]) -> None:
    # Names must differ under casefold; otherwise the file is refused at the later line.
    folded = [rule.name.casefold() for rule in rule_list]
    text = "".join(rule.to_line() + "\r\n" for rule in rule_list)
    if len(set(folded)) == len(folded):
        assert parse_rules(text) == rule_list
        assert parse_rules(_lines(text)) == rule_list
    else:
        error = refused_file(text)
        later = next(i for i, name in enumerate(folded) if name in folded[:i])
        assert (error.line, error.column) == (later + 1, 1)
