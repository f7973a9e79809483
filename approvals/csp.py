"""A strict Content-Security-Policy on every response (Django 5.2 has none built in).

Nothing inline runs or applies: scripts and styles come from our own static files only (htmx
is told by ``<meta name="htmx-config">`` not to inject styles, use ``eval`` or run swapped-in
scripts), the browser socket connects back to this host, and no other site may frame a page.
``/api/v1/docs`` (ninja's Swagger UI, its assets served from ``static/``) and the admin work
under it as they are: no path is exempt.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

HEADER = "Content-Security-Policy"
POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self' ws: wss:",
        "img-src 'self' data:",
        "frame-ancestors 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    ]
)


def _with_policy(response: HttpResponse) -> HttpResponse:
    if HEADER not in response.headers:  # a view may set a stricter one
        response.headers[HEADER] = POLICY
    return response


@sync_and_async_middleware
def content_security_policy(get_response: Any) -> Any:
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponse:
            return _with_policy(await get_response(request))

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        return _with_policy(get_response(request))

    return middleware
