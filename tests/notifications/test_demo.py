"""What make run shows of notifications: the demo's two channels, its receiver of webhooks
(verified with ``standardwebhooks``, printed), and mail printed in short."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.mail import EmailMultiAlternatives
from django.test import RequestFactory
from standardwebhooks import Webhook

from approvals.models import AuditEntry
from approvals.services.demo import demo_ensure
from notifications.demo import (
    DEMO_EMAIL_CHANNEL,
    DEMO_EMAIL_EVENTS,
    DEMO_WEBHOOK_CHANNEL,
    demo_webhook,
)
from notifications.models import NotificationChannel
from notifications.senders.console import EmailBackend
from notifications.senders.webhook import signed_headers

RULES = Path(__file__).resolve().parents[2] / "examples" / "rules.txt"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    """The demo's people get passwords; hashing them fast keeps these tests quick."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_the_demo_makes_its_channels_once_and_follows_the_servers_port() -> None:
    demo_ensure(rules_file=RULES, url="http://127.0.0.1:8000")
    demo_ensure(rules_file=RULES, url="http://127.0.0.1:8123/")
    mail = NotificationChannel.objects.get(name=DEMO_EMAIL_CHANNEL)
    hook = NotificationChannel.objects.get(name=DEMO_WEBHOOK_CHANNEL)
    assert (mail.kind, mail.target, mail.events) == ("email", "approvers", list(DEMO_EMAIL_EVENTS))
    assert hook.kind == "webhook"
    assert hook.target == "http://127.0.0.1:8123/demo/webhook"
    assert hook.secret.startswith("whsec_")
    assert NotificationChannel.objects.count() == 2
    # The move is audited, its secret masked.
    moved = AuditEntry.objects.filter(object_id=str(hook.pk)).order_by("pk").last()
    assert moved is not None
    assert hook.secret not in moved.before + moved.after
    assert sorted(User.objects.exclude(email="").values_list("email", flat=True)) == [
        "alice@example.com",
        "bob@example.com",
    ]


def test_where_private_targets_are_refused_the_demo_makes_no_webhook_to_itself(
    settings: Any,
) -> None:
    settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS = False
    demo_ensure(rules_file=RULES, url="http://127.0.0.1:8000")
    assert list(NotificationChannel.objects.values_list("name", flat=True)) == [DEMO_EMAIL_CHANNEL]


def test_without_a_url_the_demo_makes_no_channel() -> None:
    demo_ensure(rules_file=RULES)
    assert not NotificationChannel.objects.exists()


def test_the_demo_receiver_prints_verified_webhooks_and_refuses_others(
    capsys: pytest.CaptureFixture[str],
) -> None:
    demo_ensure(rules_file=RULES, url="http://127.0.0.1:8000")
    secret = NotificationChannel.objects.get(name=DEMO_WEBHOOK_CHANNEL).secret
    body = json.dumps(
        {
            "type": "call.held",
            "timestamp": "2026-12-03T12:00:00Z",
            "data": {
                "call": {"tool": "pay", "principal": "acme-ops", "status": "pending"},
                "url": "http://127.0.0.1:8000/calls/1/",
            },
        }
    )
    msg_id = f"msg_{uuid.uuid4().hex}"
    headers = signed_headers(
        signer=Webhook(secret), msg_id=msg_id, body=body.encode(), at=datetime.now(UTC)
    )
    factory = RequestFactory()

    def post(headers: dict[str, str]) -> int:
        request = factory.post(
            "/demo/webhook",
            data=body,
            content_type="application/json",
            headers=headers,
        )
        return demo_webhook(request).status_code

    assert post(headers) == 204
    printed = capsys.readouterr().out
    assert printed == (
        f"Webhook verified ({msg_id}): call.held · pay for acme-ops, pending · "
        "http://127.0.0.1:8000/calls/1/\n"
    )
    forged = {**headers, "webhook-signature": "v1,bm90IHRoZSBzaWduYXR1cmU="}
    assert post(forged) == 401
    assert capsys.readouterr().out == "Webhook refused: No matching signature found\n"


def test_printed_mail_is_short_and_once_per_text() -> None:
    stream = io.StringIO()
    mails = []
    for to in ("alice@example.com", "bob@example.com"):
        mail = EmailMultiAlternatives(
            "[Countersign] Held", "Tool: pay\n\nhttp://x/calls/1/", to=[to]
        )
        mail.attach_alternative("<p>HTML part</p>", "text/html")
        mails.append(mail)
    assert EmailBackend(stream=stream, timeout=10).send_messages(mails) == 2
    assert stream.getvalue() == (
        "Mail, printed here (no mail server is set: EMAIL_URL) to alice@example.com, "
        "bob@example.com: [Countersign] Held\n"
        "    Tool: pay\n"
        "\n"
        "    http://x/calls/1/\n"
    )
