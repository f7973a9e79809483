"""Which pages may open the people's sockets: the site's own origin — scheme, host **and
port**, the host taken from the handshake's ``Host`` header and checked against
``ALLOWED_HOSTS`` — or one listed in ``CSRF_TRUSTED_ORIGINS`` (docs/reliability.md, "Origins").

Channels' ``AllowedHostsOriginValidator`` compares only the Origin's host with
``ALLOWED_HOSTS``: a page on another port of the same host (another service, a developer's
server) passed, rode the approver's cookie (cookies ignore ports) and read the live queue.
This is the check Django's CSRF middleware makes of a form's Origin, made of a WebSocket
handshake. A handshake without an Origin is refused: every browser sends one, and nothing
but a browser has the session cookie that these sockets need.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from config.runtime.asgi_types import Receive, Scope, Send

DEFAULT_PORTS = {"http": 80, "https": 443}
# Django's own answer for an empty ALLOWED_HOSTS under DEBUG (HttpRequest.get_host).
DEBUG_HOSTS = [".localhost", "127.0.0.1", "[::1]"]

Origin = tuple[str, str, int]  # scheme, host, port


def _header(scope: Scope, name: bytes) -> str | None:
    """The one header ``name``; None when it is missing or repeated."""
    values = [value for key, value in scope.get("headers", []) if key.lower() == name]
    if len(values) != 1:
        return None
    try:
        return bytes(values[0]).decode("ascii")
    except UnicodeDecodeError:
        return None


def parse_origin(text: str) -> Origin | None:
    """``scheme://host[:port]`` as (scheme, host in lower case, port or the scheme's
    default); None for anything else, ``null`` included."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.path or parts.query or parts.fragment or parts.username or parts.password:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def _is_secure(scope: Scope) -> bool:
    """As ``HttpRequest.is_secure``: the proxy's header when ``SECURE_PROXY_SSL_HEADER`` is
    set and the request carries it, else the scheme the server saw."""
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        header = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        value = _header(scope, header)
        if value is not None:
            return value.split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") in ("wss", "https")


def own_origin(scope: Scope) -> Origin | None:
    """The site's origin as this handshake reached it: the scheme, and the ``Host`` header's
    host and port; None when that host is not one of ``ALLOWED_HOSTS``."""
    host = _header(scope, b"host")
    if host is None:
        return None
    domain, _ = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = DEBUG_HOSTS
    if not domain or not validate_host(domain, allowed):
        return None
    return parse_origin(f"{'https' if _is_secure(scope) else 'http'}://{host}")


def trusted(text: str) -> bool:
    """Whether ``CSRF_TRUSTED_ORIGINS`` lists the origin ``text``: exactly (ports made
    explicit), or by a ``*.`` subdomain pattern, as Django's CSRF middleware reads it."""
    origin = parse_origin(text)
    if origin is None:
        return False
    netloc = urlsplit(text).netloc
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        if "*" in entry:
            pattern = urlsplit(entry)
            if pattern.scheme == origin[0] and is_same_domain(netloc, pattern.netloc.lstrip("*")):
                return True
        elif parse_origin(entry) == origin:
            return True
    return False


def origin_allowed(scope: Scope) -> bool:
    text = _header(scope, b"origin")
    if text is None:
        return False
    origin = parse_origin(text)
    return origin is not None and (origin == own_origin(scope) or trusted(text))


class SameOriginValidator:
    """Lets a WebSocket handshake through to ``application`` only from an allowed origin;
    any other is refused before the accept (an HTTP 403, so the page gets nothing)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if origin_allowed(scope):
            await self.application(scope, receive, send)
            return
        if (await receive())["type"] == "websocket.connect":
            await send({"type": "websocket.close"})  # before the accept: refused
