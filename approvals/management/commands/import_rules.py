"""``manage.py import_rules FILE [--replace [--force]]``: load a rules file, all or nothing
(docs/rules.md, "Rules files: import and export")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from approvals.management.text_files import TextFileCommand, plain
from approvals.services.rules import (
    GATE_CREATED,
    RulesFileRefused,
    RulesImported,
    RulesReplaceRefused,
    rules_import,
)

# A file refused, unread or with bad lines: nothing changed.
EXIT_REFUSED = 1
NOTHING_CHANGED = "{path}: {count} bad line{s}; nothing changed"
REPLACE_REFUSED = (
    "{path}: refused: --replace would disable every enabled rule ({count}): the file names "
    "none of them; nothing changed. Check the file, or add --force to disable them all."
)


def _plural(count: int) -> str:
    return "" if count == 1 else "s"


def summary_lines(result: RulesImported) -> list[str]:
    """``created 2 rules: a, b`` and so on, one line per outcome, every outcome shown; then
    one line per gate the rules named that did not exist (``GATE_CREATED``)."""
    lines = []
    for outcome, names in (
        ("created", result.created),
        ("updated", result.updated),
        ("unchanged", result.unchanged),
        ("disabled", result.disabled),
    ):
        line = f"{outcome} {len(names)} rule{_plural(len(names))}"
        lines.append(f"{line}: {', '.join(names)}" if names else line)
    lines.extend(GATE_CREATED.format(name=name) for name in result.gates_created)
    return lines


class Command(TextFileCommand):
    help = (
        "Create or update cap rules from a rules file (one rule per line; blank lines and "
        "'#' comments skipped). Every line is checked first: on errors, FILE:LINE:COLUMN: "
        "message goes to stderr for every bad line, the exit status is 1 and nothing changes. "
        "Prints the rules created, updated, unchanged and disabled, and each gate the rules "
        "named that did not exist yet (created with the defaults: set its group)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")
        parser.add_argument(
            "--replace", action="store_true", help="Also disable the rules the file does not name."
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="With --replace, disable every enabled rule even when the file names none.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: str = options["file"]
        text = self.read_text(path, status=EXIT_REFUSED)
        try:
            result = rules_import(text=text, replace=options["replace"], force=options["force"])
        except RulesFileRefused as refused:
            for bad in refused.errors:
                self.stderr.write(
                    f"{path}:{bad.line}:{bad.column}: {bad.message}", style_func=plain
                )
            count = len(refused.errors)
            self.refuse(
                [NOTHING_CHANGED.format(path=path, count=count, s=_plural(count))],
                status=EXIT_REFUSED,
            )
        except RulesReplaceRefused as refused:
            self.refuse(
                [REPLACE_REFUSED.format(path=path, count=refused.enabled)], status=EXIT_REFUSED
            )
        for line in summary_lines(result):
            self.stdout.write(line)
