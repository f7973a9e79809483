"""``manage.py import_rules FILE [--replace [--force]]``: load a rules file, all or nothing
(docs/rules.md, "Rules files: import and export")."""

from __future__ import annotations

from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from approvals.services.rules import (
    GATE_CREATED,
    RulesFileRefused,
    RulesImported,
    RulesReplaceRefused,
    rules_import,
)

NOTHING_CHANGED = "{path}: {count} bad line{s}; nothing changed"
REPLACE_REFUSED = (
    "{path}: refused: --replace would disable every enabled rule ({count}): the file names "
    "none of them; nothing changed. Check the file, or add --force to disable them all."
)


def _plain(text: str) -> str:
    return text


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


class Command(BaseCommand):
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

    def _fail(self, message: str) -> NoReturn:
        self.stderr.write(message, style_func=_plain)
        raise SystemExit(1)

    def handle(self, *args: Any, **options: Any) -> None:
        path: str = options["file"]
        try:
            # newline="" keeps a stray "\r" inside a line, for the parser to refuse.
            with open(path, encoding="utf-8", newline="") as handle:
                text = handle.read()
        except FileNotFoundError:
            self._fail(f"{path}: no such file")
        except UnicodeDecodeError:
            self._fail(f"{path}: not UTF-8 text")
        except OSError as error:
            self._fail(f"{path}: cannot read ({error.strerror or 'error'})")
        try:
            result = rules_import(text=text, replace=options["replace"], force=options["force"])
        except RulesFileRefused as refused:
            for bad in refused.errors:
                self.stderr.write(
                    f"{path}:{bad.line}:{bad.column}: {bad.message}", style_func=_plain
                )
            count = len(refused.errors)
            self._fail(NOTHING_CHANGED.format(path=path, count=count, s=_plural(count)))
        except RulesReplaceRefused as refused:
            self._fail(REPLACE_REFUSED.format(path=path, count=refused.enabled))
        for line in summary_lines(result):
            self.stdout.write(line)
