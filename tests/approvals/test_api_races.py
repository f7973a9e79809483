"""Really concurrent requests through the HTTP API: threads, each with its own connection,
against the file-backed test database (and PostgreSQL when DATABASE_URL says so)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.client import ClientHandler

from approvals.models import Call, LedgerEntry, LedgerHour
from tests.factories import agent_with_token, rule_make

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "cs_race-test-token"


@pytest.fixture(autouse=True)
def _ready_for_200(transactional_db: None, settings: Any) -> None:
    """What the races test is the ledger under 200 requests at once, so:

    - on PostgreSQL they start from a new connection pool that has already grown to its
      size. The pool is the test process's: connections an earlier test left checked out,
      and a pool that grows one connection at a time while 200 threads wait, both made the
      race time out on the pool in CI instead of testing the ledger;
    - their pushes go to the in-memory layer: the race is about the ledger, and in CI 200
      threads pushing through Redis at once (then each on an event loop of its own) held
      their database connections long enough to time the race out. Pushes from threads
      through Redis are tested in ``test_notify.py``; the two-worker race goes through
      real servers and Redis.
    """
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    if connection.vendor != "postgresql":
        return
    connection.close()
    connection.close_pool()  # type: ignore[attr-defined]
    connection.ensure_connection()  # Django opens the new pool on the first connect
    connection.close()
    pool = connection.pool  # type: ignore[attr-defined]
    held = [pool.getconn(timeout=60) for _ in range(pool.max_size)]
    for psycopg_connection in held:
        pool.putconn(psycopg_connection)


def _race(count: int, request: Callable[[Client], int]) -> list[int]:
    statuses: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(count)
    # One handler for all the threads, as a server has, its middleware loaded before the
    # race. A client per thread loading its own at the race's start (WhiteNoise scans the
    # static files) starved the requests holding database connections of the GIL, and the
    # rest timed out waiting for the pool.
    handler = ClientHandler()
    handler.load_middleware()

    def run() -> None:
        try:
            client = Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
            client.handler = handler
            start.wait()
            statuses.append(request(client))
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return statuses


def test_200_simultaneous_submissions_allow_exactly_the_limit() -> None:
    agent_with_token(token=TOKEN, name="racer", principal="user-1")
    rule_make(line="race: pay arg=amount sum USD 1000.00 -> gate")
    body = json.dumps({"tool": "pay", "arguments": '{"amount": "10.00"}'})

    def submit(client: Client) -> int:
        return int(client.post("/api/v1/calls", body, content_type="application/json").status_code)

    assert Counter(_race(200, submit)) == {201: 200}
    assert Counter(Call.objects.values_list("status", flat=True)) == {
        "allowed": 100,
        "pending": 100,
    }
    assert sum(LedgerEntry.objects.values_list("minor", flat=True)) == 100_000
    assert sum(LedgerHour.objects.values_list("minor", flat=True)) == 100_000


def test_concurrent_requests_with_one_idempotency_key_create_one_call() -> None:
    agent_with_token(token=TOKEN, name="racer", principal="user-1")
    body = json.dumps({"tool": "read_file", "arguments": "{}"})

    def submit(client: Client) -> int:
        response = client.post(
            "/api/v1/calls",
            body,
            content_type="application/json",
            headers={"Idempotency-Key": "k-1"},
        )
        return int(response.status_code)

    assert Counter(_race(20, submit)) == {201: 1, 200: 19}
    assert Call.objects.count() == 1
