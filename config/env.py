"""Readers for settings that come from environment variables.

Each reader refuses a malformed value at start-up rather than guessing: a typo in
``COUNTERSIGN_HTTPS`` must not quietly run production without TLS settings.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
_RATE = re.compile(r"(?P<count>[1-9][0-9]{0,8})/(?P<period>[smh])", re.ASCII)
_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600}
ALL_CHOICES = "all"
UNKNOWN_CHOICES = "{name} names {unknown}: choose from {choices}, or all"


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    text = raw.strip()
    if not re.fullmatch(r"[0-9]{1,12}", text, re.ASCII):
        raise ImproperlyConfigured(f"{name} must be a whole number")
    value = int(text)
    if not minimum <= value <= maximum:
        raise ImproperlyConfigured(f"{name} must be between {minimum} and {maximum}")
    return value


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_rate(name: str, default: str) -> tuple[int, int] | None:
    """``N/s``, ``N/m`` or ``N/h`` as (count, window seconds); ``0`` turns the limit off."""
    text = env_str(name, default).strip()
    if text == "0":
        return None
    match = _RATE.fullmatch(text)
    if match is None:
        raise ImproperlyConfigured(f"{name} must look like 600/m (N/s, N/m or N/h) or be 0")
    return int(match["count"]), _PERIOD_SECONDS[match["period"]]


def env_choices(name: str, choices: Iterable[str]) -> frozenset[str]:
    """A comma-separated subset of ``choices``, or ``all`` of them; none when unset."""
    allowed = frozenset(choices)
    named = {item.lower() for item in env_list(name, "")}
    if ALL_CHOICES in named:
        return allowed
    unknown = named - allowed
    if unknown:
        raise ImproperlyConfigured(
            UNKNOWN_CHOICES.format(
                name=name, unknown=", ".join(sorted(unknown)), choices=", ".join(sorted(allowed))
            )
        )
    return frozenset(named)


def secret_key(path: Path) -> str:
    """``SECRET_KEY`` from the environment, else one generated once and kept in ``path``."""
    configured = os.environ.get("SECRET_KEY")
    if configured:
        return configured
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write aside, then link into place: when several workers start at once, exactly one key
    # wins and nobody ever reads a half-written file.
    fd, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(50))
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(draft)
    return path.read_text().strip()


# Seconds: more than channels_redis's 5 s blocking pop, and less than the database pool's 10 s
# wait, since a push hanging after a commit keeps its thread's connection (15 s starved 200
# racing submissions on PostgreSQL + Redis).
REDIS_READ_TIMEOUT = 7
REDIS_CONNECT_TIMEOUT = 2  # seconds
REDIS_MAX_CONNECTIONS = 1000  # per process
# Messages waiting per channel key. channels_redis queues every process-local channel of a
# worker under one key, so its default of 100 silently dropped pushes beyond the 100th when
# many calls were decided at once (a bulk approval).
CHANNEL_CAPACITY = 50_000
REDIS_LAYER = "config.runtime.redis_layer.WaitingRedisChannelLayer"
STOCK_REDIS_LAYER = "channels_redis.core.RedisChannelLayer"


def redis_channel_layer(url: str, *, stock: bool = False) -> dict[str, Any]:
    """The Channels layer on the Redis at ``url``.

    channels_redis waits for messages with a 5 s BZPOPMIN, and redis-py's default read
    timeout is also 5 s: an idle receive could time out just as Redis answered, and the
    socket's consumer would die with it. Reads get more than that. redis-py's default pool of
    100 connections refuses a burst of agents joining their groups at once (seen with 300):
    the pool gets more room, and a command waits for a free connection rather than fail
    (``config.runtime.redis_layer``; ``stock``: channels_redis's own layer, which fails).
    And see ``CHANNEL_CAPACITY``.
    """
    host = {
        "address": url,
        "socket_timeout": REDIS_READ_TIMEOUT,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT,
        "max_connections": REDIS_MAX_CONNECTIONS,
    }
    return {
        "BACKEND": STOCK_REDIS_LAYER if stock else REDIS_LAYER,
        "CONFIG": {"hosts": [host], "capacity": CHANNEL_CAPACITY},
    }
