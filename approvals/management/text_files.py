"""What the commands that read a rule or case file share: reading it as the rule parser
expects, and a refusal written to stderr line by line, then the exit status."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NoReturn

from django.core.management.base import BaseCommand


def plain(text: str) -> str:
    """Output as written: Django styles stderr, and these lines are for tools as much as
    for people."""
    return text


class TextFileCommand(BaseCommand):
    def refuse(self, lines: Iterable[str], *, status: int) -> NoReturn:
        for line in lines:
            self.stderr.write(line, style_func=plain)
        raise SystemExit(status)

    def read_text(self, path: str, *, status: int) -> str:
        """The file's text, or a refusal with ``status`` naming the path, never its content."""
        try:
            # newline="" keeps a stray "\r" inside a line, for the rule parser to refuse.
            with open(path, encoding="utf-8", newline="") as handle:
                return handle.read()
        except FileNotFoundError:
            self.refuse([f"{path}: no such file"], status=status)
        except UnicodeDecodeError:
            self.refuse([f"{path}: not UTF-8 text"], status=status)
        except OSError as error:
            self.refuse([f"{path}: cannot read ({error.strerror or 'error'})"], status=status)
