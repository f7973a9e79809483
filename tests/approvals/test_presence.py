"""approvals.realtime.presence on both backends: in memory (one process) and in Redis (several
workers, a killed worker's waiters vanishing with its heartbeat)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from approvals.realtime import presence
from approvals.realtime.presence import (
    MemoryPresence,
    RedisPresence,
    Waiting,
    agent_key,
    call_key,
    presence_of,
)
from tests.scale.servers import redis_reachable

REDIS_URL = settings.REDIS_URL or "redis://127.0.0.1:6379/12"


@dataclass
class FakeCall:
    pk: uuid.UUID
    agent_id: int
    created_at: datetime


def a_call(agent_id: int = 7) -> FakeCall:
    return FakeCall(uuid.uuid4(), agent_id, datetime.now(UTC) - timedelta(minutes=1))


@pytest.fixture
def told(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """What the pages were told: each announcement's keys."""
    heard: list[set[str]] = []
    monkeypatch.setattr(
        presence, "_tell_pages", lambda keys: heard.append(set(keys)) if keys else None
    )
    return heard


def using(backend: presence._Backend) -> Callable[[], object]:
    old = presence.backend_set(backend)
    return lambda: presence.backend_set(old)


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


# --- in memory -------------------------------------------------------------------------------


def test_memory_counts_waiters_and_remembers_when_the_last_left(told: list[set[str]]) -> None:
    restore = using(MemoryPresence())
    call, streamed, never = a_call(), a_call(agent_id=8), a_call()
    try:

        async def run() -> None:
            presence.waiter_enter(call_key(call.pk))
            presence.waiter_enter(call_key(call.pk))  # a socket and a long-poll
            presence.waiter_enter(agent_key(8))
            assert presence_of([call, streamed, never]) == {
                call.pk: Waiting(now=True),
                streamed.pk: Waiting(now=True),
                never.pk: Waiting(now=False, since=None),
            }
            await eventually(lambda: bool(told))
            assert told == [{call_key(call.pk), agent_key(8)}]
            presence.waiter_leave(call_key(call.pk))
            assert presence_of([call])[call.pk].now  # one waiter is left
            before = datetime.now(UTC)
            presence.waiter_leave(call_key(call.pk))
            waiting = presence_of([call])[call.pk]
            assert not waiting.now
            assert waiting.since is not None
            assert waiting.since >= before - timedelta(seconds=1)
            await eventually(lambda: len(told) == 2)
            assert told[1] == {call_key(call.pk)}

        asyncio.run(run())
    finally:
        restore()


def test_memory_a_long_poll_asked_again_at_once_is_no_change(told: list[set[str]]) -> None:
    restore = using(MemoryPresence())
    call = a_call()
    try:

        async def run() -> None:
            presence.waiter_enter(call_key(call.pk))
            await eventually(lambda: bool(told))
            presence.waiter_leave(call_key(call.pk))
            presence.waiter_enter(call_key(call.pk))
            await asyncio.sleep(presence.ANNOUNCE_DELAY * 3)
            assert told == [{call_key(call.pk)}]

        asyncio.run(run())
    finally:
        restore()


def test_a_stream_closed_before_the_call_was_made_is_not_a_wait() -> None:
    backend = MemoryPresence()
    restore = using(backend)
    call = a_call(agent_id=9)
    try:
        backend.left[agent_key(9)] = (call.created_at - timedelta(seconds=5)).timestamp()
        assert presence_of([call])[call.pk] == Waiting(now=False, since=None)
        backend.left[agent_key(9)] = (call.created_at + timedelta(seconds=5)).timestamp()
        assert presence_of([call])[call.pk].since == call.created_at + timedelta(seconds=5)
    finally:
        restore()


# --- in Redis --------------------------------------------------------------------------------


@pytest.fixture
def redis_workers() -> Iterator[tuple[RedisPresence, RedisPresence]]:
    """Two workers' backends on one Redis, under a prefix of this test's own."""
    if not redis_reachable(REDIS_URL):
        pytest.skip("presence in Redis needs a reachable REDIS_URL")
    prefix = f"test-presence-{uuid.uuid4().hex}:"
    pair = tuple(RedisPresence(REDIS_URL, prefix=prefix, heartbeat=0.1, ttl=0.5) for _ in range(2))
    yield pair  # type: ignore[misc]
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()
    for backend in pair:
        backend.close()


def test_redis_a_waiter_on_one_worker_is_seen_on_the_other_until_it_leaves(
    redis_workers: tuple[RedisPresence, RedisPresence], told: list[set[str]]
) -> None:
    a, b = redis_workers
    call, streamed = a_call(), a_call(agent_id=11)

    def seen_by_b(target: FakeCall) -> Waiting:
        restore = using(b)
        try:
            return presence_of([target])[target.pk]
        finally:
            restore()

    async def run() -> None:
        b.watch()  # worker B has a page open: it hears of changes anywhere
        restore = using(a)
        try:
            presence.waiter_enter(call_key(call.pk))
            presence.waiter_enter(agent_key(11))
        finally:
            restore()
        await eventually(lambda: seen_by_b(call).now and seen_by_b(streamed).now)
        await eventually(lambda: {call_key(call.pk), agent_key(11)} <= set().union(*told))
        restore = using(a)
        try:
            presence.waiter_leave(call_key(call.pk))
        finally:
            restore()
        await eventually(lambda: not seen_by_b(call).now)
        assert seen_by_b(call).since is not None
        assert seen_by_b(streamed).now

    asyncio.run(run())


def test_redis_a_killed_workers_waiters_vanish_with_its_heartbeat(
    redis_workers: tuple[RedisPresence, RedisPresence], told: list[set[str]]
) -> None:
    a, b = redis_workers
    call = a_call()

    async def run() -> None:
        b.watch()
        restore = using(a)
        try:
            presence.waiter_enter(call_key(call.pk))
        finally:
            restore()
        restore = using(b)
        try:
            await eventually(lambda: presence_of([call])[call.pk].now)
            assert a._task is not None
            a._task.cancel()  # worker A is killed: no heartbeat, no goodbye
            await eventually(lambda: not presence_of([call])[call.pk].now, timeout=a.ttl * 4)
            # It was last seen waiting when A wrote it, and B told its pages it ended.
            assert presence_of([call])[call.pk].since is not None
            await eventually(lambda: told.count({call_key(call.pk)}) >= 2)
        finally:
            restore()

    asyncio.run(run())


def test_redis_the_heartbeat_task_ends_when_cancelled_mid_command(
    redis_workers: tuple[RedisPresence, RedisPresence],
) -> None:
    """redis-py may swallow a cancel that lands during a command; the task must end all the
    same, or the event loop it runs on can never close (a server's shutdown, a test's)."""
    a, _ = redis_workers
    a.heartbeat = 0.0  # beat continuously: every cancel lands in or near a command

    async def cancelled_once(delay: float) -> bool:
        a.watch()
        task = a._task
        assert task is not None
        await asyncio.sleep(delay)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=3)
        return bool(done)

    async def run() -> list[bool]:
        return [await cancelled_once(i / 4000) for i in range(40)]

    assert all(asyncio.run(run()))
