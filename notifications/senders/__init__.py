"""Sending notifications over one channel (docs/notifications.md): a webhook, an email or an
Apprise message. Called by the delivery loop from a worker thread; never raises."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from notifications.senders.message import Message
from notifications.senders.result import SendResult, failure

if TYPE_CHECKING:
    from notifications.models import NotificationChannel

__all__ = ["Message", "SendResult", "channel_sender", "send"]

UNKNOWN_KIND = "unknown channel kind"


Sender = Callable[[Message], SendResult]


def send(*, channel: NotificationChannel, notification: Message) -> SendResult:
    """Send ``notification`` over ``channel`` once (``channel_sender`` for one message)."""
    with channel_sender(channel) as sender:
        return sender(notification)


@contextmanager
def channel_sender(channel: NotificationChannel) -> Iterator[Sender]:
    """Send one message after another over ``channel``: any 2xx (or a mail the server
    accepted) is ok; redirects are not followed; each attempt ends within
    ``COUNTERSIGN_NOTIFY_TIMEOUT`` seconds by the clock (``outbound.py``). Every failure, an
    exception too, is a ``SendResult(ok=False)`` with a short error that names no secret. A
    webhook's requests share one connection to the receiver."""
    from notifications.models import NotificationChannel

    Kind = NotificationChannel.Kind
    if channel.kind == Kind.WEBHOOK:
        # Imported here: each sender loads libraries a process may never need.
        from notifications.senders.webhook import webhook_sender

        with webhook_sender(channel) as sender:
            yield sender
        return
    if channel.kind == Kind.EMAIL:
        from notifications.senders.mail import email_send as one
    elif channel.kind == Kind.APPRISE:
        from notifications.senders.via_apprise import apprise_send as one
    else:
        yield lambda notification: SendResult(ok=False, error=UNKNOWN_KIND)
        return

    def guarded(notification: Message) -> SendResult:
        try:
            return one(channel=channel, notification=notification)
        except Exception as exc:
            return failure(exc, channel=channel)

    yield guarded
