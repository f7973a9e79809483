"""The Redis channel layer as the settings build it holds up under a burst and while idle."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from channels_redis.core import RedisChannelLayer
from redis.exceptions import MaxConnectionsError

from config.env import redis_channel_layer
from config.runtime.redis_layer import WaitingRedisChannelLayer
from tests.local_redis import requires_redis

REDIS_URL = "redis://127.0.0.1:6379/6"
BURST = 300  # agents joining their groups at once: more than redis-py's default pool of 100


pytestmark = requires_redis


def _layer() -> RedisChannelLayer:
    return WaitingRedisChannelLayer(**redis_channel_layer(REDIS_URL)["CONFIG"])


def test_the_settings_use_the_waiting_layer() -> None:
    assert (
        redis_channel_layer(REDIS_URL)["BACKEND"]
        == "config.runtime.redis_layer.WaitingRedisChannelLayer"
    )


async def _join_all(layer: RedisChannelLayer, count: int) -> list[BaseException | None]:
    groups = [f"call.{uuid.uuid4()}" for _ in range(count)]
    channels = [f"specific.{uuid.uuid4().hex}!x" for _ in groups]
    outcomes: list[BaseException | None] = await asyncio.gather(
        *(layer.group_add(g, c) for g, c in zip(groups, channels, strict=True)),
        return_exceptions=True,
    )
    return outcomes


@pytest.mark.asyncio
async def test_a_burst_larger_than_the_pool_waits_for_connections_instead_of_failing() -> None:
    config = redis_channel_layer(REDIS_URL)["CONFIG"]
    config["hosts"] = [{**config["hosts"][0], "max_connections": 4}]
    for layer_class, fails in ((RedisChannelLayer, True), (WaitingRedisChannelLayer, False)):
        layer = layer_class(**config)
        try:
            outcomes = await _join_all(layer, 200)
        finally:
            await layer.flush()
            await layer.close_pools()
        failed = [o for o in outcomes if isinstance(o, MaxConnectionsError)]
        assert bool(failed) is fails, layer_class
        assert all(o is None or isinstance(o, MaxConnectionsError) for o in outcomes)


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


async def _lingering_receives(layer: RedisChannelLayer, *, first: bool) -> int:
    """Receives cancelled at every moment of their first few event-loop turns (the turn
    their ``BZPOPMIN`` is sent in among them): how many were still running 0.5 s later
    (``first``: stop at the first)."""
    lingering = 0
    layer.brpop_timeout = 1  # each pop's own timeout, so that a lingering one is stopped soon
    channel = await layer.new_channel()
    for turns in range(40):
        receive = asyncio.ensure_future(layer.receive(channel))
        for _ in range(turns):
            await asyncio.sleep(0)
        receive.cancel()
        done, _ = await asyncio.wait([receive], timeout=0.5)
        if not done:
            lingering += 1
            # Its pop returns within the pop's timeout and pops again: stop it for good.
            receive.cancel()
            await asyncio.wait([receive], timeout=5)
            if first:
                break
    return lingering


@pytest.mark.asyncio
async def test_a_cancelled_receive_ends_at_once_whenever_the_cancel_comes() -> None:
    """A closed socket's consumer cancels its receive. redis-py lost a cancel that came as a
    command was sent (Python 3.11's ``wait_for``), and the receive went on popping for good:
    the stock layer shows it, the settings' layer does not."""
    config = redis_channel_layer(REDIS_URL)["CONFIG"]
    outcomes = {}
    for layer_class in (RedisChannelLayer, WaitingRedisChannelLayer):
        layer = layer_class(**config)
        try:
            outcomes[layer_class] = await _lingering_receives(
                layer, first=layer_class is RedisChannelLayer
            )
        finally:
            await layer.flush()
            await layer.close_pools()
    assert outcomes[WaitingRedisChannelLayer] == 0
    assert outcomes[RedisChannelLayer] > 0  # the loss this layer is there for
