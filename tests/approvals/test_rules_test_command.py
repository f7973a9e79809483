"""``manage.py rules_test RULES CASES`` (docs/rules.md, "Testing rules offline"): a rule file
checked against TOML cases with capcore alone, exit status 0, 1 or 2.

No test here has database access: pytest-django refuses any query, so the command passing
them shows it never touches a database. The subprocess runs point DATABASE_URL nowhere.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RULES = ROOT / "examples" / "rules.txt"
EXAMPLE_CASES = ROOT / "examples" / "rules_cases.toml"

RULES = (
    "# caps of a small shop\n"
    "big: pay arg=amount max USD 100.00 -> gate finance\n"
    "daily: pay arg=amount sum USD 1000.00 per day by principal -> gate\n"
    "wire-cap: wire arg=amount max USD 5000.00 -> refuse\n"
)


def case(name: str, tool: str, arguments: str, expect: str, *extra: str) -> str:
    lines = [
        "[[case]]",
        f'name = "{name}"',
        f'tool = "{tool}"',
        f"arguments = '{arguments}'",
        f'expect = "{expect}"',
        *extra,
    ]
    return "\n".join(lines) + "\n\n"


def write(tmp_path: Path, rules: str, cases: str) -> tuple[Path, Path]:
    rules_path, cases_path = tmp_path / "rules.txt", tmp_path / "cases.toml"
    rules_path.write_text(rules, encoding="utf-8")
    cases_path.write_text(cases, encoding="utf-8")
    return rules_path, cases_path


def run(rules: Path, cases: Path) -> tuple[int, str, str]:
    """``call_command``: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    try:
        call_command("rules_test", str(rules), str(cases), stdout=out, stderr=err)
    except SystemExit as exit_:
        code = exit_.code
    assert isinstance(code, int)
    return code, out.getvalue(), err.getvalue()


def run_process(rules: Path, cases: Path) -> subprocess.CompletedProcess[str]:
    # A database nobody listens on: any query would fail the command.
    env = {**os.environ, "DATABASE_URL": "postgres://nobody@127.0.0.1:9/no_such_database"}
    return subprocess.run(
        [sys.executable, "manage.py", "rules_test", str(rules), str(cases)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_example_passes_case_by_case() -> None:
    status, out, err = run(EXAMPLE_RULES, EXAMPLE_CASES)
    names = [line.split('"', 2)[1] for line in EXAMPLE_CASES.read_text().splitlines()
             if line.startswith("name = ")]  # fmt: skip
    assert len(names) >= 8
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        *(f"ok  {name}" for name in names),
        f"{len(names)} cases: {len(names)} passed, 0 failed",
    ]


def test_the_example_exits_0_from_manage_py_with_no_database() -> None:
    done = run_process(EXAMPLE_RULES, EXAMPLE_CASES)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[-1].endswith("passed, 0 failed")


def test_a_failing_case_exits_1_from_manage_py_naming_it(tmp_path: Path) -> None:
    rules, cases = write(
        tmp_path,
        RULES,
        case("small", "pay", '{"amount": "99.99"}', "allowed")
        + case("thought it was under", "pay", '{"amount": "100.01"}', "allowed"),
    )
    done = run_process(rules, cases)
    assert done.returncode == 1
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        "ok  small",
        "FAIL thought it was under: expected allowed, got held (reasons: rule big held at gate "
        "finance: USD 100.01 is over the limit of USD 100.00 per call)",
        "2 cases: 1 passed, 1 failed",
    ]


def test_held_refused_and_the_default_mode(tmp_path: Path) -> None:
    rules, cases = write(
        tmp_path,
        RULES,
        case("held", "pay", '{"amount": "100.01"}', "held", 'expect_rules = ["BIG"]')
        + case("refused", "wire", '{"amount": 5000.01}', "refused", 'expect_rules = ["wire-cap"]')
        + case("not json", "wire", '{"amount": 1,}', "refused", "expect_rules = []")
        # No rule applies to delete_repo: only the mode holds it, and by default no mode does.
        + case("mode", "delete_repo", "{}", "held", 'mode = "default"')
        + case("caps decide", "delete_repo", "{}", "allowed"),
    )
    status, out, err = run(rules, cases)
    assert (status, err) == (0, "")
    assert out.splitlines()[-1] == "5 cases: 5 passed, 0 failed"


def test_spent_fills_the_ledger_the_call_falls_into(tmp_path: Path) -> None:
    # USD 950 already spent by carol today: USD 50 reaches the limit, USD 50.01 goes over.
    spent = 'spent = { "daily" = "950.00" }'
    rules, cases = write(
        tmp_path,
        RULES,
        case("alone", "pay", '{"amount": "60.00"}', "allowed", 'principal = "carol"')
        + case("to the limit", "pay", '{"amount": "50.00"}', "allowed", spent)
        + case("past it", "pay", '{"amount": "50.01"}', "held", spent, 'expect_rules = ["daily"]'),
    )
    status, out, _ = run(rules, cases)
    assert status == 0, out
    # The same call, expected to pass, fails on the total and says what the ledger held.
    rules, cases = write(
        tmp_path, RULES, case("past it", "pay", '{"amount": "50.01"}', "allowed", spent)
    )
    status, out, _ = run(rules, cases)
    assert status == 1
    assert out.splitlines()[0] == (
        "FAIL past it: expected allowed, got held (reasons: rule daily held at gate (default): "
        "USD 1,000.01 would exceed the limit of USD 1,000.00 per day (spent USD 950.00))"
    )


