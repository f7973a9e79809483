"""Per-agent submission limits: a sliding window, 429 with Retry-After, shared through Redis."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Any

import pytest
from django.test import Client

from approvals.api.errors import LIMITER_UNAVAILABLE
from approvals.api.ratelimit import LimiterUnavailable, LocalLimiter, RedisLimiter
from approvals.models import Call
from tests.factories import agent_with_token
from tests.local_redis import requires_redis

REDIS_URL = "redis://127.0.0.1:6379/5"


def test_the_local_window_allows_n_then_says_how_long_to_wait() -> None:
    limiter = LocalLimiter(3, 60)
    assert [limiter.hit("a") for _ in range(3)] == [None, None, None]
    wait = limiter.hit("a")
    assert wait is not None
    assert 59 <= wait <= 60
    assert limiter.hit("b") is None  # per key


def test_the_window_slides(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("approvals.api.ratelimit.time.monotonic", lambda: now[0])
    limiter = LocalLimiter(2, 60)
    assert limiter.hit("a") is None
    now[0] += 30
    assert limiter.hit("a") is None
    assert limiter.hit("a") == 30  # the first leaves the window 30 s from now
    now[0] += 30
    assert limiter.hit("a") is None  # the first has left; a burst never exceeds 2 per 60 s
    assert limiter.hit("a") is not None


@requires_redis
def test_redis_counts_across_workers() -> None:
    key = f"test-{uuid.uuid4().hex}"
    first, second = RedisLimiter(REDIS_URL, 3, 60), RedisLimiter(REDIS_URL, 3, 60)
    assert [first.hit(key), second.hit(key), first.hit(key)] == [None, None, None]
    wait = second.hit(key)
    assert wait is not None
    assert 59 <= wait <= 60


def test_the_api_answers_429_with_retry_after(db: None, settings: Any) -> None:
    settings.COUNTERSIGN_RATE_LIMIT = (2, 60)
    settings.REDIS_URL = ""  # a fresh in-process window; Redis is tested above with unique keys
    agent_with_token(token="cs_rate", name=f"bot-{uuid.uuid4().hex}", principal="p", mode="default")
    client = Client(HTTP_AUTHORIZATION="Bearer cs_rate")
    body = json.dumps({"tool": "read_file", "arguments": "{}"})
    codes = [client.post("/api/v1/calls", body, content_type="application/json") for _ in range(3)]
    assert [r.status_code for r in codes] == [201, 201, 429]
    assert codes[2].json()["error"]["code"] == "rate_limited"
    assert 1 <= int(codes[2]["Retry-After"]) <= 60
    assert Call.objects.count() == 2


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens once the probe is closed


def test_an_unreachable_redis_is_reported_not_passed() -> None:
    limiter = RedisLimiter(f"redis://127.0.0.1:{_closed_port()}/0", 3, 60)
    with pytest.raises(LimiterUnavailable):
        limiter.hit("any")


def test_the_api_refuses_with_503_when_the_limit_cannot_be_checked(db: None, settings: Any) -> None:
    settings.COUNTERSIGN_RATE_LIMIT = (2, 60)
    settings.REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"
    agent_with_token(token="cs_rate", name=f"bot-{uuid.uuid4().hex}", principal="p", mode="default")
    response = Client(HTTP_AUTHORIZATION="Bearer cs_rate").post(
        "/api/v1/calls", json.dumps({"tool": "pay", "arguments": "{}"}), "application/json"
    )
    assert response.status_code == 503
    assert response.json() == {"error": {"code": "unavailable", "message": LIMITER_UNAVAILABLE}}
    assert response["Retry-After"] == "1"
    assert Call.objects.count() == 0
