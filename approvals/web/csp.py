"""A strict Content-Security-Policy on every response (Django 5.2 has none built in).

Nothing inline runs or applies: scripts and styles come from our own static files only (htmx
is told by ``<meta name="htmx-config">`` not to inject styles, use ``eval`` or run swapped-in
scripts), the browser socket connects back to this host, and no other site may frame a page.
``/api/v1/docs`` (ninja's Swagger UI, its assets served from ``static/``) and the admin work
under it as they are: no path is exempt.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

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


def content_security_policy(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Synchronous: the request thread runs the whole chain (config/runtime/pooled_handler.py),
    and Django's own handler adapts it."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if HEADER not in response.headers:  # a view may set a stricter one
            response.headers[HEADER] = POLICY
        return response

    return middleware
