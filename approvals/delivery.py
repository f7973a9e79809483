"""The delivery loop: the outbox's messages sent, each claimed by one loop at a time
(docs/notifications.md, "Delivery").

Every server process runs one, started with the expiry sweep (``config/asgi.py``), and
``manage.py deliver_notifications`` runs one on its own. The loop lives on the event loop but
does no I/O there: each claim runs in a thread of its own, each send in a bounded pool of
``COUNTERSIGN_NOTIFY_THREADS`` threads, at most one message per channel at a time, so a slow
or dead receiver holds one thread and delays only its own channel's messages. A commit that
wrote messages wakes this process's loop at once (``delivery_wake``); other processes'
messages and retries are found by a look once a second. The loop also writes the
``call.expiring`` notices that have come due.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from approvals.models import Notification, NotificationChannel
from approvals.queries.notifications import notifications_claim, notifications_due_any
from approvals.services.notifications import (
    attempt_outcome,
    calls_expiring_notify,
    notification_attempt_record,
)
from config.runtime.sqlite_writers import write_transaction

if TYPE_CHECKING:
    from approvals.senders import SendResult

T = TypeVar("T")
LEASE = timedelta(seconds=30)
POLL_SECONDS = 1.0
EXPIRING_SCAN_SECONDS = 5.0

logger = logging.getLogger(__name__)


def _send(channel: NotificationChannel, notification: Notification) -> SendResult:
    # Imported late: the senders load libraries a process without notifications never needs.
    from approvals.senders import send

    return send(channel=channel, notification=notification)


def notification_send(notification_id: uuid.UUID, *, now: datetime | None = None) -> str | None:
    """Send one claimed message once and keep the attempt; its status after, or None when
    it was no longer pending (delivered by another loop, its channel deleted)."""
    notification = (
        Notification.objects.select_related("channel", "call")
        .filter(pk=notification_id, status=Notification.Status.PENDING)
        .first()
    )
    if notification is None:
        return None
    at = now or timezone.now()
    started = time.monotonic()
    result = _send(notification.channel, notification)
    duration_ms = round((time.monotonic() - started) * 1000)
    outcome = attempt_outcome(result, duration_ms=duration_ms)
    ended = at + timedelta(milliseconds=duration_ms) if now else timezone.now()
    return notification_attempt_record(notification=notification, outcome=outcome, at=at, now=ended)


def notifications_claim_due(
    *, limit: int, busy: frozenset[int] = frozenset(), now: datetime | None = None
) -> list[tuple[uuid.UUID, int]]:
    """Lease up to ``limit`` due messages for this loop (ids and channels)."""
    now = now or timezone.now()
    if not notifications_due_any(now=now):
        return []
    with write_transaction():
        return notifications_claim(now=now, lease_until=now + LEASE, limit=limit, busy=busy)


def _in_thread(work: Callable[[], T]) -> T:
    """``work`` in a thread of the loop's: its database connection let go as a request's is."""
    try:
        return work()
    finally:
        close_old_connections()


def deliver_once(*, now: datetime | None = None, threads: int | None = None) -> int:
    """Claim what is due now and send it, one message per channel at a time, in ``threads``
    threads (default ``COUNTERSIGN_NOTIFY_THREADS``; 1: in the caller's own, on its
    connection); how many were attempted. ``deliver_notifications --once`` and the tests run
    it; ``now`` stands for the clock."""
    threads = threads or settings.COUNTERSIGN_NOTIFY_THREADS
    attempted = 0
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="notify") as pool:
        while True:
            # Each round ends before the next claims.
            claimed = notifications_claim_due(limit=threads, now=now)
            if not claimed:
                return attempted
            if threads == 1:
                notification_send(claimed[0][0], now=now)
            else:
                sends = [
                    pool.submit(_in_thread, functools.partial(notification_send, key, now=now))
                    for key, _ in claimed
                ]
                for sent in sends:
                    sent.result()
            attempted += len(claimed)


class Deliverer:
    """One process's loop, on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.wake = asyncio.Event()
        self.stopping = False
        self.threads = settings.COUNTERSIGN_NOTIFY_THREADS
        self.pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="notify")
        # Claims and the expiring scan: apart from the sends, so a pool full of slow
        # receivers never keeps a claim waiting.
        self.control = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notify-claim")
        self.in_flight: dict[uuid.UUID, int] = {}
        self.task: asyncio.Task[None] | None = None

    def poke(self) -> None:
        """Wake the loop; from any thread."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.wake.set)

    def _sent(self, notification_id: uuid.UUID, future: asyncio.Future[str | None]) -> None:
        self.in_flight.pop(notification_id, None)
        if not future.cancelled() and future.exception() is not None:
            logger.error("notification delivery failed", exc_info=future.exception())
        self.wake.set()

    async def _claim_and_send(self) -> None:
        free = self.threads - len(self.in_flight)
        if free <= 0 or self.stopping:
            return
        busy = frozenset(self.in_flight.values())
        claim = functools.partial(notifications_claim_due, limit=free, busy=busy)
        claimed = await self.loop.run_in_executor(self.control, _in_thread, claim)
        for notification_id, channel_id in claimed:
            self.in_flight[notification_id] = channel_id
            send = functools.partial(notification_send, notification_id)
            future = self.loop.run_in_executor(self.pool, _in_thread, send)
            future.add_done_callback(functools.partial(self._sent, notification_id))

    async def run(self) -> None:
        scanned = 0.0
        while not self.stopping:
            try:
                await self._claim_and_send()
                if time.monotonic() - scanned >= EXPIRING_SCAN_SECONDS:
                    scanned = time.monotonic()
                    await self.loop.run_in_executor(self.control, _in_thread, calls_expiring_notify)
            except Exception:
                # A database hiccup must not stop delivery for good: log it and try again.
                logger.exception("notification delivery loop failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), POLL_SECONDS)
            self.wake.clear()

    async def drain(self) -> None:
        """Stop claiming, and wait for the sends under way (each ends by its timeout)."""
        self.stopping = True
        self.wake.set()
        if self.task is not None:
            await self.task  # ends after the cycle under way: nothing is claimed after it
        while self.in_flight:
            await asyncio.sleep(0.05)
        self.pool.shutdown(wait=True)
        self.control.shutdown(wait=True)


_lock = threading.Lock()
_deliverer: Deliverer | None = None
_task: asyncio.Task[None] | None = None


def ensure_delivery_started() -> Deliverer:
    """Start this process's loop on the running event loop, once."""
    global _deliverer, _task
    loop = asyncio.get_running_loop()
    task, deliverer = _task, _deliverer
    if task is not None and deliverer is not None and not task.done() and deliverer.loop is loop:
        return deliverer  # every request asks: no lock once it runs
    with _lock:
        if _task is None or _task.done() or _task.get_loop() is not loop or _deliverer is None:
            if _deliverer is not None:
                # A loop of an event loop that has gone (each test has its own): its idle
                # threads would otherwise stay for the rest of the process.
                _deliverer.pool.shutdown(wait=False)
                _deliverer.control.shutdown(wait=False)
            _deliverer = Deliverer(loop)
            _task = _deliverer.task = loop.create_task(_deliverer.run())
        return _deliverer


def delivery_wake() -> None:
    """Wake this process's loop, if it runs one (after a commit that wrote messages)."""
    deliverer = _deliverer
    if deliverer is not None:
        with contextlib.suppress(RuntimeError):  # its event loop has closed
            deliverer.poke()
