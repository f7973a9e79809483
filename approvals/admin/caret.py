"""A rule line as an admin typed it, with a caret under the column an error names
(docs/rules.md, "Error messages"): the cap rule form and the Rules lab show it."""

from __future__ import annotations

import unicodedata

from django.utils.html import format_html

CARET_CONTEXT = 60  # characters of the line shown on each side of the caret


def _shown(char: str) -> str:
    """A tab as one blank (it counts one column); a character that prints as nothing or as a
    blank no-one can tell apart as U+FFFD, so that it can be seen under the caret."""
    if char == "\t":
        return " "
    return char if char.isprintable() else "\ufffd"


def _cells(char: str) -> int:
    """How many cells of a monospace font ``char`` takes, so the caret lands under it."""
    if unicodedata.category(char) in ("Mn", "Me"):  # combining marks sit on the one before
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def rule_line_caret(line: str, column: int) -> str:
    """The admin's own line, ``CARET_CONTEXT`` characters either side of ``column``, with a
    ``^`` under that column (docs/rules.md, "Error messages")."""
    index = column - 1
    start = max(0, index - CARET_CONTEXT)
    end = index + CARET_CONTEXT
    shown = [_shown(char) for char in line[start:end]]
    prefix = "…" if start else ""
    suffix = "…" if end < len(line) else ""
    pad = len(prefix) + sum(_cells(char) for char in shown[: index - start])
    return format_html("<pre>{}\n{}^</pre>", prefix + "".join(shown) + suffix, " " * pad)
