"""Text that Countersign did not write (an agent's tool name, principal and run id, an agent's
name, an approver's comment) as a message to people shows it: on one line, in quotes, and as
literal text that no mail client or chat service reads as a line of ours, a link or a mention
(docs/notifications.md, "Text that agents write")."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

OPEN_QUOTE = "\u201c"
CLOSE_QUOTE = "\u201d"
ELLIPSIS = "\u2026"
# Quotation marks inside quoted text become straight ones, so that the closing mark is ours.
_INNER_QUOTES = str.maketrans({OPEN_QUOTE: '"', CLOSE_QUOTE: '"'})
# Controls, format characters (bidirectional overrides, zero-width spaces), lone surrogates,
# line and paragraph separators: each can break a line or make text read otherwise than it is.
_UNSHOWN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# A web address's "://" and a leading "www." are written with a full-width colon and full stop,
# so that no mail client or chat service links them: a message's one link is the call page's.
_SCHEME = re.compile(r"://")
_WWW = re.compile(r"\b(www)\.", re.IGNORECASE)
FULL_WIDTH_COLON = "\uff1a"
FULL_WIDTH_STOP = "\uff0e"
# What chat services read as markup: mentions (<!channel>, @here, <@U1>, <at>), links
# (<url|text>, [text](url)), HTML and entities, emphasis and code. Each becomes its full-width
# form, which reads the same to a person and is markup to none of them.
CHAT_MARKUP = "&<>|@[]*_~`"
_CHAT_LITERAL = str.maketrans({char: chr(ord(char) + 0xFEE0) for char in CHAT_MARKUP})


def one_line(text: str, *, limit: int) -> str:
    """``text`` on one line: every run of whitespace (newlines too) one space, the characters
    in ``_UNSHOWN`` left out, web addresses unlinked, at most ``limit`` characters."""
    # Bounded before the character-by-character pass; what is left out beyond is never shown.
    text = text[: limit * 4]
    kept = "".join(
        " " if char.isspace() else char
        for char in text
        if char.isspace() or unicodedata.category(char) not in _UNSHOWN
    )
    line = " ".join(kept.split())
    line = _SCHEME.sub(FULL_WIDTH_COLON + "//", line)
    line = _WWW.sub(r"\1" + FULL_WIDTH_STOP, line)
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + ELLIPSIS
    return line


@dataclass(frozen=True)
class LiteralText:
    """How one kind of message shows text it did not write.

    ``chat``: the message goes to a service that reads markup (through Apprise), so the
    characters of ``CHAT_MARKUP`` are made literal too. ``limit``: the longest text kept.
    """

    chat: bool
    limit: int

    def line(self, text: str) -> str:
        """Countersign's own words that may repeat others' (a reason, a person's name): on one
        line and, for a chat service, with no markup."""
        line = one_line(text, limit=self.limit)
        return line.translate(_CHAT_LITERAL) if self.chat else line

    def quoted(self, text: str) -> str:
        """Others' words, quoted: ``“…”`` around ``line(text)``."""
        return OPEN_QUOTE + self.line(text).translate(_INNER_QUOTES) + CLOSE_QUOTE


# Mail (its plain-text and its HTML part: Django's templates escape the HTML).
MAIL = LiteralText(chat=False, limit=1000)
# A chat or push service through Apprise: a short message.
CHAT = LiteralText(chat=True, limit=200)
