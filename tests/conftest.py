from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.conf import settings as django_settings
from django.core.management.commands import flush
from django.db import connections

from approvals.api.ratelimit import RATE_KEY_PREFIX
from approvals.realtime.presence import PREFIX as PRESENCE_PREFIX
from config.runtime.push_loop import push_loop


@pytest.fixture(autouse=True)
def _plain_static_storage(settings: Any) -> None:
    """Tests run without collectstatic, so the manifest storage has no manifest to read."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture(autouse=True)
def _no_rate_limit(settings: Any) -> None:
    """Rate limits are tested on purpose (tests/approvals/test_ratelimit.py); elsewhere the
    process-wide counters would carry over from test to test."""
    settings.COUNTERSIGN_RATE_LIMIT = None


@pytest.fixture(autouse=True)
def _a_channel_layer_of_its_own(settings: Any) -> Iterator[None]:
    """Each test gets a channel layer of its own.

    channels_redis's layer lets one event loop at a time receive, and each async test runs
    on a loop of its own. A receive still holding the layer's lock when its test's loop
    closed (the queue sockets' hub receives for as long as its loop runs) failed the sockets
    of every later test with "bound to a different event loop": 50 failures in one CI run.
    The layer's connections on the push loop, which outlives every test, close with it.
    """
    settings.CHANNEL_LAYERS = settings.CHANNEL_LAYERS  # setting_changed: Channels drops them
    yield
    layer = get_channel_layer()
    if isinstance(layer, RedisChannelLayer):
        asyncio.run_coroutine_threadsafe(layer.close_pools(), push_loop()).result(timeout=10)


@pytest.fixture(autouse=True, scope="session")
def _no_redis_state_from_an_earlier_run() -> None:
    """What an earlier run left in the Redis of ``REDIS_URL`` under Countersign's own keys is
    gone: the rate limiter's sliding logs are keyed by agent id, and the databases of every
    run number their agents from 1, so a run within a minute of another was refused with
    ``429``; presence records likewise."""
    if not django_settings.REDIS_URL:
        return
    with redis.Redis.from_url(django_settings.REDIS_URL) as client:
        for pattern in (f"{RATE_KEY_PREFIX}*", f"{PRESENCE_PREFIX}*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)


@pytest.fixture(autouse=True, scope="session")
def _flush_past_the_audit_guard() -> Iterator[None]:
    """Transactional tests end with ``flush``. On SQLite that is a ``DELETE`` per table, which
    the audit table's triggers refuse (as they must anywhere else): in the test run only,
    they are dropped for the flush and created again right after, as migration 0009 creates
    them. PostgreSQL's flush is a ``TRUNCATE``, which row triggers let through."""
    guard = importlib.import_module("approvals.migrations.0009_audit_guard")
    handle = flush.Command.handle

    def flush_past_the_guard(command: flush.Command, **options: Any) -> None:
        connection = connections[options["database"]]
        if connection.vendor != "sqlite":
            return handle(command, **options)
        guard.guard_drop(connection)
        try:
            return handle(command, **options)
        finally:
            guard.guard_create(connection)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flush.Command, "handle", flush_past_the_guard)
        yield
