"""``413`` for a body over ``COUNTERSIGN_MAX_BODY``, before Django buffers it.

Django's ASGI handler reads the whole body before any view runs, and past
``DATA_UPLOAD_MAX_MEMORY_SIZE`` answers an HTML ``400``; daphne has no limit of its own. There
is no stock component to switch back to (config/runtime/README.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from django.conf import settings

from config.runtime.asgi_types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """Refuse a body over ``COUNTERSIGN_MAX_BODY`` with ``refuse`` (which answers ``413``):
    from ``Content-Length`` at once, else while counting the chunks as they arrive."""

    def __init__(self, app: ASGIApp, *, refuse: Callable[[Send], Awaitable[None]]) -> None:
        self.app = app
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.COUNTERSIGN_MAX_BODY
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self.refuse(send)
            return
        chunks: list[Message] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                chunks.append(message)
                break
            size += len(message.get("body", b""))
            if size > limit:
                await self.refuse(send)
                return
            chunks.append(message)
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)
