"""The channel layers: the embedded default's, and Redis's for more than one process."""

from __future__ import annotations

import time
from typing import Any

from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool


class ThrottledInMemoryChannelLayer(InMemoryChannelLayer):
    """Channels' in-memory layer, dropping expired messages and group memberships at most
    once a second instead of on every send and receive.

    Each of those scans every channel and every group member: with 5,000 agents waiting on
    one process, each push and each consumer's next receive walked all 5,000, about a tenth
    of the server's CPU. An expired message may now live up to a second past its 60 s, and
    a membership a second past its day.
    """

    CLEAN_INTERVAL = 1.0  # seconds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._next_clean = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now < self._next_clean:
            return
        self._next_clean = now + self.CLEAN_INTERVAL
        super()._clean_expired()  # type: ignore[misc]  # private: not in the stubs


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
