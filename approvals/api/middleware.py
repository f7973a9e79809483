"""HTTP edges that must hold before Django or ninja answer in their own formats."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from approvals.api.errors import METHOD_NOT_ALLOWED, Code, json_error_bytes, send_json
from config.runtime.asgi_types import Send

BODY_TOO_LARGE = "The request body is larger than this server accepts ({limit} bytes)."
BODY_TOO_SLOW = "The request body did not arrive within {seconds} seconds."


async def body_too_large(send: Send) -> None:
    """The body limit's ``413`` (config/runtime/body_limit.py), in the API's error shape,
    stating the limit (``COUNTERSIGN_MAX_BODY``) so that a client knows how far to shrink."""
    message = BODY_TOO_LARGE.format(limit=settings.COUNTERSIGN_MAX_BODY)
    await send_json(send, 413, json_error_bytes(Code.BODY_TOO_LARGE, message))


async def body_too_slow(send: Send) -> None:
    """The body limit's ``408``, stating the time allowed (``COUNTERSIGN_BODY_TIMEOUT``)."""
    message = BODY_TOO_SLOW.format(seconds=settings.COUNTERSIGN_BODY_TIMEOUT)
    await send_json(send, 408, json_error_bytes(Code.BODY_TIMEOUT, message))


def api_errors_as_json(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Under /api/, a 405 from ninja's router is plain text: answer in the API's error shape.

    Synchronous: the request thread runs the whole chain (config/runtime/pooled_handler.py),
    and Django's own handler adapts it."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if not request.path.startswith("/api/") or response.status_code != 405:
            return response
        replaced = HttpResponse(
            json_error_bytes(Code.METHOD_NOT_ALLOWED, METHOD_NOT_ALLOWED),
            status=405,
            content_type="application/json",
        )
        if response.has_header("Allow"):
            replaced["Allow"] = response["Allow"]
        return replaced

    return middleware
