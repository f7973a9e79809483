"""``manage.py rules_test RULES CASES``: check a rule file against a TOML file of cases,
offline, with capcore alone: no server, no database (docs/rules.md, "Testing rules
offline"). Exit status 0 when every case passes, 1 when any fails, 2 when a file is
malformed or unreadable."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from approvals.management.text_files import TextFileCommand, plain
from capcore.cases import CasesRefused, line_of_result, read_cases, run_cases, summary_of_results
from capcore.rules import check_rules

EXIT_FAILED = 1
EXIT_MALFORMED = 2


class Command(TextFileCommand):
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

    def handle(self, *args: Any, **options: Any) -> None:
        rules_path: str = options["rules"]
        cases_path: str = options["cases"]
        rules_text = self.read_text(rules_path, status=EXIT_MALFORMED)
        cases_text = self.read_text(cases_path, status=EXIT_MALFORMED)
        rule_lines, rule_errors = check_rules(rules_text)
        if rule_errors:
            self.refuse(
                [f"{rules_path}:{bad.line}:{bad.column}: {bad.message}" for bad in rule_errors],
                status=EXIT_MALFORMED,
            )
        rules = [line.rule for line in rule_lines]
        try:
            results = run_cases(read_cases(cases_text), rules, now=timezone.now())
        except CasesRefused as refused:
            self.refuse(
                [
                    f"{cases_path}:{error}" if error.line is not None else f"{cases_path}: {error}"
                    for error in refused.errors
                ],
                status=EXIT_MALFORMED,
            )
        for result in results:
            self.stdout.write(line_of_result(result), style_func=plain)
        self.stdout.write(summary_of_results(results), style_func=plain)
        if not all(result.passed for result in results):
            raise SystemExit(EXIT_FAILED)
