"""What one attempt came to, and errors short enough to keep and safe to show."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from notifications.models import NotificationChannel

# Longest error kept with an attempt.
ERROR_LIMIT = 200
MASK = "***"
# Pieces of a target URL: any of them may be a credential (a password, a chat service's
# token in the path, a key in the query), so each is masked in an error's text.
_URL_PIECES = re.compile(r"[/:@?&=#,;]+")
_SHORTEST_MASKED = 4


@dataclass(frozen=True)
class SendResult:
    ok: bool
    status_code: int | None = None
    error: str = ""


def secrets_of(channel: NotificationChannel) -> list[str]:
    """Every piece of ``channel``'s target and secret that must not appear in an error (an
    email channel's target is addresses, no secret)."""
    if channel.kind == NotificationChannel.Kind.EMAIL:
        return [channel.secret] if channel.secret else []
    pieces = [channel.secret, channel.target] if channel.secret else [channel.target]
    for part in (channel.target, unquote(channel.target)):
        pieces.extend(piece for piece in _URL_PIECES.split(part) if piece)
    try:
        url = urlsplit(channel.target)
        pieces.extend(piece for piece in (url.username, url.password) if piece)
    except ValueError:
        pass
    host = _host(channel.target)
    kept = {host, "http", "https", "mailto", "approvers"} - {""}
    return sorted(
        {piece for piece in pieces if len(piece) >= _SHORTEST_MASKED and piece not in kept},
        key=len,
        reverse=True,
    )


def _host(target: str) -> str:
    try:
        return urlsplit(target).hostname or ""
    except ValueError:
        return ""


def scrub(text: str, *, channel: NotificationChannel) -> str:
    """``text`` with every secret of ``channel`` masked, on one line, at most
    ``ERROR_LIMIT`` characters."""
    for secret in secrets_of(channel):
        text = text.replace(secret, MASK)
    text = " ".join(text.split())
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT - 1] + "…"


def failure(exc: BaseException, *, channel: NotificationChannel) -> SendResult:
    """A failed attempt from an exception: its class, and its message scrubbed."""
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return SendResult(ok=False, error=scrub(text, channel=channel))
