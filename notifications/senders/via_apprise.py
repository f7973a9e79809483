"""Chat and push services through the ``apprise`` library: a short message with the facts of
the call and the link to its page, to one Apprise URL (``slack://…``, ``ntfy://…``, …)."""

from __future__ import annotations

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
from notifications.senders.notice import notice_read
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
    with _apprise_log() as log:
        service = apprise.Apprise.instantiate(channel.target.strip(), asset=asset)
        if service is None:
            return SendResult(ok=False, error=NOT_APPRISE)
        timeout = float(settings.COUNTERSIGN_NOTIFY_TIMEOUT)
        service.socket_connect_timeout = timeout
        service.socket_read_timeout = timeout
        notice = notice_read(notification=notification)
        body = render_to_string("notifications/message.txt", {"notice": notice}).strip()
        sent = service.notify(
            body=body,
            title=" ".join(notice.subject.split())[:250],
            notify_type=NOTIFY_TYPES.get(notification.event, apprise.NotifyType.INFO),
        )
    if sent:
        return SendResult(ok=True)
    name = str(getattr(service, "service_name", "") or "Apprise")
    text = REFUSED.format(service=name)
    if log.lines:
        text = f"{text}: {log.lines[-1]}"
    return SendResult(ok=False, error=scrub(text, channel=channel))
