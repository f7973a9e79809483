"""The deploy check warns when an email channel exists and no mail server is configured."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from notifications import checks
from notifications.models import NotificationChannel

pytestmark = pytest.mark.django_db
Kind = NotificationChannel.Kind


def email_channel(enabled: bool = True) -> NotificationChannel:
    return NotificationChannel.objects.create(
        kind=Kind.EMAIL,
        target="approvers",
        enabled=enabled,
        events=list(NotificationChannel.Event.values),
    )


def test_an_email_channel_without_a_mail_server_is_warned_of(settings: Any) -> None:
    settings.DEBUG, settings.COUNTERSIGN_EMAIL_CONFIGURED = False, False
    assert checks.mail_server_check() == []
    email_channel()
    [warning] = checks.mail_server_check()
    assert (warning.id, warning.msg, warning.hint) == (
        "countersign.W001",
        checks.NO_MAIL_SERVER,
        checks.NO_MAIL_SERVER_HINT,
    )
    # As `check --deploy` reports it (warnings fail it only with --fail-level WARNING).
    with pytest.raises(SystemCheckError, match=r"countersign\.W001"):
        call_command("check", deploy=True, fail_level="WARNING", tags=["notifications"])


def test_no_warning_with_a_mail_server_under_debug_or_without_email_channels(
    settings: Any,
) -> None:
    settings.DEBUG, settings.COUNTERSIGN_EMAIL_CONFIGURED = False, False
    email_channel(enabled=False)
    NotificationChannel.objects.create(kind=Kind.WEBHOOK, target="http://127.0.0.1:9/")
    assert checks.mail_server_check() == []
    email_channel()
    settings.COUNTERSIGN_EMAIL_CONFIGURED = True
    assert checks.mail_server_check() == []
    settings.DEBUG, settings.COUNTERSIGN_EMAIL_CONFIGURED = True, False
    assert checks.mail_server_check() == []
