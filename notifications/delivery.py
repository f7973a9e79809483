"""The delivery loop: the outbox's messages sent, each claimed by one loop at a time
(docs/notifications.md, "Delivery").

Every server process runs one, started with the expiry sweep (``config/asgi.py``), and
``manage.py deliver_notifications`` runs one on its own. The loop lives on the event loop but
does no I/O there: each claim runs in a thread of its own and takes, per channel, a run of up
to ``RUN`` due messages, sent one after another over one connection in a bounded pool of
``COUNTERSIGN_NOTIFY_THREADS`` threads, at most one run per channel at a time, so a slow or
dead receiver holds one thread and delays only its own channel's messages. A commit that
wrote messages wakes this process's loop at once (``notifications.wake``); other processes'
messages and retries are found by a look once a second. The loop also writes the
``call.expiring`` notices that have come due, and prunes old messages once an hour.

A claim's lease outlasts the longest attempt, and a run renews it before an attempt that it
might not cover: no other loop takes a message over while it is being sent. A message is
sent only under a lease that covers the whole attempt, so one whose lease ran out (a run
held up past it) is never sent by two loops at once. Stopping (``Deliverer.drain``) ends
each run after the attempt under way: bounded by the attempts' deadline, whatever the
receivers do; what was not sent stays in the outbox for the next start.
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
from typing import NamedTuple, TypeVar

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from config.runtime.sqlite_writers import write_transaction
from notifications.attempts import (
    Attempt,
    attempt_outcome,
    notification_attempts_record,
    notifications_claim,
    notifications_due_any,
    notifications_lease_renew,
    notifications_prune,
)
from notifications.models import Notification
from notifications.outbox import calls_expiring_notify
from notifications.senders.outbound import GRACE_SECONDS
from notifications.wake import delivery_wake_register

T = TypeVar("T")
# Seconds a claim's lease lasts beyond the longest attempt: time to keep an attempt, and to
# send more of a run before the lease is renewed.
LEASE_MARGIN_SECONDS = 30.0
# Seconds of lease a run wants left after an attempt's longest, to keep it: with less, the
# run renews its lease before that attempt.
RECORD_SECONDS = 10.0
# Seconds a stopping loop waits, beyond the longest attempt, for its runs to keep theirs.
DRAIN_SECONDS = 5.0
PRUNE_SECONDS = 3600.0
# Most messages one claim takes of one channel, sent one after another over one connection:
# more than a gathering wait collects under the benches' load, so a run's own cost (its
# claim, its reads, its record) is shared by all of them.
RUN = 128
POLL_SECONDS = 1.0
EXPIRING_SCAN_SECONDS = 5.0
# After a commit that wrote messages, the loop waits this long before it claims, so that
# under load one claim, one run and one record serve the messages of many submissions
# (bench/notify_bench.py). A full run's end cuts the wait short: more of its channel is due
# already, and waiting each time would hold a channel's delivery to one run a wait.
GATHER_SECONDS = 0.1

logger = logging.getLogger(__name__)


def _run_read(notification_ids: list[uuid.UUID]) -> list[Notification]:
    """The claimed messages still pending, in the order given, with their channel."""
    # By id alone: given the status too, SQLite may search the status index instead, among
    # every pending message of a backlog.
    found = Notification.objects.filter(pk__in=notification_ids).select_related("channel")
    by_id = {message.pk: message for message in found if message.status == message.Status.PENDING}
    return [by_id[pk] for pk in notification_ids if pk in by_id]


def attempt_seconds() -> float:
    """The longest one attempt holds a sending thread: its deadline
    (``COUNTERSIGN_NOTIFY_TIMEOUT``), and the grace for its thread to end after it."""
    return float(settings.COUNTERSIGN_NOTIFY_TIMEOUT) + GRACE_SECONDS


def lease_length() -> timedelta:
    """How long a claim holds its messages unless renewed: longer than any attempt."""
    return timedelta(seconds=attempt_seconds() + LEASE_MARGIN_SECONDS)


class Claim(NamedTuple):
    """A run of one channel's messages, leased until ``lease_until``: the value this claim
    wrote, by which its messages are still known to be its own."""

    channel_id: int
    notification_ids: list[uuid.UUID]
    lease_until: datetime


def notifications_send(
    notification_ids: list[uuid.UUID],
    *,
    lease_until: datetime,
    now: datetime | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Send a run of one channel's claimed messages, leased until ``lease_until``, one after
    another, and keep their attempts in one transaction; how many were attempted. Before an
    attempt its lease might not cover, the run renews the lease; should another loop have
    claimed any of them since (this lease ran out), the run gives its claim up and sends no
    more. It also stops at its first failed send (a receiver that fails or hangs is not given
    the rest) and once ``stop`` is set; what it did not attempt is let go, due again at once.
    Messages no longer pending (delivered by another loop, their channel deleted) are passed
    over. ``now`` stands for the clock at the start."""
    # Imported late: the senders load libraries a process without notifications never needs.
    from notifications.senders import channel_sender

    run = _run_read(notification_ids)
    if not run:
        return 0
    channel = run[0].channel
    attempts: list[Attempt] = []
    base, started = now or timezone.now(), time.monotonic()
    wanted = timedelta(seconds=attempt_seconds() + RECORD_SECONDS)
    held = lease_until

    def clock() -> datetime:
        return base + timedelta(seconds=time.monotonic() - started)

    with channel_sender(channel) as send:
        for notification in run:
            if stop is not None and stop.is_set():
                break
            if held - clock() < wanted:
                until = clock() + lease_length()
                ids = [message.id for message in run]
                renewed = notifications_lease_renew(notification_ids=ids, held=held, until=until)
                held = until
                if renewed < len(run):
                    logger.warning(
                        "notification lease ran out and was taken over: %d message(s) left to "
                        "the loop that claimed them",
                        len(run) - renewed,
                    )
                    break
            at = clock()
            begun = time.monotonic()
            result = send(notification)
            duration_ms = round((time.monotonic() - begun) * 1000)
            ended = at + timedelta(milliseconds=duration_ms)
            outcome = attempt_outcome(result, duration_ms=duration_ms)
            attempts.append(Attempt(notification, outcome, at, ended))
            if not outcome.ok:
                break
    unattempted = [notification.id for notification in run[len(attempts) :]]
    notification_attempts_record(attempts=attempts, unattempted=unattempted, lease_until=held)
    return len(attempts)


