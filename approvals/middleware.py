"""HTTP edges that must hold before Django or ninja answer in their own formats."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_TOO_LARGE = "The request body is larger than this server accepts."


def json_error_bytes(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


async def send_json(
    send: Send, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse a body over ``COUNTERSIGN_MAX_BODY`` with ``413`` before Django buffers it:
    from ``Content-Length`` at once, else while counting the chunks as they arrive."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.COUNTERSIGN_MAX_BODY
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await send_json(send, 413, json_error_bytes("body_too_large", BODY_TOO_LARGE))
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
                await send_json(send, 413, json_error_bytes("body_too_large", BODY_TOO_LARGE))
                return
            chunks.append(message)
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)


def _as_json_405(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if not request.path.startswith("/api/") or response.status_code != 405:
        return response
    replaced = HttpResponse(
        json_error_bytes("method_not_allowed", "This method is not allowed here."),
        status=405,
        content_type="application/json",
    )
    if response.has_header("Allow"):
        replaced["Allow"] = response["Allow"]
    return replaced


@sync_and_async_middleware
def api_errors_as_json(get_response: Any) -> Any:
    """Under /api/, a 405 from ninja's router is plain text: answer in the API's error shape."""
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponse:
            return _as_json_405(request, await get_response(request))

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        return _as_json_405(request, get_response(request))

    return middleware
