"""Pruning the outbox (notifications/attempts.py): delivered and failed messages older than
``COUNTERSIGN_NOTIFY_KEEP_DAYS`` go with their attempts, pending ones never; the setting is
checked when the server starts."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from approvals.models import Agent
from notifications import attempts
from notifications.attempts import notifications_prune
from notifications.delivery import deliver_once
from notifications.models import DeliveryAttempt, Notification
from tests.live import ROOT
from tests.outbox import held, holding_agent, webhook_channel
from tests.receivers import http_receiver

pytestmark = pytest.mark.django_db
Status = Notification.Status


def aged(agent: Agent, days: float, status: str, count: int = 1) -> list[Notification]:
    """``count`` messages (a call each) of ``status``, written ``days`` ago, each with an
    attempt."""
    made = []
    for _ in range(count):
        message = Notification.objects.get(call=held(agent))
        at = timezone.now() - timedelta(days=days)
        Notification.objects.filter(pk=message.pk).update(status=status, created_at=at, attempts=1)
        DeliveryAttempt.objects.create(
            notification=message, at=at, duration_ms=3, ok=status == Status.DELIVERED
        )
        made.append(message)
    return made


@pytest.fixture
def agent() -> Agent:
    webhook_channel("https://hooks.example.test/countersign")
    return holding_agent()


def test_old_delivered_and_failed_messages_go_with_their_attempts_and_pending_ones_stay(
    settings: Any, agent: Agent
) -> None:
    settings.COUNTERSIGN_NOTIFY_KEEP_DAYS = 30
    aged(agent, 31, Status.DELIVERED)
    aged(agent, 45, Status.FAILED)
    [old_pending] = aged(agent, 90, Status.PENDING)
    [recent] = aged(agent, 29, Status.DELIVERED)
    assert notifications_prune() == 2
    kept = set(Notification.objects.values_list("pk", flat=True))
    assert kept == {old_pending.pk, recent.pk}
    attempts = set(DeliveryAttempt.objects.values_list("notification_id", flat=True))
    assert attempts == kept
    assert notifications_prune() == 0
    settings.COUNTERSIGN_NOTIFY_KEEP_DAYS = 7
    assert notifications_prune() == 1
    assert list(Notification.objects.values_list("pk", flat=True)) == [old_pending.pk]


def test_a_prune_goes_batch_by_batch_until_none_is_left(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    aged(agent, 40, Status.DELIVERED, count=5)
    aged(agent, 1, Status.DELIVERED)
    monkeypatch.setattr(attempts, "PRUNE_BATCH", 2)
    assert notifications_prune() == 5
    assert Notification.objects.count() == 1


def test_deliver_notifications_prune_prunes_and_ends(settings: Any) -> None:
    settings.COUNTERSIGN_NOTIFY_THREADS = 1
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        agent = holding_agent()
        held(agent)
        held(agent)
        assert deliver_once() == 2
    first = Notification.objects.order_by("created_at").first()
    assert first is not None
    Notification.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(days=31))
    out = io.StringIO()
    call_command("deliver_notifications", "--prune", stdout=out)
    assert out.getvalue() == "1 pruned\n"
    assert Notification.objects.count() == 1


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("COUNTERSIGN_NOTIFY_KEEP_DAYS", "0", "must be between 1 and 3650"),
        ("COUNTERSIGN_NOTIFY_KEEP_DAYS", "thirty", "must be a whole number"),
        ("COUNTERSIGN_NOTIFY_PRIVATE_TARGETS", "nope", "must be one of 1/0"),
    ],
)
def test_a_bad_setting_stops_the_start_with_a_clear_message(
    name: str, value: str, message: str
) -> None:
    started = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert f"{name} {message}" in started.stderr