def test_expect_rules_must_be_exactly_the_rules_among_the_reasons(tmp_path: Path) -> None:
    spent = 'spent = { "daily" = "950.00" }'
    rules, cases = write(
        tmp_path,
        RULES,
        # Held as expected, but by two rules where the case names one.
        case("both", "pay", '{"amount": "100.01"}', "held", spent, 'expect_rules = ["big"]')
        + case("none", "pay", '{"amount": "1.00"}', "allowed", 'expect_rules = ["big"]'),
    )
    status, out, _ = run(rules, cases)
    assert status == 1
    lines = out.splitlines()
    assert lines[0].startswith("FAIL both: expected rules big, got big, daily (reasons: rule big ")
    assert lines[1] == "FAIL none: expected rules big, got none (reasons: none)"
    assert lines[2] == "2 cases: 0 passed, 2 failed"


def test_malformed_toml_exits_2_with_its_line_and_column(tmp_path: Path) -> None:
    bad_line = 'expect = "held" "allowed"'
    text = case("a", "pay", "{}", "held").replace('expect = "held"', bad_line)
    rules, cases = write(tmp_path, RULES, text)
    line = text.splitlines().index(bad_line) + 1
    column = bad_line.index('"allowed"') + 1
    done = run_process(rules, cases)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"{cases}:{line}:{column}: not valid TOML: ")


def test_malformed_rule_exits_2_with_its_line_and_column(tmp_path: Path) -> None:
    bad_line = "lower: pay arg=amount max usd 100 -> gate"
    rules, cases = write(
        tmp_path, RULES + bad_line + "\n", case("a", "pay", '{"amount": "1"}', "allowed")
    )
    line = (RULES + bad_line).splitlines().index(bad_line) + 1
    column = bad_line.index("usd") + 1
    done = run_process(rules, cases)
    assert done.returncode == 2
    assert done.stdout == ""
    assert (
        done.stderr == f"{rules}:{line}:{column}: expected a currency code (3 upper-case letters)\n"
    )


def test_an_unknown_key_exits_2_naming_it(tmp_path: Path) -> None:
    text = case("a", "pay", '{"amount": "1"}', "allowed") + case(
        "b", "pay", '{"amount": "1"}', "allowed", 'expected_rules = ["big"]'
    )
    rules, cases = write(tmp_path, RULES, text)
    status, out, err = run(rules, cases)
    assert (status, out) == (2, "")
    header = [n for n, line in enumerate(text.splitlines(), 1) if line == "[[case]]"][1]
    assert err.startswith(f"{cases}:{header}: case 2: unknown key 'expected_rules' (a case has ")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('spent = { "big" = "1.00" }', "spent for 'big': the rule file has no sum rule"),
        ('spent = { "daily" = "1.001" }', "spent for 'daily': expected a decimal amount in USD"),
        ('spent = { "daily" = 5 }', "spent must be a table of rule names to decimal text"),
        ('mode = "Allow"', "mode must be one of default, read_only"),
        ('expect_rules = "big"', "expect_rules must be a list of rule names"),
        ('principal = ""\nprincipal = "x"', "not valid TOML: cannot overwrite a value"),
        ('spent = { a = "1", a = "2" }', "not valid TOML: a table or key defined twice"),
    ],
)
def test_a_case_that_does_not_fit_exits_2(tmp_path: Path, extra: str, message: str) -> None:
    rules, cases = write(tmp_path, RULES, case("a", "pay", '{"amount": "1"}', "allowed", extra))
    status, out, err = run(rules, cases)
    assert (status, out) == (2, "")
    assert message in err


def test_errors_never_echo_long_text(tmp_path: Path) -> None:
    long_key = "k" * 5000
    rules, cases = write(
        tmp_path,
        RULES,
        case("a", "pay", '{"amount": "1"}', "allowed", f"{long_key} = 1", f'name2 = "{long_key}"'),
    )
    status, _, err = run(rules, cases)
    assert status == 2
    assert "k" * 41 not in err
    assert "unknown key 'kkkk" in err


def test_spent_needs_a_ledger_the_call_falls_into(tmp_path: Path) -> None:
    spent = 'spent = { "daily" = "1.00" }'
    rules, cases = write(tmp_path, RULES, case("a", "wire", '{"amount": "1"}', "allowed", spent))
    status, _, err = run(rules, cases)
    assert status == 2
    assert "spent for 'daily': the rule does not apply to this tool" in err


def test_two_cases_of_one_name_and_no_cases_are_refused(tmp_path: Path) -> None:
    one = case("same", "pay", '{"amount": "1"}', "allowed")
    rules, cases = write(tmp_path, RULES, one + one)
    status, _, err = run(rules, cases)
    assert status == 2
    assert "case 2: the name is already used by case 1" in err
    rules, cases = write(tmp_path, RULES, "# nothing yet\n")
    status, _, err = run(rules, cases)
    assert (status, err) == (2, f"{cases}: no cases: write at least one [[case]]\n")


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    status, _, err = run(EXAMPLE_RULES, tmp_path / "absent.toml")
    assert (status, err) == (2, f"{tmp_path / 'absent.toml'}: no such file\n")
