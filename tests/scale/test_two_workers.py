"""Two server workers on one PostgreSQL and one Redis (docs/deploy.md, "Workers"): a
decision made on one worker reaches agents waiting on the other, and the ledgers hold when
racing submissions are split across both (the race also on SQLite, whose file lock spans
processes).

The browser queue across workers is checked in Chromium (tests/browser/test_two_workers.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from websockets.sync.client import connect

from approvals.models import AuditEntry, Call, LedgerEntry
from approvals.services.rules import cap_rule_save
from tests.factories import gate_make, user_make
from tests.live import Approver, LiveServer
from tests.scale.servers import (
    APPROVER,
    PASSWORD,
    agent_create,
    bearer,
    redis_reachable,
    run_threads,
    workers,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def race_env(transactional_db: None) -> dict[str, str]:
    """The race needs no pushes, only the shared database: it runs on SQLite too (one file,
    locked by IMMEDIATE transactions across processes), and on PostgreSQL with its Redis."""
    if connection.vendor == "sqlite":
        return {"REDIS_URL": ""}
    if not redis_reachable(settings.REDIS_URL):
        pytest.skip("two-worker tests need a reachable REDIS_URL")
    return {"REDIS_URL": str(settings.REDIS_URL)}


HELD = '{"amount": "600.00"}'  # over the 500.00 cap below: held at the default gate
# Measured from the moment the decision is sent (the call page's GET, then the form's POST)
# to the moment the waiting agent has the final state.
CROSS_WORKER_LIMIT = 1.0


def _submit_held(server: LiveServer, token: str) -> dict[str, Any]:
    response = httpx.post(
        f"{server.url}/api/v1/calls",
        json={"tool": "pay", "arguments": HELD},
        headers=bearer(token),
        timeout=10,
    )
    assert response.status_code == 201, response.text
    state: dict[str, Any] = response.json()
    assert state["status"] == "pending"
    return state


def test_a_decision_on_worker_b_reaches_agents_waiting_on_worker_a(
    postgres_and_redis: str, approver: User
) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    _, socket_token = agent_create("by-socket")
    _, poll_token = agent_create("by-poll")
    with workers(2, {"REDIS_URL": postgres_and_redis}) as (a, b):
        by_socket = _submit_held(a, socket_token)
        by_poll = _submit_held(b, poll_token)  # submitted on B, waited for on A
        people = Approver(b, APPROVER, PASSWORD)

        # The long-poll, parked on A.
        polled: dict[str, Any] = {}

        def poll() -> None:
            response = httpx.get(
                f"{a.url}/api/v1/calls/{by_poll['id']}/wait?timeout=30",
                headers=bearer(poll_token),
                timeout=40,
            )
            polled["at"] = time.monotonic()
            polled["status"], polled["state"] = response.status_code, response.json()

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()

        # The WebSocket, on A: the current state first.
        with connect(
            f"{a.ws_url}/ws/v1/calls/{by_socket['id']}",
            additional_headers=bearer(socket_token),
            open_timeout=10,
        ) as ws:
            first = json.loads(ws.recv(timeout=10))
            assert (first["type"], first["call"]["status"]) == ("call", "pending")
            # The long-poll has had its time to read "pending" and park on the layer.
            poller.join(0.5)
            assert poller.is_alive(), f"the long-poll returned early: {polled}"

            sent = time.monotonic()
            assert people.decide(by_socket["id"], approve=True, comment="ok from B") == 303
            final = json.loads(ws.recv(timeout=10))
            socket_latency = time.monotonic() - sent

            sent = time.monotonic()
            assert people.decide(by_poll["id"], approve=False, comment="no from B") == 303
            poller.join(10)
            assert not poller.is_alive(), "the long-poll on A never heard of the decision on B"
            poll_latency = polled["at"] - sent
        people.close()

    assert final["type"] == "call"
    assert (final["call"]["status"], final["call"]["decision"]["comment"]) == (
        "approved",
        "ok from B",
    )
    assert polled["status"] == 200
    assert (polled["state"]["status"], polled["state"]["decision"]["comment"]) == (
        "denied",
        "no from B",
    )
    print(
        f"\ncross-worker: socket {socket_latency * 1000:.1f} ms, poll {poll_latency * 1000:.1f} ms"
    )
    assert socket_latency < CROSS_WORKER_LIMIT
    assert poll_latency < CROSS_WORKER_LIMIT


def test_the_cap_race_split_across_two_workers_allows_exactly_the_limit(
    race_env: dict[str, str],
) -> None:
    cap_rule_save(line="race: pay arg=amount sum USD 1000.00 -> gate")
    _, token = agent_create("racer")
    per_worker = 100
    body = json.dumps({"tool": "pay", "arguments": '{"amount": "10.00"}'}).encode()
    with workers(2, race_env) as servers:
        clients = [
            httpx.Client(
                base_url=server.url,
                headers={**bearer(token), "Content-Type": "application/json"},
                timeout=60,
                limits=httpx.Limits(max_connections=per_worker),
            )
            for server in servers
        ]

        def submit(index: int) -> int:
            response = clients[index % 2].post("/api/v1/calls", content=body)
            return response.status_code

        try:
            statuses = run_threads(2 * per_worker, submit, timeout=55)
        finally:
            for client in clients:
                client.close()

    assert Counter(statuses) == {201: 200}
    allowed = Call.objects.filter(status="allowed").count()
    total = sum(LedgerEntry.objects.values_list("minor", flat=True))
    print(f"\ntwo-worker race on {connection.vendor}: allowed {allowed}, total {total / 100:.2f}")
    assert Counter(Call.objects.values_list("status", flat=True)) == {
        "allowed": 100,
        "pending": 100,
    }
    assert total == 100_000
    assert LedgerEntry.objects.count() == 100
    assert set(LedgerEntry.objects.values_list("call__status", flat=True)) == {"allowed"}
    assert AuditEntry.objects.filter(object_type="call").count() == 200


def test_held_calls_approved_on_both_workers_never_pass_a_cap_its_gate_did_not_see(
    race_env: dict[str, str],
) -> None:
    """50 calls held by the agent's mode, then a cap written for 20 of them: people outside
    the cap's gate approve all 50 at once, split across two workers. Each approval's re-check
    runs under the ledger's lock, across processes: exactly 20 are approved, the ledger stops
    at its limit, and the other 30 wait at the cap's gate."""
    _, token = agent_create("asker", mode="prompt")
    gate_make(name="finance", group=Group.objects.create(name="finance"))
    names = [f"outsider-{k}" for k in range(6)]
    for name in names:
        user_make(username=name, password=PASSWORD)
    with workers(2, race_env) as servers:
        ids = []
        for index in range(50):
            response = httpx.post(
                f"{servers[index % 2].url}/api/v1/calls",
                json={"tool": "pay", "arguments": '{"amount": "10.00"}'},
                headers=bearer(token),
                timeout=10,
            )
            assert response.json()["status"] == "pending"
            ids.append(response.json()["id"])
        cap_rule_save(line="race: pay arg=amount sum USD 200.00 -> gate finance")
        people = [Approver(servers[k % 2], name, PASSWORD) for k, name in enumerate(names)]

        def approve_share(index: int) -> list[int]:
            return [people[index].decide(i, approve=True) for i in ids[index :: len(people)]]

        try:
            shares = run_threads(len(people), approve_share, timeout=120)
        finally:
            for person in people:
                person.close()

    assert Counter(status for share in shares for status in share) == {303: 50}
    assert Counter(Call.objects.values_list("status", flat=True)) == {
        "approved": 20,
        "pending": 30,
    }
    assert sum(LedgerEntry.objects.values_list("minor", flat=True)) == 20_000
    assert all(call.gates == ["", "finance"] for call in Call.objects.filter(status="pending"))
