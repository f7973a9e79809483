"""``manage.py import_rules FILE [--replace]``: load a rules file, all or nothing."""

from __future__ import annotations

from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

import capcore
from approvals.services.rules import rules_import


def _plain(text: str) -> str:
    return text


class Command(BaseCommand):
    help = (
        "Create or update cap rules from a rules file (one rule per line; blank lines and "
        "'#' comments skipped). Every line is checked first: on an error, FILE:LINE:COLUMN: "
        "message goes to stderr, the exit status is 1 and nothing changes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")
        parser.add_argument(
            "--replace", action="store_true", help="Also disable the rules the file does not name."
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
            saved = rules_import(text=text, replace=options["replace"])
        except capcore.RuleError as error:
            self._fail(f"{path}:{error.line}:{error.column}: expected {error.expected}")
        self.stdout.write(f"imported {len(saved)} rule{'' if len(saved) == 1 else 's'}")
