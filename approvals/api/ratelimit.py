"""Per-agent submission limits (``COUNTERSIGN_RATE_LIMIT``): ``N/m`` allows N submissions in
any 60-second window, bursts included — a sliding log, not fixed buckets.

Counted across all workers in Redis when ``REDIS_URL`` is set, per process otherwise.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import uuid
from collections import deque
from typing import Protocol

import redis
from django.conf import settings

from approvals.errors import Unavailable

# One round trip, atomic in Redis: drop what left the window, then count and maybe add.
_SLIDING_LOG = """
local key, now, window, limit = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
if redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, window)
  return 0
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
return tonumber(oldest) + window - now
"""


REDIS_TIMEOUT = 2.0  # seconds
RATE_KEY_PREFIX = "countersign:rate:"


class Limiter(Protocol):
    def hit(self, key: str) -> int | None:
        """Count one submission; None if it is within the limit, else seconds to wait."""


def _seconds(milliseconds: float) -> int:
    return max(1, math.ceil(milliseconds / 1000))


class LocalLimiter:
    def __init__(self, limit: int, window_seconds: int) -> None:
        self.limit, self.window_ms = limit, window_seconds * 1000
        self._log: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: str) -> int | None:
        now = time.monotonic() * 1000
        with self._lock:
            log = self._log.setdefault(key, deque())
            while log and log[0] <= now - self.window_ms:
                log.popleft()
            if len(log) < self.limit:
                log.append(now)
                return None
            return _seconds(log[0] + self.window_ms - now)


class LimiterUnavailable(Unavailable):
    """The count could not be read: the caller must refuse, not let the request through."""


class RedisLimiter:
    def __init__(self, url: str, limit: int, window_seconds: int) -> None:
        self.limit, self.window_ms = limit, window_seconds * 1000
        # A Redis that stops answering must not hold submissions for the OS's TCP timeout.
        self._redis = redis.Redis.from_url(
            url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT
        )
        self._script = self._redis.register_script(_SLIDING_LOG)

    def hit(self, key: str) -> int | None:
        now = time.time() * 1000  # wall clock: shared by every worker on every host
        try:
            wait = self._script(
                keys=[f"{RATE_KEY_PREFIX}{key}"],
                args=[now, self.window_ms, self.limit, f"{now}:{uuid.uuid4().hex}"],
            )
        except redis.RedisError as error:
            raise LimiterUnavailable from error
        return None if int(wait) == 0 else _seconds(float(wait))


@functools.cache
def _limiter(rate: tuple[int, int] | None, redis_url: str) -> Limiter | None:
    if rate is None:
        return None
    limit, window = rate
    return RedisLimiter(redis_url, limit, window) if redis_url else LocalLimiter(limit, window)


def submission_limiter() -> Limiter | None:
    """The limiter for the current settings; None when limiting is off."""
    return _limiter(settings.COUNTERSIGN_RATE_LIMIT, settings.REDIS_URL)
