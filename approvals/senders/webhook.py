"""Webhooks signed per the Standard Webhooks specification (https://www.standardwebhooks.com):
the payload as committed, POSTed as JSON, with ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` headers.

A run of messages goes over one kept-alive connection (``webhook_sender``), opened here: a
socket to the target or its proxy, a proxy's ``CONNECT`` tunnel (an IPv6 address in brackets,
which Python 3.11's ``http.client`` did not write), an ``https`` target's TLS with its
certificate and host name verified; each message on it is one request written at once and its
answer read by ``httptools``, the C parser uvicorn serves with. Through httpx a message cost
0.87 ms of CPU, through ``http.client``'s own exchange 0.18–0.24 ms, this way 0.06–0.09 ms
(docs/performance.md, "Notifications"); a webhook needs none of what they add. What it must do
is kept here: every connect, write and read times out after ``COUNTERSIGN_NOTIFY_TIMEOUT``
seconds, redirects are not followed, an answer's head is read up to ``HEAD_LIMIT`` bytes and its
body up to ``ANSWER_LIMIT``, a user and password in the target are sent as Basic authentication,
and a target goes through the proxy of ``HTTPS_PROXY`` or ``HTTP_PROXY`` unless ``NO_PROXY``
names it (an ``https`` one tunnelled with ``CONNECT``)."""

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

import httptools
from django.conf import settings
from standardwebhooks import Webhook

from approvals.senders.result import SendResult, failure
from config.env import OutboundProxies, Proxy, basic_credentials

if TYPE_CHECKING:
    from approvals.models import NotificationChannel
    from approvals.senders import Message

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
# Most of an answer that is read before its headers end (``http.client`` allowed 100 lines).
HEAD_LIMIT = 64 * 1024
HEAD_TOO_LONG = "the answer's headers are longer than 64 KiB"
TUNNEL_REFUSED = "Tunnel connection failed: {status} {reason}"
NO_ANSWER = "the receiver closed the connection without an answer"
NOT_HTTP_ANSWER = "the answer is not HTTP/1.x"
RECEIVE_SIZE = 64 * 1024
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


def message_id(notification: Message) -> str:
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
    host_header: str  # the URL's host and port, without its user and password, in ASCII
    path: str  # what the request line names: the path with its query, or through an
    # http:// proxy, the whole URL
    headers: dict[str, str]  # the same for every message: Basic authentication, if any
    proxy: Proxy | None = None  # the proxy the target is reached through

    def request_head(self) -> str:
        """The request line and the headers every message to the target has, each line
        ended: ``Host`` names the target's host and port as its URL does, through a proxy
        too (``http.client`` did the same)."""
        lines = [f"POST {self.path} HTTP/1.1", f"host: {self.host_header}"]
        lines += [f"{name}: {value}" for name, value in self.headers.items()]
        return "".join(line + "\r\n" for line in lines)


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
    netloc = parts.netloc.rpartition("@")[2]
    try:
        host_header = netloc if netloc.isascii() else netloc.encode("idna").decode()
    except UnicodeError:
        return None
    if proxy is not None and not https:
        # A plain request through a proxy names the whole URL (without the target's user and
        # password, sent in their own header); an https one is tunnelled.
        path = f"http://{host_header}{path}"
        if proxy.authorization:
            headers["proxy-authorization"] = proxy.authorization
    return Target(https, parts.hostname, port, host_header, path, headers, proxy)


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
        self.sock: socket.socket | None = None

    def _open(self) -> socket.socket:
        """A connection to the target, or to its proxy; an ``https`` target's TLS (through
        the proxy's tunnel, if any), its certificate checked against the target."""
        target, proxy = self.target, self.target.proxy
        port = target.port or (443 if target.https else 80)
        where = (target.host, port) if proxy is None else (proxy.host, proxy.port)
        sock = socket.create_connection(where, timeout=self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if target.https:
                if proxy is not None:
                    _tunnel(sock, _authority(target.host, port), proxy)
                sock = tls_context().wrap_socket(sock, server_hostname=target.host)
        except BaseException:
            sock.close()
            raise
        return sock

    def _socket(self) -> socket.socket:
        """The connection's socket, connected (again if the receiver closed it)."""
        if self.sock is not None and _closed_by_peer(self.sock):
            self.close()
        if self.sock is None:
            self.sock = self._open()
        return self.sock

    def post(self, request: bytes) -> int:
        """Send ``request`` (a whole POST, head and body); the answer's status. Raises
        ``OSError`` or ``HTTPException``."""
        try:
            sock = self._socket()
            sock.sendall(request)
            answer = _Answer()
            keep = answer.read(sock)
        except BaseException:
            self.close()
            raise
        if not keep:
            self.close()
        return answer.status

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _authority(host: str, port: int) -> str:
    """``host:port`` as a request names it: an IPv6 address in brackets, a name in ASCII."""
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host if host.isascii() else host.encode('idna').decode()}:{port}"


