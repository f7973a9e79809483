"""Sending one notification over one channel (docs/notifications.md): a webhook, an email or
an Apprise message. Called by the delivery loop from a worker thread; never raises."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from approvals.senders.result import SendResult, failure

if TYPE_CHECKING:
    import httpx

    from approvals.models import Notification, NotificationChannel

__all__ = ["SendResult", "channel_sender", "send"]

UNKNOWN_KIND = "unknown channel kind"


def send(
    *, channel: NotificationChannel, notification: Notification, http: httpx.Client | None = None
) -> SendResult:
    """Send ``notification`` over ``channel`` once: any 2xx (or a mail the server accepted)
    is ok; redirects are not followed; outbound requests time out after
    ``COUNTERSIGN_NOTIFY_TIMEOUT`` seconds. Every failure, an exception too, is a
    ``SendResult(ok=False)`` with a short error that names no secret. ``http``: the client
    a webhook is posted with (``channel_sender``'s), else one of its own."""
    from approvals.models import NotificationChannel

    try:
        if channel.kind == NotificationChannel.Kind.WEBHOOK:
            from approvals.senders.webhook import webhook_send

            return webhook_send(channel=channel, notification=notification, http=http)
        if channel.kind == NotificationChannel.Kind.EMAIL:
            from approvals.senders.mail import email_send

            return email_send(channel=channel, notification=notification)
        if channel.kind == NotificationChannel.Kind.APPRISE:
            from approvals.senders.via_apprise import apprise_send

            return apprise_send(channel=channel, notification=notification)
    except Exception as exc:
        return failure(exc, channel=channel)
    return SendResult(ok=False, error=UNKNOWN_KIND)


@contextmanager
def channel_sender(channel: NotificationChannel) -> Iterator[Callable[[Notification], SendResult]]:
    """``send`` for one message after another over ``channel``: a webhook's requests share
    one client, so they reuse its connection to the receiver."""
    from approvals.models import NotificationChannel

    if channel.kind != NotificationChannel.Kind.WEBHOOK:
        yield functools.partial(_send_over, channel, None)
        return
    from approvals.senders.webhook import webhook_client

    with webhook_client() as http:
        yield functools.partial(_send_over, channel, http)


def _send_over(
    channel: NotificationChannel, http: httpx.Client | None, notification: Notification
) -> SendResult:
    return send(channel=channel, notification=notification, http=http)
