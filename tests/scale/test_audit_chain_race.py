"""The audit chain under load, across two server processes on one database (PostgreSQL with
its Redis, or one SQLite file): 200 racing submissions leave one chain with no gap and no
fork, and a SIEM paging the export all the while, from the other worker, reads every entry
once, in order, never skipping one that commits late (docs/receipts.md, "The audit chain")."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection

from approvals.audit_chain import GENESIS_HASH, audit_entry_hash
from approvals.models import AuditEntry, Call
from approvals.selectors.audit import ChainIntact, audit_chain_verify
from approvals.services.rules import cap_rule_save
from tests.scale.servers import agent_create, bearer, redis_reachable, run_threads, workers

pytestmark = pytest.mark.django_db(transaction=True)

AUDIT_TOKEN = "audit-token-for-the-race-0123456789"
RACERS = 200


@pytest.fixture
def race_env(transactional_db: None) -> dict[str, str]:
    env = {"COUNTERSIGN_AUDIT_TOKEN": AUDIT_TOKEN}
    if connection.vendor == "sqlite":
        return {**env, "REDIS_URL": ""}
    if not redis_reachable(settings.REDIS_URL):
        pytest.skip("two-worker tests need a reachable REDIS_URL")
    return {**env, "REDIS_URL": str(settings.REDIS_URL)}


def _page(client: httpx.Client, after: int) -> dict[str, Any]:
    response = client.get("/api/v1/audit", params={"after": after, "limit": 7})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_racing_submissions_on_two_workers_leave_one_chain(race_env: dict[str, str]) -> None:
    cap_rule_save(line="race: pay arg=amount sum USD 1000.00 -> gate")
    _, token = agent_create("racer")
    before = AuditEntry.objects.count()
    body = json.dumps({"tool": "pay", "arguments": '{"amount": "10.00"}'}).encode()
    with workers(2, race_env) as servers:
        clients = [
            httpx.Client(
                base_url=server.url,
                headers={**bearer(token), "Content-Type": "application/json"},
                timeout=60,
                limits=httpx.Limits(max_connections=RACERS // 2),
            )
            for server in servers
        ]
        siem = httpx.Client(base_url=servers[1].url, headers=bearer(AUDIT_TOKEN), timeout=30)
        racing = threading.Event()
        read: list[dict[str, Any]] = []

        def follow() -> None:
            """Page the export while the race runs, as a SIEM polls."""
            after = 0
            while racing.is_set() or len(read) < before + RACERS:
                page = _page(siem, after)
                read.extend(page["items"])
                after = page["next_after"]
                if not page["items"] and not racing.is_set():
                    break

        def submit(index: int) -> int:
            return clients[index % 2].post("/api/v1/calls", content=body).status_code

        racing.set()
        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        try:
            statuses = run_threads(RACERS, submit, timeout=110)
        finally:
            racing.clear()
            follower.join(60)
            for client in [*clients, siem]:
                client.close()
        assert not follower.is_alive()

    assert Counter(statuses) == {201: RACERS}
    assert Counter(Call.objects.values_list("status", flat=True)) == {
        "allowed": RACERS // 2,
        "pending": RACERS // 2,
    }

    # One line: 1, 2, 3… each linked to the one before, no two after the same one.
    chain = list(AuditEntry.objects.order_by("seq"))
    assert len(chain) == before + RACERS
    assert [entry.seq for entry in chain] == list(range(1, len(chain) + 1))
    links = [entry.prev_hash for entry in chain]
    assert links == [GENESIS_HASH] + [entry.hash for entry in chain[:-1]]
    assert len(set(links)) == len(links)
    assert all(entry.hash == audit_entry_hash(entry) for entry in chain)
    assert audit_chain_verify(batch=37) == ChainIntact(len(chain), len(chain), chain[-1].hash)

    # The SIEM read each entry once, in order, while they were being written.
    assert [item["seq"] for item in read] == list(range(1, len(chain) + 1))
    assert [item["hash"] for item in read] == [entry.hash for entry in chain]
