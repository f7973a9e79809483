"""Pushes to Redis from synchronous code outside the server (a management command, plain
threads) share one event loop and its connection pool, and all arrive; the in-memory layer's
are handed to its receivers' loop, in order, without the writer waiting (or not sent while
no receiver has joined a group); Channels' own
in-memory layer's, and every push when switched to stock, go through ``async_to_sync``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from channels.layers import BaseChannelLayer, InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer
from django.utils import timezone

from approvals.models import Call
from approvals.realtime.pushes import call_group, notify_call
from config.env import redis_channel_layer
from config.runtime.memory_layer import ThrottledInMemoryChannelLayer
from config.runtime.push_loop import push_from_sync, push_loop
from config.runtime.stock import Stock
from tests.asgi import PROMPTLY
from tests.factories import agent_make
from tests.local_redis import requires_redis
from tests.scale.servers import run_threads

REDIS_URL = "redis://127.0.0.1:6379/7"


@pytest.fixture
def redis_layer(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(REDIS_URL)}
    settings.COUNTERSIGN_STOCK = frozenset()  # the push loop, whatever the run switched off


@pytest.fixture
def call(transactional_db: None) -> Call:
    agent = agent_make()
    now = timezone.now()
    return Call.objects.create(
        agent=agent, tool="pay", arguments="{}", status="allowed", created_at=now, updated_at=now
    )


def _connections_received() -> int:
    with redis.Redis.from_url(REDIS_URL) as client:
        return int(client.info("stats")["total_connections_received"])


@requires_redis
def test_one_pushes_after_another_reuse_their_connections(redis_layer: None, call: Call) -> None:
    notify_call(call)  # the pool's first connection
    before = _connections_received()

    def thirty_pushes() -> None:
        for _ in range(30):
            notify_call(call)

    run_threads(1, lambda _: thirty_pushes(), timeout=PROMPTLY)
    assert _connections_received() - before <= 2  # was one new connection a push


@requires_redis
@pytest.mark.asyncio
async def test_pushes_from_many_threads_at_once_all_arrive(redis_layer: None, call: Call) -> None:
    watcher = RedisChannelLayer(**redis_channel_layer(REDIS_URL)["CONFIG"])  # another worker
    try:
        channel = await watcher.new_channel()
        await watcher.group_add(call_group(call.pk), channel)
        await asyncio.to_thread(run_threads, 10, lambda _: notify_call(call), PROMPTLY)
        received = [await asyncio.wait_for(watcher.receive(channel), PROMPTLY) for _ in range(10)]
        assert {message["call"]["id"] for message in received} == {str(call.pk)}
    finally:
        await watcher.flush()
        await watcher.close_pools()


def _loops_of_two_pushes(layer: BaseChannelLayer) -> list[asyncio.AbstractEventLoop]:
    loops: list[asyncio.AbstractEventLoop] = []

    async def record(into: list[asyncio.AbstractEventLoop]) -> None:
        into.append(asyncio.get_running_loop())

    push_from_sync(layer, record, loops)
    push_from_sync(layer, record, loops)
    return loops


def test_a_layer_with_pools_per_loop_is_pushed_to_from_the_one_push_loop(settings: Any) -> None:
    settings.COUNTERSIGN_STOCK = frozenset()
    assert _loops_of_two_pushes(BaseChannelLayer()) == [push_loop(), push_loop()]


def test_channels_in_memory_layer_is_pushed_to_through_async_to_sync(settings: Any) -> None:
    settings.COUNTERSIGN_STOCK = frozenset()
    assert push_loop() not in _loops_of_two_pushes(InMemoryChannelLayer())


def test_switched_to_stock_each_push_goes_through_async_to_sync(settings: Any) -> None:
    settings.COUNTERSIGN_STOCK = frozenset({Stock.PUSH_LOOP})
    assert push_loop() not in _loops_of_two_pushes(BaseChannelLayer())


@pytest.fixture
def receivers_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A running event loop on a thread of its own, standing for the server's."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(PROMPTLY)
    loop.close()


def test_the_in_memory_layer_is_pushed_to_on_its_receivers_loop_in_order_without_waiting(
    settings: Any, receivers_loop: asyncio.AbstractEventLoop
) -> None:
    settings.COUNTERSIGN_STOCK = frozenset()
    layer = ThrottledInMemoryChannelLayer()
    joined = layer.group_add("watchers", "specific.watcher")
    asyncio.run_coroutine_threadsafe(joined, receivers_loop).result(PROMPTLY)
    pushed: list[tuple[int, asyncio.AbstractEventLoop]] = []
    go_on = threading.Event()

    async def record(number: int) -> None:
        if number == 1:
            # Blocks its loop until the writer has gone on: a writer waiting for its push
            # would wait for ever here.
            go_on.wait(PROMPTLY)
        pushed.append((number, asyncio.get_running_loop()))

    push_from_sync(layer, record, 1)
    push_from_sync(layer, record, 2)
    assert pushed == []
    go_on.set()
    done = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), receivers_loop)
    done.result(PROMPTLY)
    assert pushed == [(1, receivers_loop), (2, receivers_loop)]


def test_the_in_memory_layer_with_no_receiver_in_any_group_is_not_pushed_to(
    settings: Any,
) -> None:
    settings.COUNTERSIGN_STOCK = frozenset()
    assert _loops_of_two_pushes(ThrottledInMemoryChannelLayer()) == []


def test_a_push_handed_to_the_receivers_loop_reaches_a_waiting_receiver(
    settings: Any, receivers_loop: asyncio.AbstractEventLoop
) -> None:
    settings.COUNTERSIGN_STOCK = frozenset()
    layer = ThrottledInMemoryChannelLayer()
    channel = asyncio.run_coroutine_threadsafe(layer.new_channel(), receivers_loop).result(PROMPTLY)
    asyncio.run_coroutine_threadsafe(layer.group_add("watchers", channel), receivers_loop).result(
        PROMPTLY
    )
    waiting = asyncio.run_coroutine_threadsafe(layer.receive(channel), receivers_loop)
    push_from_sync(layer, layer.group_send, "watchers", {"type": "call.changed"})
    assert waiting.result(PROMPTLY) == {"type": "call.changed"}
