"""The delivery loop against real receivers on local ports: claims and leases, retries with
backoff, order per channel and call, a dead receiver, and two loops at once."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import Call
from approvals.services.decisions import call_decide
from notifications import delivery
from notifications.attempts import (
    LONGEST_RETRY_SECONDS,
    Attempt,
    AttemptOutcome,
    notification_attempts_record,
    notifications_claim,
)
from notifications.delivery import (
    Deliverer,
    deliver_once,
    lease_length,
    notifications_claim_due,
    notifications_send,
)
from notifications.models import DeliveryAttempt, Notification
from notifications.senders.outbound import GRACE_SECONDS
from tests.factories import user_make
from tests.live import ROOT, free_port
from tests.live import _database_url as live_database_url
from tests.outbox import Event, event_and_call, held, holding_agent, webhook_channel, webhook_of
from tests.receivers import Received, http_receiver
from tests.scale.servers import wait_until

pytestmark = pytest.mark.django_db


def failing_first(count: int) -> Any:
    """A receiver's answer: 503 to the first ``count`` requests, then 204."""
    seen = [0]
    lock = threading.Lock()

    def answer(_: Received) -> tuple[int, dict[str, str]]:
        with lock:
            seen[0] += 1
            return (503, {}) if seen[0] <= count else (204, {})

    return answer


def test_a_message_arrives_signed_exactly_as_committed() -> None:
    with http_receiver() as receiver:
        webhook_channel(receiver.url + "/hook")
        call = held(holding_agent())
        assert deliver_once(threads=1) == 1
        [got] = receiver.wait_for(1)
    message = Notification.objects.get()
    assert got.body.decode() == message.payload
    assert got.headers["webhook-id"] == f"msg_{message.pk.hex}"
    assert webhook_of(got)["data"]["call"]["id"] == str(call.pk)
    assert message.status == Notification.Status.DELIVERED
    assert message.attempts == 1
    assert message.delivered_at is not None
    attempt = message.delivery_attempts.get()
    assert attempt.ok
    assert attempt.status_code == 204
    assert deliver_once(threads=1) == 0  # delivered once, not again


def test_a_failing_receiver_is_retried_with_backoff_until_it_accepts() -> None:
    with http_receiver() as receiver:
        receiver.answer = failing_first(3)
        webhook_channel(receiver.url)
        held(holding_agent())
        message = Notification.objects.get()
        now = timezone.now()
        due_times = [message.next_attempt_at]
        for _ in range(4):
            assert deliver_once(now=now, threads=1) == 1
            assert deliver_once(now=now, threads=1) == 0  # not due again before its time
            message.refresh_from_db()
            due_times.append(message.next_attempt_at)
            now = message.next_attempt_at + timedelta(milliseconds=1)
        got = receiver.wait_for(4)
    assert len(got) == 4
    assert len({g.headers["webhook-id"] for g in got}) == 1  # stable across retries
    assert message.status == Notification.Status.DELIVERED
    assert message.attempts == 4
    attempts = list(message.delivery_attempts.order_by("at"))
    assert [(a.ok, a.status_code) for a in attempts] == [(False, 503)] * 3 + [(True, 204)]
    assert all("503" in a.error for a in attempts[:3])
    gaps = [(due_times[i + 1] - attempts[i].at).total_seconds() for i in range(3)]
    # First retry within 10 s, then doubling with ±20 % jitter.
    assert 0 < gaps[0] <= 10
    assert 0.8 * 10 <= gaps[1] <= 1.2 * 10
    assert 0.8 * 20 <= gaps[2] <= 1.2 * 20


def test_retries_end_in_failed_after_the_retry_hours(settings: Any) -> None:
    settings.COUNTERSIGN_NOTIFY_RETRY_HOURS = 24
    with http_receiver() as receiver:
        receiver.answer = lambda _: (500, {})
        webhook_channel(receiver.url)
        held(holding_agent())
        message = Notification.objects.get()
        now = message.created_at
        while message.status == Notification.Status.PENDING:
            deliver_once(now=now, threads=1)
            message.refresh_from_db()
            gap = (message.next_attempt_at - now).total_seconds()
            assert gap <= LONGEST_RETRY_SECONDS + 1  # at most an hour apart
            now = message.next_attempt_at
    assert message.status == Notification.Status.FAILED
    assert now - message.created_at <= timedelta(hours=25)
    assert message.delivery_attempts.count() == message.attempts
    assert 20 < message.attempts < 40


