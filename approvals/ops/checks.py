"""System checks: what the written-out SQL of approvals/services/statements.py needs of the
database, and a mail server where email channels exist (``check --deploy``)."""

from __future__ import annotations

import sqlite3
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import DatabaseError, connection

SQLITE_MINIMUM = (3, 35)  # upserts with RETURNING (approvals/services/statements.py)
SQLITE_TOO_OLD = "SQLite {found} is older than 3.35, which counting calls needs (RETURNING)."


@register("database")
def sqlite_version_check(**kwargs: Any) -> list[CheckMessage]:
    if connection.vendor != "sqlite" or sqlite3.sqlite_version_info >= SQLITE_MINIMUM:
        return []
    return [Error(SQLITE_TOO_OLD.format(found=sqlite3.sqlite_version), id="countersign.E001")]


NO_MAIL_SERVER = (
    "An email notification channel exists, but no mail server is configured: mail goes to an "
    "SMTP server on localhost:25."
)
NO_MAIL_SERVER_HINT = "Set EMAIL_URL (e.g. smtp://user:password@host:587?tls=1) or EMAIL_HOST."


@register("notifications", deploy=True)
def mail_server_check(**kwargs: Any) -> list[CheckMessage]:
    """In production (DEBUG off), an enabled email channel needs a mail server configured."""
    from approvals.models import NotificationChannel

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
