"""The queue as a browser shows it after a series of pushes (approvals.realtime.queue_updates)."""

from __future__ import annotations

import re

_ROW = re.compile(r'<li id="call-([0-9a-f-]{36})"[^>]*>.*?</li>', re.DOTALL)
_DELETE = re.compile(r'<li id="call-([0-9a-f-]{36})" hx-swap-oob="delete"></li>')
_APPEND = re.compile(r'<ol hx-swap-oob="beforeend:#(mine|others)">(.*?)</ol>', re.DOTALL)
_HEAD = re.compile(
    r'<(div|h2|p) [^>]*id="(queue-head|mine-title|others-title|mine-more|others-more)".*?</\1>',
    re.DOTALL,
)


class ShownQueue:
    """The queue's rows and heads as a browser shows them after applying each push as htmx's
    out-of-band swaps do: the whole queue, or deletes, replacements by id and appends."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[str, str]]] = {"mine": [], "others": []}
        self.heads: dict[str, str] = {}

    def apply(self, message: str) -> str:
        """Apply ``message``; the page as HTML (the heads, then each section's rows)."""
        if message.lstrip().startswith('<section id="queue"'):
            for name in self.rows:
                start = message.find(f'id="{name}"')
                part = "" if start < 0 else message[start : message.find("</ol>", start)]
                self.rows[name] = [(m[1], m[0]) for m in _ROW.finditer(part)]
            self.heads = {m[2]: m[0] for m in _HEAD.finditer(message)}
            return self.html()
        gone = set(_DELETE.findall(message))
        for name in self.rows:
            self.rows[name] = [row for row in self.rows[name] if row[0] not in gone]
        for name, inner in _APPEND.findall(message):
            self.rows[name].extend((m[1], m[0]) for m in _ROW.finditer(inner))
        for match in _ROW.finditer(_APPEND.sub("", _DELETE.sub("", message))):
            for name in self.rows:
                self.rows[name] = [
                    (match[1], match[0]) if row[0] == match[1] else row for row in self.rows[name]
                ]
        # htmx takes the attribute off what it swaps in.
        swapped = message.replace(' hx-swap-oob="true"', "")
        self.heads.update({m[2]: m[0] for m in _HEAD.finditer(swapped)})
        return self.html()

    def html(self) -> str:
        sections = "".join(
            f'<ol id="{name}">{"".join(html for _, html in rows)}</ol>'
            for name, rows in self.rows.items()
        )
        return "".join(self.heads.values()) + sections