def test_a_later_message_of_a_call_waits_for_the_earlier() -> None:
    with http_receiver() as receiver:
        receiver.answer = failing_first(1)
        webhook_channel(receiver.url)
        agent = holding_agent()
        call = held(agent)
        approver = user_make(username="alice")
        call_decide(
            call_id=call.pk,
            user=approver,
            approve=True,
            comment="",
            arguments_sha256=call.arguments_sha256,
        )
        other = held(agent)  # another call's message is not held back
        now = timezone.now() + timedelta(seconds=1)
        deliver_once(now=now, threads=1)
        deliver_once(now=now, threads=1)
        first = [event_and_call(g) for g in receiver.wait_for(2)]
        assert (Event.DECIDED, str(call.pk)) not in first
        assert (Event.HELD, str(other.pk)) in first
        deliver_once(now=now + timedelta(seconds=15), threads=1)
        deliver_once(now=now + timedelta(seconds=15), threads=1)
        got = [event_and_call(g) for g in receiver.wait_for(4)]
    of_call = [event for event, call_id in got if call_id == str(call.pk)]
    assert of_call == [Event.HELD, Event.HELD, Event.DECIDED]  # failed, retried, then the next


def test_a_lease_is_kept_and_a_stale_one_taken_over() -> None:
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        held(holding_agent())
        now = timezone.now()
        [(_, [claimed], _)] = notifications_claim_due(channels=4, now=now)  # a loop that dies
        assert deliver_once(now=now + lease_length() - timedelta(seconds=1), threads=1) == 0
        assert deliver_once(now=now + lease_length() + timedelta(seconds=1), threads=1) == 1
        [got] = receiver.wait_for(1)
    assert got.headers["webhook-id"] == f"msg_{claimed.hex}"
    assert Notification.objects.get().status == Notification.Status.DELIVERED


