"""Webhooks signed per the Standard Webhooks specification (https://www.standardwebhooks.com):
the payload as committed, POSTed as JSON, with ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` headers.

A run of messages goes over one kept-alive connection of the standard library's
``http.client`` (``webhook_sender``): a request through httpx cost 0.87 ms of CPU against
0.18 ms (docs/performance.md, "Notifications"), and a webhook needs none of what httpx adds.
What it must do is kept here: every connect, write and read times out after
``COUNTERSIGN_NOTIFY_TIMEOUT`` seconds, redirects are not followed (``http.client`` never
follows one), an ``https`` target's certificate and host name are verified, the answer's
headers are bounded by ``http.client`` and its body is read up to ``ANSWER_LIMIT`` bytes, a
user and password in the target are sent as Basic authentication, and a target goes through
the proxy of ``HTTPS_PROXY`` or ``HTTP_PROXY`` unless ``NO_PROXY`` names it (an ``https`` one
tunnelled with ``CONNECT``)."""

from __future__ import annotations

import base64
import binascii
import functools
import http.client
import select
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from django.conf import settings
from standardwebhooks import Webhook

from approvals.senders.result import SendResult, failure
from config.env import OutboundProxies, Proxy, basic_credentials

if TYPE_CHECKING:
    from approvals.models import Notification, NotificationChannel

BAD_SECRET = "the webhook secret is not a whsec_ key (base64 after whsec_)"  # noqa: S105 (a message)
NOT_HTTP = "the webhook target is not an http(s) URL"
REDIRECT_NOT_FOLLOWED = "HTTP {status}: redirects are not followed"
NOT_2XX = "HTTP {status}"
USER_AGENT = "Countersign-Webhooks/1"
SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix)
REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Most of an answer's body that is read (nothing in it is kept): a longer one is left unread
# and its connection closed, so a receiver cannot make a sender read without end.
ANSWER_LIMIT = 64 * 1024
# What a path may keep as it is; anything else is percent-encoded, as httpx did.
PATH_SAFE = "/%:@!$&'()*+,;=-._~"


def secret_valid(secret: str) -> bool:
    """Whether ``secret`` is ``whsec_`` and a non-empty key in base64 (padded or not)."""
    if not secret.startswith(SECRET_PREFIX):
        return False
    key = secret.removeprefix(SECRET_PREFIX)
    try:
        return bool(base64.b64decode(key + "=" * (-len(key) % 4), validate=True))
    except (binascii.Error, ValueError):
        return False


def message_id(notification: Notification) -> str:
    """The ``webhook-id``: one per notification, the same on every retry."""
    return f"msg_{notification.id.hex}"


def signed_headers(*, signer: Webhook, msg_id: str, body: bytes, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers for ``body`` sent at ``at`` (whole seconds), signed by
    ``signer`` (``Webhook(secret)``, made once for a run of messages)."""
    at = at.astimezone(UTC).replace(microsecond=0)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signer.sign(msg_id=msg_id, timestamp=at, data=body),
    }


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One context for every message: building one loads the CA certificates, which costs
    tens of milliseconds of CPU (bench/notify_bench.py). It verifies the certificate and the
    host name."""
    return ssl.create_default_context()


@dataclass(frozen=True)
class Target:
    """Where a channel's webhooks go, read from its URL once per run."""

    https: bool
    host: str
    port: int | None
    path: str  # what the request line names: the path with its query, or through an
    # http:// proxy, the whole URL
    headers: dict[str, str]  # the same for every message: Basic authentication, if any
    proxy: Proxy | None = None  # the proxy the target is reached through


def webhook_target(url: str) -> Target | None:
    """The target of an ``http(s)`` URL with a host; None for any other."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    https = parts.scheme == "https"
    path = quote(parts.path or "/", safe=PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=PATH_SAFE + "?")
    headers = {"content-type": "application/json", "user-agent": USER_AGENT}
    authorization = basic_credentials(parts.username, parts.password)
    if authorization:
        headers["authorization"] = authorization
    proxies: OutboundProxies = settings.COUNTERSIGN_WEBHOOK_PROXIES
    proxy = proxies.proxy_for(https=https, host=parts.hostname, port=port or (443 if https else 80))
    if proxy is not None and not https:
        # A plain request through a proxy names the whole URL (without the target's user and
        # password, sent in their own header); an https one is tunnelled.
        path = f"http://{parts.netloc.rpartition('@')[2]}{path}"
        if proxy.authorization:
            headers["proxy-authorization"] = proxy.authorization
    return Target(https, parts.hostname, port, path, headers, proxy)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection has something to read: the receiver closed it
    (or sent what no request asked for). It is not used again."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


class Connection:
    """One kept-alive connection to a target, opened by its first request and again after
    the receiver closed it."""

    def __init__(self, target: Target, *, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self.http: http.client.HTTPConnection | None = None

    def _open(self) -> http.client.HTTPConnection:
        target, proxy = self.target, self.target.proxy
        host, port = (target.host, target.port) if proxy is None else (proxy.host, proxy.port)
        if not target.https:
            return http.client.HTTPConnection(host, port, timeout=self.timeout)
        connection = http.client.HTTPSConnection(
            host, port, timeout=self.timeout, context=tls_context()
        )
        if proxy is not None:
            # CONNECT through the proxy; TLS, and the certificate's check, with the target.
            tunnel = {"proxy-authorization": proxy.authorization} if proxy.authorization else {}
            connection.set_tunnel(target.host, target.port, headers=tunnel)
        return connection

    def post(self, body: bytes, headers: dict[str, str]) -> int:
        """POST ``body``; the answer's status. Raises ``OSError`` or ``HTTPException``."""
        connection = self.http
        if connection is None:
            connection = self.http = self._open()
        elif connection.sock is not None and _closed_by_peer(connection.sock):
            connection.close()  # the request opens it again
        try:
            connection.request("POST", self.target.path, body=body, headers=headers)
            answer = connection.getresponse()
            answer.read(ANSWER_LIMIT)
            if not answer.isclosed():  # longer than the limit: not read to its end
                connection.close()
        except BaseException:
            connection.close()
            raise
        return answer.status

    def close(self) -> None:
        if self.http is not None:
            self.http.close()


def _refused(error: str) -> Callable[[Notification], SendResult]:
    def send(notification: Notification) -> SendResult:
        return SendResult(ok=False, error=error)

    return send


@contextmanager
def webhook_sender(channel: NotificationChannel) -> Iterator[Callable[[Notification], SendResult]]:
    """Send one message after another to ``channel``'s URL, over one connection; each send
    never raises."""
    target = webhook_target(channel.target)
    if target is None:
        yield _refused(NOT_HTTP)
        return
    if not secret_valid(channel.secret):
        yield _refused(BAD_SECRET)
        return
    signer = Webhook(channel.secret)
    connection = Connection(target, timeout=float(settings.COUNTERSIGN_NOTIFY_TIMEOUT))

    def send(notification: Notification) -> SendResult:
        try:
            body = notification.payload.encode()
            headers = target.headers | signed_headers(
                signer=signer, msg_id=message_id(notification), body=body, at=datetime.now(UTC)
            )
            status = connection.post(body, headers)
        except Exception as exc:
            return failure(exc, channel=channel)
        if 200 <= status < 300:
            return SendResult(ok=True, status_code=status)
        if status in REDIRECTS:
            return SendResult(
                ok=False, status_code=status, error=REDIRECT_NOT_FOLLOWED.format(status=status)
            )
        return SendResult(ok=False, status_code=status, error=NOT_2XX.format(status=status))

    try:
        yield send
    finally:
        connection.close()
