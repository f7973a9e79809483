"""``COUNTERSIGN_STOCK`` puts the stock components back where config/runtime/'s pieces
stand, read at start-up (so each case starts a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.runtime.stock import Stock

BASE_DIR = Path(__file__).resolve().parents[3]
SHOW = """
import json
import config.asgi
from django.conf import settings
print(json.dumps({
    "handler": type(config.asgi.django_http).__qualname__,
    "engine": settings.DATABASES["default"]["ENGINE"],
    "layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
    "stock": sorted(settings.COUNTERSIGN_STOCK),
}))
"""


def _started_with(**env: str) -> dict[str, object]:
    environ = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DATABASE_URL", "REDIS_URL", "COUNTERSIGN_STOCK"}
    }
    done = subprocess.run(
        [sys.executable, "-c", SHOW],
        cwd=BASE_DIR,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return shown


def test_by_default_every_piece_is_config_runtimes() -> None:
    assert _started_with() == {
        "handler": "PooledThreadASGIHandler",
        "engine": "config.runtime.sqlite_pooled",
        "layer": "config.runtime.memory_layer.ThrottledInMemoryChannelLayer",
        "stock": [],
    }
    redis = _started_with(REDIS_URL="redis://127.0.0.1:6379/9")
    assert redis["layer"] == "config.runtime.redis_layer.WaitingRedisChannelLayer"


def test_all_switches_every_piece_to_stock() -> None:
    assert _started_with(COUNTERSIGN_STOCK="all") == {
        "handler": "ASGIHandler",
        "engine": "django.db.backends.sqlite3",
        "layer": "channels.layers.InMemoryChannelLayer",
        "stock": sorted(Stock),
    }
    redis = _started_with(COUNTERSIGN_STOCK="layer", REDIS_URL="redis://127.0.0.1:6379/9")
    assert redis["layer"] == "channels_redis.core.RedisChannelLayer"
    assert redis["handler"] == "PooledThreadASGIHandler"


def test_an_unknown_piece_stops_start_up() -> None:
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _started_with(COUNTERSIGN_STOCK="handler,sqlite_pool")
    assert "COUNTERSIGN_STOCK names sqlite_pool" in refused.value.stderr
