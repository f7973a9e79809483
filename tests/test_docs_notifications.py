"""docs/notifications.md's two receivers of webhooks work: the one with ``standardwebhooks``
and the plain HMAC recipe each accept a real webhook sent by ``notifications.senders`` and refuse
one signed with another secret."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from http.server import HTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from notifications.channels import webhook_secret_new
from notifications.models import Notification, NotificationChannel
from notifications.senders import SendResult, send
from tests.live import free_port
from tests.receivers import http_receiver

DOC = Path(__file__).resolve().parent.parent / "docs" / "notifications.md"
BODY = (
    '{"type": "call.held", "timestamp": "2026-12-03T12:00:00Z", "data": {"call": {"tool": '
    '"pay", "status": "pending"}, "url": "http://127.0.0.1:8000/calls/1/"}}'
)


def python_block(containing: str) -> str:
    blocks: list[str] = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    [block] = [block for block in blocks if containing in block]
    return block


def webhook_to(url: str, secret: str) -> SendResult:
    channel = NotificationChannel(kind=NotificationChannel.Kind.WEBHOOK, target=url, secret=secret)
    now = timezone.now()
    notification = Notification(
        id=uuid.uuid4(), event="call.held", payload=BODY, created_at=now, next_attempt_at=now
    )
    return send(channel=channel, notification=notification)


def test_the_plain_hmac_recipe_accepts_a_real_webhook_and_refuses_another_secret() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(python_block("def verify("), str(DOC), "exec"), namespace)
    verify: Callable[[str, dict[str, str], bytes], bool] = namespace["verify"]
    secret = webhook_secret_new()
    with http_receiver() as receiver:
        assert webhook_to(receiver.url, secret).ok
        [got] = receiver.wait_for(1)
    assert verify(secret, got.headers, got.body)
    assert not verify(webhook_secret_new(), got.headers, got.body)
    assert not verify(secret, got.headers, got.body + b" ")


def test_the_standardwebhooks_receiver_accepts_a_real_webhook(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = python_block("class Receiver(")
    code = code.replace('HTTPServer(("127.0.0.1", 9000), Receiver).serve_forever()\n', "")
    namespace: dict[str, Any] = {"__name__": "receiver"}
    exec(compile(code, str(DOC), "exec"), namespace)
    secret = namespace["SECRET"] = webhook_secret_new()
    port = free_port()
    server = HTTPServer(("127.0.0.1", port), namespace["Receiver"])
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        assert webhook_to(url, secret) == SendResult(ok=True, status_code=204)
        assert webhook_to(url, webhook_secret_new()) == SendResult(
            ok=False, status_code=401, error="HTTP 401"
        )
    finally:
        server.shutdown()
        server.server_close()
    printed = capsys.readouterr().out
    assert "call.held pay pending http://127.0.0.1:8000/calls/1/\n" in printed
