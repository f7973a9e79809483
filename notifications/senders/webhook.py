"""Webhooks signed per the Standard Webhooks specification (https://www.standardwebhooks.com):
the payload as committed, POSTed as JSON, with ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` headers, through httpx.

A run of messages shares one client, so one kept-alive connection while the answers allow it.
Each attempt, from connecting (through the proxy of ``HTTPS_PROXY`` or ``HTTP_PROXY`` unless
``NO_PROXY`` names the host) to the end of the answer, must end within
``COUNTERSIGN_NOTIFY_TIMEOUT`` seconds: a receiver that answers a byte at a time cannot hold
a sending thread past it. Redirects are not followed, and of an answer only its status is
used. With ``COUNTERSIGN_NOTIFY_PRIVATE_TARGETS`` off, each connection is checked against the
address it is opened to (``outbound.py``), and a proxied target's host before it is sent."""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import h11
import httpx
from django.conf import settings
from standardwebhooks import Webhook

from config.env import OutboundProxies
from notifications.senders.outbound import AttemptSockets, proxy_addresses, watched
from notifications.senders.result import SendResult, failure

if TYPE_CHECKING:
    from notifications.models import NotificationChannel
    from notifications.senders.message import Message

BAD_SECRET = "the webhook secret is not a whsec_ key (base64 after whsec_)"  # noqa: S105 (a message)
NOT_HTTP = "the webhook target is not an http(s) URL"
REDIRECT_NOT_FOLLOWED = "HTTP {status}: redirects are not followed"
NOT_2XX = "HTTP {status}"
TIMED_OUT = "no answer within COUNTERSIGN_NOTIFY_TIMEOUT ({seconds:g} s)"
BAD_ANSWER = "the answer could not be read as HTTP/1.1"
USER_AGENT = "Countersign-Webhooks/1"
SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix)
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_PORT = 65535  # httpx takes any number
# Most of an answer's body that is read (nothing in it is kept): a longer one is left unread
# and its connection closed, so a receiver cannot make a sender read without end.
ANSWER_LIMIT = 64 * 1024


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
    """The system's CAs (or ``SSL_CERT_FILE``'s), loaded once per process; the certificate
    and the host name are verified."""
    return ssl.create_default_context()


def webhook_url(target: str) -> httpx.URL | None:
    """The URL of an ``http(s)`` target with a host; None for any other."""
    try:
        url = httpx.URL(target)
    except (httpx.InvalidURL, ValueError):
        return None
    if url.scheme not in ("http", "https") or not url.host or (url.port or 0) > MAX_PORT:
        return None
    return url


def webhook_proxy(url: httpx.URL) -> httpx.Proxy | None:
    """The proxy ``url`` is reached through (``COUNTERSIGN_WEBHOOK_PROXIES``); None for a
    host that ``NO_PROXY`` names, or without one."""
    proxies: OutboundProxies = settings.COUNTERSIGN_WEBHOOK_PROXIES
    https = url.scheme == "https"
    port = url.port or (443 if https else 80)
    proxy = proxies.proxy_for(https=https, host=url.host, port=port)
    if proxy is None:
        return None
    headers = {"proxy-authorization": proxy.authorization} if proxy.authorization else None
    return httpx.Proxy(httpx.URL(scheme="http", host=proxy.host, port=proxy.port), headers=headers)


def webhook_client(url: httpx.URL, *, timeout: float) -> httpx.AsyncClient:
    """A client for one target's run: its proxy as configured (not httpx's own reading of
    the environment), redirects not followed, each step timed out as the whole attempt is.
    No connection is kept for the next message: bytes a broken receiver sends after an answer
    would otherwise be read as the next message's answer."""
    return httpx.AsyncClient(
        verify=tls_context(),
        limits=httpx.Limits(max_keepalive_connections=0),
        proxy=webhook_proxy(url),
        trust_env=False,
        follow_redirects=False,
        timeout=timeout,
        headers={"user-agent": USER_AGENT, "content-type": "application/json"},
    )