def notifications_claim_due(
    *,
    channels: int,
    busy: frozenset[int] = frozenset(),
    now: datetime | None = None,
    look: bool = True,
) -> list[Claim]:
    """Lease the due messages of up to ``channels`` channels, a run of up to ``RUN`` each.
    ``look``: first see, without a lock, whether anything is due (not worth it right after
    a commit wrote messages)."""
    now = now or timezone.now()
    if look and not notifications_due_any(now=now):
        return []
    lease_until = now + lease_length()
    with write_transaction():
        claimed = notifications_claim(
            now=now, lease_until=lease_until, channels=channels, run=RUN, busy=busy
        )
    return [Claim(channel_id, ids, lease_until) for channel_id, ids in claimed]


def _in_thread(work: Callable[[], T]) -> T:
    """``work`` in a thread of the loop's: its database connection let go as a request's is."""
    try:
        return work()
    finally:
        close_old_connections()


def deliver_once(*, now: datetime | None = None, threads: int | None = None) -> int:
    """Claim what is due now and send it, one run per channel at a time, in ``threads``
    threads (default ``COUNTERSIGN_NOTIFY_THREADS``; 1: in the caller's own, on its
    connection); how many messages were attempted. ``deliver_notifications --once`` and
    the tests run it; ``now`` stands for the clock."""
    threads = threads or settings.COUNTERSIGN_NOTIFY_THREADS
    attempted = 0
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="notify") as pool:
        while True:
            # Each round ends before the next claims.
            claimed = notifications_claim_due(channels=threads, now=now)
            if not claimed:
                return attempted
            if threads == 1:
                [claim] = claimed
                attempted += notifications_send(
                    claim.notification_ids, lease_until=claim.lease_until, now=now
                )
                continue
            sends = [
                pool.submit(
                    _in_thread,
                    functools.partial(
                        notifications_send,
                        claim.notification_ids,
                        lease_until=claim.lease_until,
                        now=now,
                    ),
                )
                for claim in claimed
            ]
            attempted += sum(sent.result() for sent in sends)


