"""System checks: a mail server where email channels exist (``check --deploy``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register
from django.db import DatabaseError

from notifications.models import NotificationChannel

NO_MAIL_SERVER = (
    "An email notification channel exists, but no mail server is configured: mail goes to an "
    "SMTP server on localhost:25."
)
NO_MAIL_SERVER_HINT = "Set EMAIL_URL (e.g. smtp://user:password@host:587?tls=1) or EMAIL_HOST."


@register("notifications", deploy=True)
def mail_server_check(**kwargs: Any) -> list[CheckMessage]:
    """In production (DEBUG off), an enabled email channel needs a mail server configured."""
    if settings.DEBUG or settings.COUNTERSIGN_EMAIL_CONFIGURED:
        return []
    try:
        exists = NotificationChannel.objects.filter(
            kind=NotificationChannel.Kind.EMAIL, enabled=True
        ).exists()
    except DatabaseError:  # not migrated yet, or not reachable: nothing to say about channels
        return []
    if not exists:
        return []
    return [Warning(NO_MAIL_SERVER, hint=NO_MAIL_SERVER_HINT, id="countersign.W001")]