@pytest.mark.django_db(transaction=True)
def test_two_loops_never_send_one_message_twice_at_once() -> None:
    in_flight: Counter[str] = Counter()
    overlapping: list[str] = []
    lock = threading.Lock()
    release = threading.Event()

    def answer(got: Received) -> tuple[int, dict[str, str]]:
        key = got.headers["webhook-id"]
        with lock:
            in_flight[key] += 1
            if in_flight[key] > 1:
                overlapping.append(key)
        release.wait(0.02)  # long enough for the other loop to try the same message
        with lock:
            in_flight[key] -= 1
        return 204, {}

    with http_receiver() as receiver:
        receiver.answer = answer
        for n in range(3):
            webhook_channel(f"{receiver.url}/channel-{n}")
        agent = holding_agent()
        for _ in range(8):
            held(agent)
        total = Notification.objects.count()
        assert total == 24

        def loop() -> None:
            try:
                while Notification.objects.filter(status=Notification.Status.PENDING).exists():
                    deliver_once(threads=2)
            finally:
                connection.close()

        threads = [threading.Thread(target=loop) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        got = receiver.wait_for(total)
    assert overlapping == []
    ids = Counter(g.headers["webhook-id"] for g in got)
    assert set(ids) == {f"msg_{pk.hex}" for pk in Notification.objects.values_list("pk", flat=True)}
    assert set(ids.values()) == {1}
    assert not Notification.objects.exclude(status=Notification.Status.DELIVERED).exists()


@contextlib.contextmanager
def loop_running(*, poke_every: float | None = None) -> Iterator[Deliverer]:
    """A delivery loop on an event loop of its own, in another thread, as a server runs one;
    with ``poke_every``, poked that often, as the commits of a steady load would. Cancelled
    on the way out, its threads ended."""
    holder: dict[str, Deliverer] = {}
    started, stopped = threading.Event(), threading.Event()

    async def main() -> None:
        deliverer = holder["loop"] = Deliverer(asyncio.get_running_loop())
        task = asyncio.ensure_future(deliverer.run())
        started.set()
        while not stopped.is_set():
            if poke_every is not None:
                deliverer.poke()
            await asyncio.sleep(poke_every or 0.05)
        # Stopping too: on Python 3.11 a cancellation that meets the loop's own timed wait
        # as it ends can be lost, and the loop would go round again.
        deliverer.stopping = True
        deliverer.halt.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    try:
        assert started.wait(10), "the delivery loop did not start"
        yield holder["loop"]
    finally:
        stopped.set()
        thread.join(30)
        assert not thread.is_alive(), "the delivery loop did not stop"
        if "loop" in holder:
            holder["loop"].pool.shutdown(wait=True)
            holder["loop"].control.shutdown(wait=True)


@pytest.mark.django_db(transaction=True)
def test_a_dead_receiver_delays_no_other_channel(settings: Any) -> None:
    """One channel's receiver never answers, another's port refuses connections: the loop
    still sends a third channel's messages, each as soon as it is written."""
    settings.COUNTERSIGN_NOTIFY_THREADS = 2
    settings.COUNTERSIGN_NOTIFY_TIMEOUT = 20
    hang = threading.Event()
    with http_receiver(hang=hang) as dead, http_receiver() as alive:
        webhook_channel(dead.url + "/never-answers")
        webhook_channel(f"http://127.0.0.1:{free_port()}/refused")
        good = webhook_channel(alive.url)
        agent = holding_agent()
        with loop_running() as deliverer:
            try:
                first = held(agent)
                wait_until(lambda: len(dead.requests) >= 1, 10, "the dead receiver's first request")
                second, third = held(agent), held(agent)
                for n, call in enumerate((first, second, third), 1):
                    deliverer.poke()
                    got = alive.wait_for(n)
                    assert str(call.pk) in [event_and_call(g)[1] for g in got]
                assert not hang.is_set()
                assert len(dead.requests) == 1  # still that one request, unanswered
                assert not DeliveryAttempt.objects.filter(
                    notification__channel__target__endswith="/never-answers"
                ).exists()
                wait_until(
                    lambda: (
                        DeliveryAttempt.objects.filter(notification__channel=good, ok=True).count()
                        == 3
                    ),
                    10,
                    "the live channel's three attempts kept",
                )
                assert not hang.is_set()
            finally:
                hang.set()  # before the loop's threads are ended: the dead send returns
    refused = DeliveryAttempt.objects.filter(notification__channel__target__endswith="/refused")
    assert refused.exists()
    assert not refused.filter(ok=True).exists()


@pytest.mark.django_db(transaction=True)
def test_a_backlog_is_claimed_run_after_run_without_waiting_to_gather(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Commits keep waking the loop while a channel has more due than a run holds: each full
    run's end starts the next claim at once. Were every claim to wait the gathering time
    (made a minute here), the third run would not be sent within the receiver's wait."""
    monkeypatch.setattr(delivery, "RUN", 2)
    monkeypatch.setattr(delivery, "GATHER_SECONDS", 60.0)
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        agent = holding_agent()
        calls = [held(agent) for _ in range(5)]
        with loop_running(poke_every=0.02):
            got = receiver.wait_for(5)
    assert sorted(event_and_call(g)[1] for g in got) == sorted(str(c.pk) for c in calls)


@pytest.mark.django_db(transaction=True)
def test_the_commits_before_a_claim_wake_the_loop_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each commit that wrote messages pokes the loop; until the loop claims, a hop to it is
    pending already, and the claim reads what those commits wrote."""
    loop = asyncio.new_event_loop()
    deliverer = Deliverer(loop)
    hops: list[object] = []
    hop = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any) -> Any:
        if callback == deliverer._written:
            hops.append(callback)
        return hop(callback, *args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    try:
        with http_receiver() as receiver:
            webhook_channel(receiver.url)
            agent = holding_agent()
            for _ in range(3):
                held(agent)
                deliverer.poke()
            assert len(hops) == 1
            loop.run_until_complete(asyncio.sleep(0))  # the hop: the loop is told
            assert deliverer.written
            loop.run_until_complete(deliverer._claim_and_send())
            got = receiver.wait_for(3)
            held(agent)
            deliverer.poke()  # after the claim: the loop is woken again
            assert len(hops) == 2
        assert len(got) == 3
    finally:
        deliverer.pool.shutdown(wait=True)
        deliverer.control.shutdown(wait=True)
        loop.close()


def test_a_claim_takes_a_run_of_each_channels_messages_and_skips_busy_channels() -> None:
    with http_receiver() as receiver:
        first, second = webhook_channel(receiver.url + "/1"), webhook_channel(receiver.url + "/2")
        agent = holding_agent()
        for _ in range(3):
            held(agent)
        now = timezone.now()
        claimed = notifications_claim_due(channels=4, now=now, busy=frozenset({first.pk}))
        assert [(channel, len(ids)) for channel, ids, _ in claimed] == [(second.pk, 3)]
        more = notifications_claim_due(channels=4, now=now)
        assert [(channel, len(ids)) for channel, ids, _ in more] == [(first.pk, 3)]  # leased
        assert notifications_claim_due(channels=4, now=now) == []
    assert Call.objects.count() == 3


def test_a_claim_takes_at_most_a_run_of_one_channel_and_no_more_channels_than_asked() -> None:
    with http_receiver() as receiver:
        for n in range(3):
            webhook_channel(f"{receiver.url}/{n}")
        agent = holding_agent()
        for _ in range(5):
            held(agent)
        now = timezone.now()
        with transaction.atomic():
            claimed = notifications_claim(
                now=now, lease_until=now + lease_length(), channels=2, run=4
            )
            assert len(claimed) == 2
            assert all(1 <= len(ids) <= 4 for _, ids in claimed)
            [(_, rest)] = notifications_claim(
                now=now,
                lease_until=now + lease_length(),
                channels=1,
                run=4,
                busy=[c for c, _ in claimed],
            )
            assert len(rest) == 4  # the third channel's five: a run of four
    leased = sum(len(ids) for _, ids in claimed) + len(rest)
    assert Notification.objects.filter(lease_until__isnull=False).count() == leased


def test_a_run_is_sent_in_order_and_kept_in_one_go() -> None:
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        agent = holding_agent()
        calls = [held(agent) for _ in range(4)]
        [(_, ids, lease)] = notifications_claim_due(channels=1)
        assert notifications_send(ids, lease_until=lease) == 4
        got = receiver.wait_for(4)
    assert [event_and_call(g)[1] for g in got] == [str(call.pk) for call in calls]
    assert set(Notification.objects.values_list("status", flat=True)) == {"delivered"}
    assert DeliveryAttempt.objects.filter(ok=True).count() == 4


def test_a_run_stops_at_its_first_failure_and_lets_the_rest_go() -> None:
    with http_receiver() as receiver:
        receiver.answer = failing_first(1)
        webhook_channel(receiver.url)
        agent = holding_agent()
        first, *others = [held(agent) for _ in range(3)]
        [(_, ids, lease)] = notifications_claim_due(channels=1)
        assert notifications_send(ids, lease_until=lease) == 1
        [tried] = receiver.wait_for(1)
        assert event_and_call(tried)[1] == str(first.pk)
        let_go = Notification.objects.filter(call__in=others)
        assert all(n.lease_until is None and n.attempts == 0 for n in let_go)
        # Due again at once, for this loop or any other.
        assert deliver_once(threads=1) == 2
        got = receiver.wait_for(3)
    assert {event_and_call(g)[1] for g in got[1:]} == {str(call.pk) for call in others}
    assert Notification.objects.get(call=first).next_attempt_at > timezone.now()


def test_a_run_is_sent_in_its_order_passing_over_messages_no_longer_pending() -> None:
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        agent = holding_agent()
        for _ in range(3):
            held(agent)
        [(_, [first, second, third], lease)] = notifications_claim_due(channels=1)
        Notification.objects.filter(pk=second).update(status=Notification.Status.DELIVERED)
        assert notifications_send([third, second, first, uuid.uuid4()], lease_until=lease) == 2
        got = receiver.wait_for(2)
    assert [g.headers["webhook-id"] for g in got] == [f"msg_{third.hex}", f"msg_{first.hex}"]
    assert Notification.objects.get(pk=second).attempts == 0


@pytest.mark.skipif(connection.vendor != "sqlite", reason="reads SQLite's query plan")
def test_a_runs_messages_are_looked_up_by_id_not_among_every_pending_message() -> None:
    """A run's read, its record and its letting go find its messages by their ids: through
    the status index they would be searched for among every pending message, a backlog's
    thousands (SQLite takes that index for three ids or more)."""
    with http_receiver() as receiver:
        receiver.answer = lambda _: (204, {}) if len(receiver.requests) <= 3 else (503, {})
        webhook_channel(receiver.url)
        agent = holding_agent()
        for _ in range(8):
            held(agent)
        [(_, ids, lease)] = notifications_claim_due(channels=1)
        with CaptureQueriesContext(connection) as captured:
            # Three delivered, one failed, four let go.
            assert notifications_send(ids, lease_until=lease) == 4
    statements = [
        query["sql"]
        for query in captured
        if query["sql"].startswith(("SELECT", "UPDATE"))
        and "approvals_notification" in query["sql"]
    ]
    assert len(statements) == 4  # the run, its lock, its end, its letting go
    for statement in statements:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + statement)
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
        assert "sqlite_autoindex_approvals_notification_1 (id=?)" in plan
        assert "notification_due" not in plan


def test_an_attempt_ends_its_message_only_while_it_is_pending_under_its_lease() -> None:
    """Another loop or an admin may have ended a message while it was sent, or another loop
    claimed it after this lease ran out: it stays as they left it. The attempt is kept all
    the same, and counted: ``attempts`` is always the number of its attempts' rows."""
    webhook_channel("https://hooks.example.test/countersign")
    agent = holding_agent()
    for _ in range(4):
        held(agent)
    delivered, retried, taken_by_another, claimed_again = Notification.objects.order_by(
        "created_at"
    )
    lease = timezone.now() + lease_length()
    Notification.objects.update(lease_until=lease)
    Notification.objects.filter(pk=taken_by_another.pk).update(status=Notification.Status.DELIVERED)
    others_lease = lease + timedelta(seconds=40)
    Notification.objects.filter(pk=claimed_again.pk).update(lease_until=others_lease)
    now = timezone.now()
    ended = now + timedelta(milliseconds=12)
    ok, failed = AttemptOutcome(True, 204, "", 12), AttemptOutcome(False, 503, "HTTP 503", 12)
    statuses = notification_attempts_record(
        attempts=[
            Attempt(delivered, ok, now, ended),
            Attempt(retried, failed, now, ended),
            Attempt(taken_by_another, failed, now, ended),
            Attempt(claimed_again, ok, now, ended),
        ],
        lease_until=lease,
    )
    assert statuses == ["delivered", "pending", "delivered", "pending"]
    claimed_again.refresh_from_db()
    assert (claimed_again.status, claimed_again.lease_until) == ("pending", others_lease)
    assert claimed_again.attempts == 1
    delivered.refresh_from_db()
    assert (delivered.status, delivered.attempts, delivered.delivered_at) == (
        Notification.Status.DELIVERED,
        1,
        ended,
    )
    assert delivered.next_attempt_at == delivered.created_at  # as it was
    assert delivered.lease_until is None
    retried.refresh_from_db()
    assert (retried.status, retried.attempts, retried.lease_until) == ("pending", 1, None)
    assert retried.next_attempt_at > ended
    assert retried.delivered_at is None
    taken_by_another.refresh_from_db()
    assert (taken_by_another.status, taken_by_another.attempts) == ("delivered", 1)
    attempts = {attempt.notification_id: attempt for attempt in DeliveryAttempt.objects.all()}
    assert len(attempts) == 4
    assert (attempts[delivered.pk].ok, attempts[delivered.pk].status_code) == (True, 204)
    assert (attempts[retried.pk].error, attempts[retried.pk].at) == ("HTTP 503", now)
    assert attempts[retried.pk].duration_ms == 12


def test_a_claims_order_check_reads_only_the_calls_messages_of_the_channel() -> None:
    """The check that an earlier message of the same channel and call is not pending is a
    search of ``notification_call_channel`` by both, not of every pending message or every
    message of the channel (a backlog would make each claim read it whole, once a message)."""
    statements: list[tuple[str, Any]] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith("SELECT"):
            statements.append((sql, params))
        return execute(sql, params, many, context)

    now = timezone.now()
    with connection.execute_wrapper(keep), transaction.atomic():
        notifications_claim(now=now, lease_until=now + lease_length(), channels=2, run=4)
    [(claim, params)] = statements
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + claim, params)
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
            assert "USING INDEX notification_call_channel (call_id=? AND channel_id=?)" in plan
        else:
            cursor.execute("SET LOCAL enable_seqscan = off")  # as on a table of many rows
            cursor.execute("EXPLAIN " + claim.partition(" FOR UPDATE")[0], params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Index Scan using notification_call_channel on approvals_notification u0" in plan


def test_metrics_count_attempts_and_show_the_pending(settings: Any) -> None:
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    attempts = "countersign_notification_attempts_total"
    before = {result: sample(attempts, result=result) for result in ("delivered", "failed")}
    with http_receiver() as receiver:
        receiver.answer = failing_first(1)
        webhook_channel(receiver.url)
        held(holding_agent())
        assert sample("countersign_notifications_pending") == 1
        now = timezone.now()
        deliver_once(now=now, threads=1)
        deliver_once(now=now + timedelta(seconds=15), threads=1)
    assert sample(attempts, result="failed") == before["failed"] + 1
    assert sample(attempts, result="delivered") == before["delivered"] + 1
    assert sample("countersign_notifications_pending") == 0


def test_deliver_notifications_once_sends_what_is_due(settings: Any) -> None:
    settings.COUNTERSIGN_NOTIFY_THREADS = 1  # in this thread, on the test's connection
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        held(holding_agent())
        out = io.StringIO()
        call_command("deliver_notifications", "--once", stdout=out)
        assert out.getvalue() == "1 attempted\n"
        assert len(receiver.wait_for(1)) == 1
    assert Notification.objects.get().status == Notification.Status.DELIVERED


def assert_delivering(process: subprocess.Popen[bytes]) -> None:
    """The command says it has started; system checks may warn before it (about files that
    other tests run at the same time left)."""
    assert process.stdout is not None
    lines = []
    while (line := process.stdout.readline()) not in (b"delivering notifications\n", b""):
        lines.append(line)
    assert line == b"delivering notifications\n", b"".join(lines).decode()


@pytest.mark.django_db(transaction=True)
def test_deliver_notifications_runs_alone_until_sigterm() -> None:
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        agent = holding_agent()
        process = subprocess.Popen(
            [sys.executable, "manage.py", "deliver_notifications"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": live_database_url()},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            assert_delivering(process)
            call = held(agent)  # another process's message: found by the loop's look
            [got] = receiver.wait_for(1)
            assert event_and_call(got) == (Event.HELD, str(call.pk))
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=15) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    wait_until(
        lambda: Notification.objects.get().status == Notification.Status.DELIVERED, 5, "delivered"
    )


# --- Leases that outlast every attempt, a bounded stop, pruning (issue 39) -----------------


def slow_answer(seconds: float) -> Any:
    """A receiver's answer: 204, ``seconds`` after the request arrived."""

    def answer(_: Received) -> tuple[int, dict[str, str]]:
        threading.Event().wait(seconds)
        return 204, {}

    return answer


def attempts_agree_with_their_rows() -> bool:
    counted = dict(Notification.objects.values_list("pk", "attempts"))
    rows = Counter(DeliveryAttempt.objects.values_list("notification_id", flat=True))
    return all(rows[pk] == count for pk, count in counted.items())


@pytest.mark.django_db(transaction=True)
def test_a_run_longer_than_its_lease_renews_it_and_two_loops_send_each_message_once(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each channel's run takes longer than a lease (made short here): the run renews it
    before an attempt it might not cover, so the other loop, claiming all the while, never
    takes a message over while it is being sent, and each arrives exactly once."""
    settings.COUNTERSIGN_NOTIFY_TIMEOUT = 1
    monkeypatch.setattr(delivery, "GRACE_SECONDS", 0.2)
    monkeypatch.setattr(delivery, "LEASE_MARGIN_SECONDS", 0.6)
    monkeypatch.setattr(delivery, "RECORD_SECONDS", 0.2)
    lease = lease_length().total_seconds()
    assert lease == pytest.approx(1.8)
    with http_receiver() as receiver:
        receiver.answer = slow_answer(0.25)
        for n in range(2):
            webhook_channel(f"{receiver.url}/channel-{n}")
        agent = holding_agent()
        for _ in range(10):
            held(agent)
        total = Notification.objects.count()
        assert total == 20

        def loop() -> None:
            try:
                while Notification.objects.filter(status=Notification.Status.PENDING).exists():
                    if deliver_once(threads=2) == 0:
                        threading.Event().wait(0.05)
            finally:
                connection.close()

        started = [threading.Thread(target=loop) for _ in range(2)]
        for thread in started:
            thread.start()
        for thread in started:
            thread.join(60)
        got = receiver.wait_for(total)
    ids = Counter(g.headers["webhook-id"] for g in got)
    assert set(ids.values()) == {1}
    assert len(ids) == total
    assert not Notification.objects.exclude(status=Notification.Status.DELIVERED).exists()
    assert DeliveryAttempt.objects.count() == total
    assert attempts_agree_with_their_rows()
    # The runs did outlast their first lease: this is what renewing is for.
    first = DeliveryAttempt.objects.order_by("at").first()
    last = DeliveryAttempt.objects.order_by("at").last()
    assert first is not None
    assert last is not None
    assert (last.at - first.at).total_seconds() > lease


def test_a_run_whose_lease_was_taken_over_gives_its_claim_up_and_sends_nothing() -> None:
    """Held up past its lease (a stalled process), a run finds at its renewal that another
    loop has claimed one of its messages since: it sends none of them, lets go of those
    still its own, and leaves the other loop's lease as it is."""
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        agent = holding_agent()
        calls = [held(agent) for _ in range(3)]
        [(_, ids, lease)] = notifications_claim_due(channels=1)
        others_lease = lease + timedelta(seconds=20)
        taken = Notification.objects.get(call=calls[1])
        Notification.objects.filter(pk=taken.pk).update(lease_until=others_lease)
        later = lease + timedelta(seconds=1)
        assert notifications_send(ids, lease_until=lease, now=later) == 0
        assert receiver.requests == []
    taken.refresh_from_db()
    assert taken.lease_until == others_lease
    let_go = Notification.objects.exclude(pk=taken.pk)
    assert [message.lease_until for message in let_go] == [None, None]
    assert not DeliveryAttempt.objects.exists()
    assert set(Notification.objects.values_list("attempts", flat=True)) == {0}


DRAIN_DEADLINE = 2
# What a stop may take at most: the longest attempt and the drain's own margin. A dribbling
# receiver's answer would take ten minutes.
STOP_BOUND = DRAIN_DEADLINE + GRACE_SECONDS + delivery.DRAIN_SECONDS


@pytest.mark.django_db(transaction=True)
def test_stopping_the_loop_ends_within_the_deadline_while_receivers_dribble(
    settings: Any,
) -> None:
    """A webhook, an Apprise service and a mail server each answer a byte a second, and a
    fourth channel's receiver is slow but sound with a run of ten to send: stopping ends
    every run after its current attempt, within the deadline, and every message not sent
    stays in the outbox, due for the next start."""
    from notifications.channels import channel_add
    from tests.receivers import dribbling_http_receiver, dribbling_smtp_server

    settings.COUNTERSIGN_NOTIFY_THREADS = 4
    settings.COUNTERSIGN_NOTIFY_TIMEOUT = DRAIN_DEADLINE
    with (
        dribbling_http_receiver() as slow_hook,
        dribbling_http_receiver() as slow_chat,
        dribbling_smtp_server() as slow_mail,
        http_receiver() as sound,
    ):
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = "127.0.0.1"
        settings.EMAIL_PORT = int(slow_mail.url.rsplit(":", 1)[1])
        settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        sound.answer = slow_answer(0.3)
        webhook_channel(slow_hook.url)
        channel_add(kind="apprise", target=slow_chat.url.replace("http://", "json://"))
        channel_add(kind="email", target="ops@example.test")
        good = webhook_channel(sound.url)
        agent = holding_agent()
        for _ in range(10):
            held(agent)
        with loop_running() as deliverer:
            for dribbler in (slow_hook, slow_chat, slow_mail):
                assert dribbler.wait_for(lambda d: len(d.ports) == 1), "every thread busy"
            sound.wait_for(1)
            began = time.monotonic()
            stop = asyncio.run_coroutine_threadsafe(deliverer.drain(), deliverer.loop)
            stop.result(timeout=60)
            took = time.monotonic() - began
            assert took < STOP_BOUND
    assert Notification.objects.count() == 40  # nothing lost
    delivered = Notification.objects.filter(status=Notification.Status.DELIVERED)
    assert set(delivered.values_list("channel", flat=True)) == {good.pk}
    assert 1 <= delivered.count() < 10  # the sound run stopped after its current attempt
    cut = DeliveryAttempt.objects.filter(ok=False)
    assert cut.count() == 3
    assert all(attempt.error.startswith("TimeoutError") for attempt in cut)
    assert attempts_agree_with_their_rows()
    assert not Notification.objects.filter(lease_until__isnull=False).exists()
    # Due again for the next loop to start, the cut ones at their retry.
    later = timezone.now() + timedelta(minutes=1)
    claimed = notifications_claim_due(channels=8, now=later)
    assert sum(len(ids) for _, ids, _ in claimed) == 40 - delivered.count()


def dribbled_apprise_channel(url: str) -> None:
    from notifications.channels import channel_add

    channel_add(kind="apprise", target=url.replace("http://", "json://"))


@pytest.mark.django_db(transaction=True)
def test_deliver_notifications_stops_within_the_deadline_while_a_receiver_dribbles() -> None:
    from tests.receivers import dribbling_http_receiver

    with dribbling_http_receiver() as slow:
        dribbled_apprise_channel(slow.url)
        held(holding_agent())
        process = subprocess.Popen(
            [sys.executable, "manage.py", "deliver_notifications"],
            cwd=ROOT,
            env={
                **os.environ,
                "DATABASE_URL": live_database_url(),
                "COUNTERSIGN_NOTIFY_TIMEOUT": str(DRAIN_DEADLINE),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            assert_delivering(process)
            assert slow.wait_for(lambda d: len(d.ports) == 1), "the attempt under way"
            began = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
            assert time.monotonic() - began < STOP_BOUND
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    message = Notification.objects.get()
    assert (message.status, message.attempts, message.lease_until) == ("pending", 1, None)
    assert message.delivery_attempts.get().error.startswith("TimeoutError")


@pytest.mark.django_db(transaction=True)
def test_the_server_stops_within_the_deadline_while_a_receiver_dribbles() -> None:
    """The server's shutdown drains its loop (its lifespan's end): it does not wait for a
    receiver that answers a byte a second."""
    from tests.live import start_server
    from tests.receivers import dribbling_http_receiver

    with dribbling_http_receiver() as slow:
        dribbled_apprise_channel(slow.url)
        agent = holding_agent()
        server = start_server(extra_env={"COUNTERSIGN_NOTIFY_TIMEOUT": str(DRAIN_DEADLINE)})
        try:
            held(agent)  # found by the server's loop within a second
            assert slow.wait_for(lambda d: len(d.ports) == 1), "the attempt under way"
            began = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            server.process.wait(timeout=60)
            assert time.monotonic() - began < STOP_BOUND + 1  # uvicorn's own stop
        finally:
            server.stop(signal.SIGKILL)
    message = Notification.objects.get()
    assert (message.status, message.attempts, message.lease_until) == ("pending", 1, None)


@pytest.mark.django_db(transaction=True)
def test_the_loop_prunes_old_messages_when_it_starts(settings: Any) -> None:
    settings.COUNTERSIGN_NOTIFY_KEEP_DAYS = 30
    with http_receiver() as receiver:
        webhook_channel(receiver.url)
        agent = holding_agent()
        old, kept = held(agent), held(agent)
        assert deliver_once(threads=1) == 2
        long_ago = timezone.now() - timedelta(days=31)
        Notification.objects.filter(call=old).update(created_at=long_ago)
        with loop_running():
            wait_until(lambda: not Notification.objects.filter(call=old).exists(), 10, "the prune")
    assert list(Notification.objects.values_list("call", flat=True)) == [kept.pk]
    assert DeliveryAttempt.objects.count() == 1
