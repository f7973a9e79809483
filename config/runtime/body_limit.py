"""A request body bounded in size and in time, before Django buffers it.

Django's ASGI handler reads the whole body before any view runs, and past
``DATA_UPLOAD_MAX_MEMORY_SIZE`` answers an HTML ``400``; the ASGI server has no limit of its
own. Here a body over ``COUNTERSIGN_MAX_BODY`` is refused from its ``Content-Length`` before
a byte of it is read, or at the limit while a chunked one arrives, and a body still arriving
after ``COUNTERSIGN_BODY_TIMEOUT`` seconds is refused too. Both answers close the connection,
so the server stops reading what the client goes on sending. This needs a server that hands
the body over as it arrives (uvicorn, config/serve.py). There is no stock component to switch
back to (config/runtime/README.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings

from config.runtime.asgi_types import ASGIApp, Message, Receive, Scope, Send

Refusal = Callable[[Send], Awaitable[None]]


def _closing(send: Send) -> Send:
    """``send`` with ``Connection: close`` on the response: the rest of a refused body is
    never read."""

    async def send_closing(message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", []), (b"connection", b"close")]
            message = {**message, "headers": headers}
        await send(message)

    return send_closing


class BodyLimit:
    """Refuse a body over ``COUNTERSIGN_MAX_BODY`` with ``too_large`` (which answers ``413``):
    from ``Content-Length`` at once, else while counting the chunks as they arrive; and one
    not received within ``COUNTERSIGN_BODY_TIMEOUT`` seconds with ``too_slow`` (``408``)."""

    def __init__(self, app: ASGIApp, *, too_large: Refusal, too_slow: Refusal) -> None:
        self.app = app
        self.too_large = too_large
        self.too_slow = too_slow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.COUNTERSIGN_MAX_BODY
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self.too_large(_closing(send))
            return
        chunks: list[Message] = []
        try:
            async with asyncio.timeout(settings.COUNTERSIGN_BODY_TIMEOUT):
                too_large = await _read_body(receive, chunks, limit)
        except TimeoutError:
            await self.too_slow(_closing(send))
            return
        if too_large:
            await self.too_large(_closing(send))
            return

        async def replay() -> Message:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)


async def _read_body(receive: Receive, chunks: list[Message], limit: int) -> bool:
    """Receive the body into ``chunks``; True as soon as it passes ``limit``."""
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            chunks.append(message)
            return False
        size += len(message.get("body", b""))
        if size > limit:
            return True
        chunks.append(message)
        if not message.get("more_body", False):
            return False
