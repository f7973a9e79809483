"""The channel layer for more than one process: channels_redis's, whose connection pools
wait for a free connection.

``COUNTERSIGN_STOCK=layer`` uses channels_redis's ``RedisChannelLayer`` instead
(config/runtime/README.md).
"""

from __future__ import annotations

from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool


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
        return BlockingConnectionPool.from_url(host.pop("address"), timeout=self.POOL_WAIT, **host)