async def answer_status(
    client: httpx.AsyncClient, url: httpx.URL, *, body: bytes, headers: dict[str, str]
) -> int:
    """POST ``body``; the answer's status, once up to ``ANSWER_LIMIT`` bytes of its body are
    read (an answer closed part-read closes its connection)."""
    async with client.stream("POST", url, content=body, headers=headers) as answer:
        read = 0
        async for chunk in answer.aiter_raw():
            read += len(chunk)
            if read > ANSWER_LIMIT:
                break
        return answer.status_code


def attempt_error(exc: Exception, *, timeout: float) -> Exception:
    """The error kept for a failed attempt: for a transport error, the operating system's
    beneath it (a refused connection, an untrusted certificate), which says more than
    httpx's wrapper; never the receiver's own bytes, which h11's parse errors quote."""
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return TimeoutError(TIMED_OUT.format(seconds=timeout))
    if not isinstance(exc, httpx.TransportError):
        return exc
    deepest: BaseException = exc
    cause = exc.__cause__ or exc.__context__  # httpcore re-raises some in its pool
    while cause is not None:
        if isinstance(cause, BaseExceptionGroup):  # each address of a name failed
            cause = cause.exceptions[0]
        deepest, cause = cause, cause.__cause__ or cause.__context__
    if isinstance(deepest, OSError):
        return deepest
    if isinstance(deepest, h11.ProtocolError):
        return httpx.RemoteProtocolError(BAD_ANSWER)
    return exc


def _refused(error: str) -> Callable[[Message], SendResult]:
    def send(notification: Message) -> SendResult:
        return SendResult(ok=False, error=error)

    return send


@contextmanager
def webhook_sender(channel: NotificationChannel) -> Iterator[Callable[[Message], SendResult]]:
    """Send one message after another to ``channel``'s URL, over one client; each send never
    raises. The client runs on an event loop of this run's own, in the calling thread."""
    url = webhook_url(channel.target)
    if url is None:
        yield _refused(NOT_HTTP)
        return
    if not secret_valid(channel.secret):
        yield _refused(BAD_SECRET)
        return
    signer = Webhook(channel.secret)
    timeout = float(settings.COUNTERSIGN_NOTIFY_TIMEOUT)
    public_only = not settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS
    proxied = webhook_proxy(url) is not None
    exempt = proxy_addresses() if public_only and proxied else frozenset()

    async def attempt(
        client: httpx.AsyncClient, notification: Message, sockets: AttemptSockets
    ) -> int:
        async with asyncio.timeout(timeout):
            if public_only and proxied:
                # The proxy connects to the target, out of this process's sight.
                await asyncio.to_thread(sockets.check_host, url.host)
            body = notification.payload.encode()
            headers = signed_headers(
                signer=signer, msg_id=message_id(notification), body=body, at=datetime.now(UTC)
            )
            return await answer_status(client, url, body=body, headers=headers)

    # asyncio's own loop, whose connections are Python sockets: each is checked as it is
    # opened (outbound.py), as another loop's might not be.
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        client = webhook_client(url, timeout=timeout)

        def send(notification: Message) -> SendResult:
            # Bounded by asyncio's timeout: its connections are checked, never cut.
            sockets = AttemptSockets(public_only=public_only, exempt=exempt, cut=False)
            try:
                with watched(sockets) if public_only else nullcontext(sockets):
                    status = runner.run(attempt(client, notification, sockets))
            except Exception as exc:
                if sockets.refused:
                    return SendResult(ok=False, error=sockets.refused)
                return failure(attempt_error(exc, timeout=timeout), channel=channel)
            if 200 <= status < 300:
                return SendResult(ok=True, status_code=status)
            error = REDIRECT_NOT_FOLLOWED if status in REDIRECTS else NOT_2XX
            return SendResult(ok=False, status_code=status, error=error.format(status=status))

        try:
            yield send
        finally:
            runner.run(client.aclose())
