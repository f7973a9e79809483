"""The body limit answers ``too_large`` for a body over ``COUNTERSIGN_MAX_BODY`` without the
app seeing it: at once from ``Content-Length``, else at the chunk that passes the limit; and
``too_slow`` for a body still arriving after ``COUNTERSIGN_BODY_TIMEOUT``; both answers close
the connection. A body within both reaches the app whole. (The agent API's ``413`` through the
whole application is in tests/approvals/test_api.py, the attacks on a real server in
tests/scale/test_hostile_bodies.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from config.runtime.asgi_types import Message, Receive, Scope, Send
from config.runtime.body_limit import BodyLimit
from tests.asgi import chunked_request

pytestmark = pytest.mark.asyncio

LIMIT = 1024


class Served:
    """The app behind the limit: records the body it read, answers 200."""

    def __init__(self) -> None:
        self.body: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.body = body
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def too_large(send: Send) -> None:
    await send({"type": "http.response.start", "status": 413, "headers": []})
    await send({"type": "http.response.body", "body": b"too large"})


async def too_slow(send: Send) -> None:
    await send({"type": "http.response.start", "status": 408, "headers": []})
    await send({"type": "http.response.body", "body": b"too slow"})


def limited(app: Any) -> BodyLimit:
    return BodyLimit(app, too_large=too_large, too_slow=too_slow)


@pytest.fixture(autouse=True)
def limit(settings: Any) -> None:
    settings.COUNTERSIGN_MAX_BODY = LIMIT
    settings.COUNTERSIGN_BODY_TIMEOUT = 0.2


async def _drive(
    chunks: list[bytes], content_length: bytes | None = None
) -> tuple[int, Served, int]:
    """The status, the app, and how many body messages were read; ``receive`` waits for
    ever after the last chunk (the client stays connected)."""
    app = Served()
    headers = [] if content_length is None else [(b"content-length", content_length)]
    scope = {"type": "http", "path": "/", "headers": headers}
    sent, read = await chunked_request(limited(app), scope, chunks)
    if sent[0]["status"] != 200:
        assert (b"connection", b"close") in sent[0]["headers"]
    return sent[0]["status"], app, read


@pytest.mark.parametrize("declared", [b"1025", b"1000000000", b"-1", b"12x"])
async def test_a_declared_length_over_the_limit_or_malformed_is_refused_unread(
    declared: bytes,
) -> None:
    status, app, read = await _drive([b"x" * 10], declared)
    assert (status, app.body, read) == (413, None, 0)


async def test_a_body_over_the_limit_is_refused_at_the_chunk_that_passes_it() -> None:
    status, app, read = await _drive([b"x" * 400] * 5)
    assert (status, app.body, read) == (413, None, 3)


async def test_a_content_length_that_lies_low_does_not_help() -> None:
    status, app, _ = await _drive([b"x" * (LIMIT + 1)], b"10")
    assert (status, app.body) == (413, None)


async def test_a_body_at_the_limit_reaches_the_app_whole() -> None:
    body = bytes(range(256)) * (LIMIT // 256)
    chunks = [body[i : i + 100] for i in range(0, len(body), 100)]
    status, app, read = await _drive(chunks, str(LIMIT).encode())
    assert (status, app.body, read) == (200, body, len(chunks))


async def test_a_body_still_arriving_at_the_timeout_is_refused() -> None:
    app = Served()
    sent: list[Message] = []
    arriving = [{"type": "http.request", "body": b"x" * 10, "more_body": True}]

    async def receive() -> Message:
        if arriving:
            return arriving.pop()
        await asyncio.Event().wait()  # the rest never comes
        raise AssertionError("unreachable")

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(dict(message))

    scope = {"type": "http", "path": "/", "headers": [(b"content-length", b"1000")]}
    await asyncio.wait_for(limited(app)(scope, receive, send), timeout=5)
    assert (sent[0]["status"], app.body) == (408, None)
    assert (b"connection", b"close") in sent[0]["headers"]


async def test_a_websocket_passes_untouched() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    async def receive() -> Message:
        raise AssertionError("the limit read from a socket")

    async def send(message: Mapping[str, Any]) -> None:
        raise AssertionError("the limit answered a socket")

    await limited(app)({"type": "websocket"}, receive, send)
    assert seen == ["websocket"]
