"""Fixtures of the scale-out and reliability tests: what they need of the environment (and the
one-line reason to skip when it is missing), and the people in their world."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from tests.factories import user_make
from tests.scale.servers import (
    APPROVER,
    PASSWORD,
    PrivateRedis,
    is_postgresql,
    private_redis,
    redis_reachable,
)


@pytest.fixture
def postgres_and_redis(transactional_db: None) -> str:
    """The Redis URL the suite runs with; skips unless the test database is PostgreSQL and
    that Redis answers (CI: DATABASE_URL=postgres://… REDIS_URL=redis://…)."""
    if not is_postgresql():
        pytest.skip("two-worker tests need DATABASE_URL=postgres://… (the test database is SQLite)")
    if not redis_reachable(settings.REDIS_URL):
        pytest.skip("two-worker tests need a reachable REDIS_URL")
    return str(settings.REDIS_URL)


@pytest.fixture
def own_redis(transactional_db: None) -> Iterator[PrivateRedis]:
    """A private redis-server that the test may kill and restart; skips without one."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not on PATH")
    with private_redis(settings.VAR_DIR) as server:
        yield server


@pytest.fixture
def approver(transactional_db: None) -> User:
    return user_make(username=APPROVER, password=PASSWORD)