class Deliverer:
    """One process's loop, on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.wake = asyncio.Event()
        # Set by a commit that wrote messages: the next claim need not look first.
        self.written = False
        # Set by the first commit's poke until the loop takes the wake up at its next claim:
        # the commits meanwhile need not hop to the event loop again (under load, one
        # wake per run instead of one per commit).
        self.poked = False
        # Set when a full run of a channel has been sent: the next claim need not wait.
        self.hurry = asyncio.Event()
        self.stopping = False
        # Set when stopping: each run ends after the attempt under way.
        self.halt = threading.Event()
        self.pruning: asyncio.Future[int] | None = None
        self.threads = settings.COUNTERSIGN_NOTIFY_THREADS
        self.pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="notify")
        # Claims and the expiring scan: apart from the sends, so a pool full of slow
        # receivers never keeps a claim waiting.
        self.control = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notify-claim")
        self.busy: set[int] = set()  # channels with a run under way
        self.task: asyncio.Task[None] | None = None

    def poke(self) -> None:
        """Wake the loop after a commit that wrote messages; from any thread. A claim that
        has not yet begun reads what this commit wrote: the loop clears ``poked`` before it
        claims."""
        if self.poked:
            return
        self.poked = True
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._written)

    def _written(self) -> None:
        self.written = True
        self.wake.set()

    def _sent(self, channel_id: int, full: bool, future: asyncio.Future[int]) -> None:
        self.busy.discard(channel_id)
        if not future.cancelled() and future.exception() is not None:
            logger.error("notification delivery failed", exc_info=future.exception())
        if full:
            self.hurry.set()
        self.wake.set()

    async def _claim_and_send(self) -> None:
        free = self.threads - len(self.busy)
        if free <= 0 or self.stopping:
            return
        look, self.written, self.poked = not self.written, False, False
        self.hurry.clear()
        claim = functools.partial(
            notifications_claim_due, channels=free, busy=frozenset(self.busy), look=look
        )
        claimed = await self.loop.run_in_executor(self.control, _in_thread, claim)
        for channel_id, notification_ids, lease_until in claimed:
            self.busy.add(channel_id)
            send = functools.partial(
                notifications_send, notification_ids, lease_until=lease_until, stop=self.halt
            )
            future = self.loop.run_in_executor(self.pool, _in_thread, send)
            full = len(notification_ids) >= RUN
            future.add_done_callback(functools.partial(self._sent, channel_id, full))

    def _prune(self) -> None:
        """Prune in a thread apart (a first prune may be long), never two at once."""
        if self.pruning is not None and not self.pruning.done():
            return
        prune = functools.partial(notifications_prune, stop=self.halt)
        self.pruning = self.loop.run_in_executor(None, _in_thread, prune)
        self.pruning.add_done_callback(self._pruned)

    def _pruned(self, future: asyncio.Future[int]) -> None:
        if not future.cancelled() and future.exception() is not None:
            logger.error("pruning notifications failed", exc_info=future.exception())

    async def run(self) -> None:
        scanned = 0.0
        pruned = -PRUNE_SECONDS
        while not self.stopping:
            try:
                await self._claim_and_send()
                if time.monotonic() - scanned >= EXPIRING_SCAN_SECONDS:
                    scanned = time.monotonic()
                    await self.loop.run_in_executor(self.control, _in_thread, calls_expiring_notify)
                if time.monotonic() - pruned >= PRUNE_SECONDS:
                    pruned = time.monotonic()
                    self._prune()
            except Exception:
                # A database hiccup must not stop delivery for good: log it and try again.
                logger.exception("notification delivery loop failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), POLL_SECONDS)
            if self.written and not self.hurry.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.hurry.wait(), GATHER_SECONDS)
            self.wake.clear()

    async def drain(self) -> None:
        """Stop claiming, and let each run under way end after its current attempt and keep
        what it did; return within the longest attempt and ``DRAIN_SECONDS`` whatever the
        receivers do. What was not sent stays in the outbox, due at the next start (a run
        that has not ended by then holds its messages until its lease runs out)."""
        self.stopping = True
        self.halt.set()
        self.wake.set()
        bound = time.monotonic() + attempt_seconds() + DRAIN_SECONDS
        if self.task is not None:
            # It ends after the cycle under way: nothing is claimed after it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.task), bound - time.monotonic())
        while self.busy and time.monotonic() < bound:
            await asyncio.sleep(0.05)
        if self.busy:
            logger.warning(
                "notification delivery stopped with %d run(s) still sending", len(self.busy)
            )
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.control.shutdown(wait=False, cancel_futures=True)


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
                _deliverer.halt.set()
                _deliverer.pool.shutdown(wait=False)
                _deliverer.control.shutdown(wait=False)
            _deliverer = Deliverer(loop)
            _task = _deliverer.task = loop.create_task(_deliverer.run())
            delivery_wake_register(_deliverer.poke)
        return _deliverer


async def delivery_stop() -> None:
    """Drain this process's loop if it runs on the running event loop: the server's
    shutdown (``config/asgi.py``), so that it ends within the attempts' deadline."""
    deliverer = _deliverer
    running = asyncio.get_running_loop()
    if deliverer is not None and not deliverer.stopping and deliverer.loop is running:
        await deliverer.drain()
