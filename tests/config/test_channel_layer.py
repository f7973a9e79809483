"""The Redis channel layer as the settings build it holds up under a burst and while idle."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from channels_redis.core import RedisChannelLayer

from config.env import redis_channel_layer
from tests.local_redis import requires_redis

REDIS_URL = "redis://127.0.0.1:6379/6"
BURST = 300  # agents joining their groups at once: more than redis-py's default pool of 100


pytestmark = requires_redis


def _layer() -> RedisChannelLayer:
    return RedisChannelLayer(**redis_channel_layer(REDIS_URL)["CONFIG"])


@pytest.mark.asyncio
async def test_a_burst_of_agents_all_join_their_groups_and_get_their_push() -> None:
    layer = _layer()
    try:
        groups = [f"call.{uuid.uuid4()}" for _ in range(BURST)]
        channels = await asyncio.gather(*(layer.new_channel() for _ in groups))
        await asyncio.gather(
            *(layer.group_add(g, c) for g, c in zip(groups, channels, strict=True))
        )
        await asyncio.gather(
            *(layer.group_send(g, {"type": "call.changed", "n": g}) for g in groups)
        )
        received = await asyncio.gather(*(layer.receive(c) for c in channels))
        assert [message["n"] for message in received] == groups
    finally:
        await layer.flush()
        await layer.close_pools()


@pytest.mark.asyncio
async def test_a_receive_idle_past_the_blocking_pops_timeout_still_gets_its_message() -> None:
    layer = _layer()
    try:
        channel = await layer.new_channel()
        waiting = asyncio.ensure_future(layer.receive(channel))
        # Past channels_redis's 5 s BZPOPMIN, where redis-py's own 5 s default read timeout
        # used to race it.
        await asyncio.sleep(layer.brpop_timeout + 1.5)
        assert not waiting.done()
        await layer.send(channel, {"type": "call.changed", "n": 1})
        assert (await asyncio.wait_for(waiting, 5))["n"] == 1
    finally:
        await layer.flush()
        await layer.close_pools()
