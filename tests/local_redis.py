"""The machine's own Redis, for tests that talk to it directly."""

from __future__ import annotations

import socket

import pytest


def redis_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.5).close()
    except OSError:
        return False
    return True


requires_redis = pytest.mark.skipif(
    not redis_up(), reason="Redis is not reachable on 127.0.0.1:6379"
)
