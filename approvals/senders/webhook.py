"""Webhooks signed per the Standard Webhooks specification (https://www.standardwebhooks.com):
the payload as committed, POSTed as JSON, with ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` headers."""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import ssl
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import httpx
from django.conf import settings
from standardwebhooks import Webhook

from approvals.senders.result import SendResult, scrub

if TYPE_CHECKING:
    from approvals.models import Notification, NotificationChannel

BAD_SECRET = "the webhook secret is not a whsec_ key (base64 after whsec_)"  # noqa: S105 (a message)
NOT_HTTP = "the webhook target is not an http(s) URL"
REDIRECT_NOT_FOLLOWED = "HTTP {status}: redirects are not followed"
NOT_2XX = "HTTP {status}"
USER_AGENT = "Countersign-Webhooks/1"
SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix)


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


def signed_headers(*, secret: str, msg_id: str, body: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers for ``body`` sent at ``at`` (whole seconds)."""
    at = at.astimezone(UTC).replace(microsecond=0)
    signature = Webhook(secret).sign(msg_id=msg_id, timestamp=at, data=body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


@functools.cache
def _tls() -> ssl.SSLContext:
    """One context for every message: building one loads the CA certificates, which costs
    tens of milliseconds of CPU (bench/notify_bench.py), even for an ``http://`` target."""
    return ssl.create_default_context()


def webhook_client() -> httpx.Client:
    """A client as every webhook is sent with: the notifications' timeout, no redirects."""
    return httpx.Client(
        timeout=settings.COUNTERSIGN_NOTIFY_TIMEOUT, follow_redirects=False, verify=_tls()
    )


def webhook_send(
    *, channel: NotificationChannel, notification: Notification, http: httpx.Client | None = None
) -> SendResult:
    if not channel.target.startswith(("http://", "https://")):
        return SendResult(ok=False, error=NOT_HTTP)
    if not secret_valid(channel.secret):
        return SendResult(ok=False, error=BAD_SECRET)
    body = notification.payload
    headers = signed_headers(
        secret=channel.secret, msg_id=message_id(notification), body=body, at=datetime.now(UTC)
    )
    headers |= {"content-type": "application/json", "user-agent": USER_AGENT}
    try:
        with contextlib.ExitStack() as own:
            client = http or own.enter_context(webhook_client())
            response = client.post(channel.target, content=body.encode(), headers=headers)
    except httpx.HTTPError as exc:
        message = str(exc)
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
        return SendResult(ok=False, error=scrub(text, channel=channel))
    status = response.status_code
    if 200 <= status < 300:
        return SendResult(ok=True, status_code=status)
    if response.is_redirect:
        return SendResult(
            ok=False, status_code=status, error=REDIRECT_NOT_FOLLOWED.format(status=status)
        )
    return SendResult(ok=False, status_code=status, error=NOT_2XX.format(status=status))
