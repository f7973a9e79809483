"""Chat and push services through the ``apprise`` library: a short message with the facts of
the call and the link to its page, to one Apprise URL (``slack://…``, ``ntfy://…``, …). An
attempt ends within ``COUNTERSIGN_NOTIFY_TIMEOUT`` by the clock, its connections checked
against internal addresses where those are refused (``outbound.py``)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import apprise
from apprise.logger import LOGGER_NAME
from django.conf import settings
from django.template.loader import render_to_string

from notifications.models import NotificationChannel
from notifications.senders.literal_text import CHAT
from notifications.senders.notice import notice_read
from notifications.senders.outbound import (
    AttemptSockets,
    AttemptTimedOut,
    PrivateAddressRefused,
    attempt_within,
    host_kind,
    proxy_addresses,
)
from notifications.senders.result import SendResult, scrub

if TYPE_CHECKING:
    from notifications.senders.message import Message

NOT_APPRISE = "not an Apprise URL this Apprise knows"
REFUSED = "the {service} service did not take the message"
Event = NotificationChannel.Event
NOTIFY_TYPES: dict[str, apprise.NotifyType] = {
    Event.HELD: apprise.NotifyType.WARNING,
    Event.EXPIRING: apprise.NotifyType.WARNING,
    Event.DECIDED: apprise.NotifyType.SUCCESS,
    Event.EXPIRED: apprise.NotifyType.FAILURE,
    Event.CANCELLED: apprise.NotifyType.INFO,
}


class _ThisThread(logging.Handler):
    """Apprise's warnings and errors logged by the current thread only: the delivery loop
    sends from several threads at once."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.lines.append(record.getMessage())


@contextmanager
def _apprise_log() -> Iterator[_ThisThread]:
    handler = _ThisThread()
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def apprise_send(*, channel: NotificationChannel, notification: Message) -> SendResult:
    # Memory only: nothing of Apprise's (tokens it caches) is written to disk.
    asset = apprise.AppriseAsset(storage_mode="memory")
    service = apprise.Apprise.instantiate(channel.target.strip(), asset=asset)
    if service is None:
        return SendResult(ok=False, error=NOT_APPRISE)
    timeout = float(settings.COUNTERSIGN_NOTIFY_TIMEOUT)
    service.socket_connect_timeout = timeout
    service.socket_read_timeout = timeout
    notice = notice_read(notification=notification, text=CHAT)
    body = render_to_string("notifications/message.txt", {"notice": notice}).strip()
    notify = functools.partial(
        service.notify,
        body=body,
        title=" ".join(notice.subject.split())[:250],
        # Plain text: a service that takes HTML gets it escaped by Apprise.
        body_format=apprise.NotifyFormat.TEXT,
        notify_type=NOTIFY_TYPES.get(notification.event, apprise.NotifyType.INFO),
    )
    sockets = AttemptSockets(public_only=not settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS)

    def deliver() -> tuple[bool, list[str]]:
        """Sent in a thread of the attempt's own, its connections cut at the deadline."""
        if sockets.public_only:
            sockets.exempt = proxy_addresses()
            host = service_host(service)
            if host and sockets.exempt:
                # Through a proxy, which connects out of this process's sight.
                sockets.check_host(host)
        with _apprise_log() as log:
            return bool(notify()), log.lines

    try:
        sent, lines = attempt_within(deliver, seconds=timeout, sockets=sockets)
    except AttemptTimedOut as exc:
        return exc.result()
    except PrivateAddressRefused:
        return SendResult(ok=False, error=sockets.refused)
    if sockets.refused:  # a connection refused, which Apprise reported as its own failure
        return SendResult(ok=False, error=sockets.refused)
    if sent:
        return SendResult(ok=True)
    name = str(getattr(service, "service_name", "") or "Apprise")
    text = REFUSED.format(service=name)
    if lines:
        text = f"{text}: {lines[-1]}"
    return SendResult(ok=False, error=scrub(text, channel=channel))


def service_host(service: apprise.NotifyBase) -> str:
    """The host an Apprise URL names where its service's URLs may name one (``json://host/…``,
    ``ntfy://host/topic``) and it looks like one (an address, ``localhost``, or a name with a
    dot); empty otherwise. The parts of a URL of a service reached at its own public address
    are tokens (``slack://T…/B…/…``, ``ntfys://topic``): those are never looked up."""
    templates = getattr(service, "templates", ())
    host = getattr(service, "host", "")
    if not isinstance(host, str) or not any("{host}" in str(t) for t in templates):
        return ""
    if host_kind(host) is not None or "." in host.strip("."):
        return host
    return ""
