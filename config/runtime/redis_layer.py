"""The channel layer for more than one process: channels_redis's, whose connection pools
wait for a free connection.

``COUNTERSIGN_STOCK=layer`` uses channels_redis's ``RedisChannelLayer`` instead
(config/runtime/README.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool, Connection


class CancellableConnection(Connection):
    """redis-py's connection, whose commands end when their task is cancelled.

    redis-py sends each command under ``asyncio.wait_for``, which on Python 3.11 returns
    the send's result when a cancel arrives just as the send completes: the cancel is lost,
    and the task goes on to wait for the answer. A socket's consumer, cancelled as it
    closes while its receive was sending the next ``BZPOPMIN``, never ended: channels_redis
    pops again each time the pop times out, so the consumer, its task and its connection
    stayed for good (in the test suite, a test's event loop that could not close). A cancel
    that came during the send is raised here, the connection dropped as redis-py drops one
    cancelled while reading (its answer is never read).
    """

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        await super().send_packed_command(command, check_health)
        if task is not None and task.cancelling() > cancels:
            await self.disconnect(nowait=True)
            raise asyncio.CancelledError


class WaitingRedisChannelLayer(RedisChannelLayer):  # type: ignore[misc]  # untyped
    """channels_redis's layer, whose connection pools make a command wait for a free
    connection (up to ``POOL_WAIT`` seconds) instead of failing at once.

    Each worker's pool is bounded (``config/env.py``). 1,000 agents connecting to one worker
    in the same moment, each joining its groups, found it exhausted: redis-py's pool raised
    ``MaxConnectionsError``, and those sockets closed with ``1011`` and reconnected. Past
    the wait, the command fails as before (a socket closes, a long-poll reads the database).
    """

    POOL_WAIT = 10  # seconds

    def create_pool(self, index: int) -> BlockingConnectionPool:
        host = dict(self.hosts[index])
        return BlockingConnectionPool.from_url(
            host.pop("address"),
            timeout=self.POOL_WAIT,
            connection_class=CancellableConnection,
            **host,
        )
