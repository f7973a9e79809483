"""Pushes to Redis from synchronous code outside the server (a management command, plain
threads) share one event loop and its connection pool, and all arrive."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from channels_redis.core import RedisChannelLayer
from django.utils import timezone

from approvals.models import Agent, Call
from approvals.notify import call_group, notify_call
from config.env import redis_channel_layer
from tests.asgi import PROMPTLY
from tests.local_redis import requires_redis
from tests.scale.servers import run_threads

REDIS_URL = "redis://127.0.0.1:6379/7"

pytestmark = [requires_redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis_layer(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(REDIS_URL)}


@pytest.fixture
def call(transactional_db: None) -> Call:
    agent = Agent.objects.create(name="bot", principal="carol")
    now = timezone.now()
    return Call.objects.create(
        agent=agent, tool="pay", arguments="{}", status="allowed", created_at=now, updated_at=now
    )


def _connections_received() -> int:
    with redis.Redis.from_url(REDIS_URL) as client:
        return int(client.info("stats")["total_connections_received"])


def test_one_pushes_after_another_reuse_their_connections(redis_layer: None, call: Call) -> None:
    notify_call(call)  # the pool's first connection
    before = _connections_received()

    def thirty_pushes() -> None:
        for _ in range(30):
            notify_call(call)

    run_threads(1, lambda _: thirty_pushes(), timeout=PROMPTLY)
    assert _connections_received() - before <= 2  # was one new connection a push


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
