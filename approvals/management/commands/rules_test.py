"""``manage.py rules_test RULES CASES``: check a rule file against a TOML file of cases,
offline, with capcore alone: no server, no database (docs/rules.md, "Testing rules
offline"). Exit status 0 when every case passes, 1 when any fails, 2 when a file is
malformed or unreadable."""

from __future__ import annotations

from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from capcore.cases import CasesRefused, line_of_result, read_cases, run_cases, summary_of_results
from capcore.rules import check_rules

EXIT_FAILED = 1
EXIT_MALFORMED = 2


def _plain(text: str) -> str:
    return text


class Command(BaseCommand):
    help = (
        "Check a cap-rule file against a TOML file of [[case]] tables, with no database: "
        "one line per case (ok or FAIL with what came out and why), then a summary. Exit "
        "status 0 when every case passes, 1 when any fails, 2 for a malformed rule or case "
        "file (FILE:LINE:COLUMN: message on stderr)."
    )
    # No system checks: they are for a server, and this runs where there is no database.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("rules", help="the rule file, one rule per line (docs/rules.md)")
        parser.add_argument("cases", help="the TOML case file")

    def _malformed(self, lines: list[str]) -> NoReturn:
        for line in lines:
            self.stderr.write(line, style_func=_plain)
        raise SystemExit(EXIT_MALFORMED)

    def _read(self, path: str) -> str:
        try:
            # newline="" keeps a stray "\r" inside a line, for the rule parser to refuse.
            with open(path, encoding="utf-8", newline="") as handle:
                return handle.read()
        except FileNotFoundError:
            self._malformed([f"{path}: no such file"])
        except UnicodeDecodeError:
            self._malformed([f"{path}: not UTF-8 text"])
        except OSError as error:
            self._malformed([f"{path}: cannot read ({error.strerror or 'error'})"])

    def handle(self, *args: Any, **options: Any) -> None:
        rules_path: str = options["rules"]
        cases_path: str = options["cases"]
        rules_text, cases_text = self._read(rules_path), self._read(cases_path)
        rule_lines, rule_errors = check_rules(rules_text)
        if rule_errors:
            self._malformed(
                [f"{rules_path}:{bad.line}:{bad.column}: {bad.message}" for bad in rule_errors]
            )
        rules = [line.rule for line in rule_lines]
        try:
            results = run_cases(read_cases(cases_text), rules, now=timezone.now())
        except CasesRefused as refused:
            self._malformed(
                [
                    f"{cases_path}:{error}" if error.line is not None else f"{cases_path}: {error}"
                    for error in refused.errors
                ]
            )
        for result in results:
            self.stdout.write(line_of_result(result), style_func=_plain)
        self.stdout.write(summary_of_results(results), style_func=_plain)
        if not all(result.passed for result in results):
            raise SystemExit(EXIT_FAILED)