def _tunnel(sock: socket.socket, authority: str, proxy: Proxy) -> None:
    """Ask the proxy for a tunnel to ``authority`` (``CONNECT``); ``OSError`` unless it
    answers 2xx. Its answer's head is read by ``http.client`` (a tunnel's answer has no body,
    which a parser of answers to other requests would wait for)."""
    lines = [f"CONNECT {authority} HTTP/1.1", f"host: {authority}"]
    if proxy.authorization:
        lines.append(f"proxy-authorization: {proxy.authorization}")
    sock.sendall("".join(line + "\r\n" for line in lines).encode() + b"\r\n")
    answer = http.client.HTTPResponse(sock, method="CONNECT")
    try:
        answer.begin()
    finally:
        answer.close()  # its reader only: the socket stays open
    if not 200 <= answer.status < 300:
        raise OSError(TUNNEL_REFUSED.format(status=answer.status, reason=answer.reason.strip()))


class BadAnswer(http.client.HTTPException):
    """The receiver's answer cannot be read: the attempt fails, the connection is closed."""


class _Answer:
    """One answer, read by ``httptools`` as it arrives: its status, and up to
    ``ANSWER_LIMIT`` bytes of its body (counted, not kept). Interim ``1xx`` answers are
    passed over, as ``http.client`` did."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headed = False  # the final answer's headers have ended
        self.body = 0
        self.done = False
        self.keep = False  # the answer lets the connection carry the next request
        self.more = False  # the receiver sent more than the answer

    def read(self, sock: socket.socket) -> bool:
        """Read the answer from ``sock``; whether the connection may carry the next request."""
        received = 0
        while not self.done:
            data = sock.recv(RECEIVE_SIZE)
            if not data:
                if self.headed:  # a body that ends with the connection
                    return False
                raise http.client.RemoteDisconnected(NO_ANSWER)
            received += len(data)
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                raise BadAnswer(NOT_HTTP_ANSWER) from None
            if not self.headed and received > HEAD_LIMIT:
                raise BadAnswer(HEAD_TOO_LONG)
            if self.body > ANSWER_LIMIT:
                return False  # left unread
        return self.keep and not self.more

    # httptools' callbacks
    def on_message_begin(self) -> None:
        self.more = self.done

    def on_headers_complete(self) -> None:
        if not self.done:
            self.status = self.parser.get_status_code()
            self.headed = not 100 <= self.status < 200

    def on_body(self, body: bytes) -> None:
        self.body += len(body)

    def on_message_complete(self) -> None:
        if self.headed and not self.done:
            self.done = True
            # Asked now: once the message is over, the parser has forgotten its headers.
            self.keep = self.parser.should_keep_alive()


def _refused(error: str) -> Callable[[Message], SendResult]:
    def send(notification: Message) -> SendResult:
        return SendResult(ok=False, error=error)

    return send


@contextmanager
def webhook_sender(channel: NotificationChannel) -> Iterator[Callable[[Message], SendResult]]:
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
    head = target.request_head()

    def send(notification: Message) -> SendResult:
        try:
            body = notification.payload.encode()
            signed = signed_headers(
                signer=signer, msg_id=message_id(notification), body=body, at=datetime.now(UTC)
            )
            lines = "".join(f"{name}: {value}\r\n" for name, value in signed.items())
            request = f"{head}content-length: {len(body)}\r\n{lines}\r\n".encode() + body
            status = connection.post(request)
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
