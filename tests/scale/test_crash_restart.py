"""Crash and restart (issue 6): agents waiting with the client package lose nothing when the
server they wait on is killed, or when Redis is, and the decisions made meanwhile elsewhere
are whole — one decision, one audit row and the right ledger entries per call.

Runs on the suite's database (SQLite file or PostgreSQL) with whatever REDIS_URL the suite
has; the Redis test brings its own redis-server so that it can kill it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from approvals.api.errors import LIMITER_UNAVAILABLE
from approvals.models import Approval, AuditEntry, Call, LedgerEntry, LedgerHour
from approvals.services.decisions import call_decide
from approvals.services.rules import cap_rule_save
from countersign import Client, waiting
from tests.live import Approver, LiveServer, free_port, start_server
from tests.scale.servers import (
    APPROVER,
    NO_RATE_LIMIT,
    PASSWORD,
    PrivateRedis,
    agent_create,
    bearer,
    established_connections,
    restart_on,
    wait_until,
    workers,
)

pytestmark = pytest.mark.django_db(transaction=True)

AGENTS = 50
WAIT_DEADLINE = 45.0  # each agent's whole wait, far above what the test needs


def _world(count: int) -> list[tuple[str, Decimal]]:
    """``count`` agents, each with a payment the caps hold (over 100.00) and a running total
    the approved ones are recorded in; their tokens and amounts."""
    cap_rule_save(line="held: pay arg=amount max USD 100.00 -> gate")
    cap_rule_save(line="spend: pay arg=amount sum USD 1000000.00 -> gate")
    world = []
    for index in range(count):
        _, token = agent_create(f"agent-{index:02}")
        world.append((token, Decimal(200 + index) + Decimal("0.25")))
    return world


def _submit_all(server: LiveServer, world: list[tuple[str, Decimal]]) -> list[dict[str, Any]]:
    """Each agent's held call, submitted over one connection that is closed afterwards (so
    that the connections counted later are the agents' sockets only)."""
    states = []
    with httpx.Client(base_url=server.url, timeout=10) as http:
        for token, amount in world:
            response = http.post(
                "/api/v1/calls",
                json={"tool": "pay", "arguments": json.dumps({"amount": str(amount)})},
                headers=bearer(token),
            )
            assert response.status_code == 201, response.text
            assert response.json()["status"] == "pending"
            states.append(response.json())
    return states


class Waiters:
    """One thread per agent, each in ``countersign.Client.wait`` on the same server.

    ``pending_seen`` counts the pending states the agents have read from their sockets: the
    server sends one right after the socket has joined its call's group, so once it reaches
    the number of agents, every agent is parked on a socket and subscribed."""

    def __init__(
        self, server_url: str, world: list[tuple[str, Decimal]], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.results: list[dict[str, Any] | None] = [None] * len(world)
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._wait, args=(i, server_url, token), daemon=True)
            for i, (token, _) in enumerate(world)
        ]
        self._states: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.pending_seen = 0
        read = waiting.call_message

        def counting(raw: str | bytes) -> dict[str, Any] | None:
            state = read(raw)
            if state is not None and state.get("status") == "pending":
                with self._lock:
                    self.pending_seen += 1
            return state

        monkeypatch.setattr(waiting, "call_message", counting)

    def start(self, states: list[dict[str, Any]]) -> None:
        self._states = states
        for thread in self._threads:
            thread.start()

    def _wait(self, index: int, url: str, token: str) -> None:
        try:
            with Client(url, token, timeout=10) as client:
                self.results[index] = client.wait(self._states[index], deadline=WAIT_DEADLINE)
        except BaseException as error:
            self.errors.append(error)

    def finished(self) -> int:
        return sum(result is not None for result in self.results) + len(self.errors)

    def join(self, timeout: float) -> list[dict[str, Any]]:
        wait_until(lambda: self.finished() == len(self._threads), timeout, "every agent's answer")
        assert self.errors == [], self.errors[:3]
        return [result for result in self.results if result is not None]


def _decide_half_and_half(server: LiveServer, states: list[dict[str, Any]]) -> None:
    """Approve the even ones, deny the odd ones, through the approver's forms."""
    people = Approver(server, APPROVER, PASSWORD)
    try:
        for index, state in enumerate(states):
            approve = index % 2 == 0
            comment = f"{'yes' if approve else 'no'} {index}"
            assert people.decide(state["id"], approve=approve, comment=comment) == 303
    finally:
        people.close()


def _assert_consistent(
    states: list[dict[str, Any]], finals: list[dict[str, Any]], world: list[tuple[str, Decimal]]
) -> None:
    """Every agent has its call's final state, and the database holds exactly one decision,
    one decision audit row and (for approvals only) one ledger entry per call."""
    by_id = {final["id"]: final for final in finals}
    assert len(by_id) == len(states)
    expected_total = 0
    for index, state in enumerate(states):
        final = by_id[state["id"]]
        approve = index % 2 == 0
        assert final["status"] == ("approved" if approve else "denied")
        assert final["decision"]["by"] == APPROVER
        assert final["decision"]["comment"] == f"{'yes' if approve else 'no'} {index}"
        if approve:
            expected_total += int(world[index][1] * 100)

    calls = Call.objects.in_bulk([state["id"] for state in states], field_name="id")
    half = len(states) // 2
    assert Counter(call.status for call in calls.values()) == {
        "approved": len(states) - half,
        "denied": half,
    }
    assert Approval.objects.count() == len(states)
    # Ledgers: one entry per approved call, of its amount; none for denied ones.
    entries = list(LedgerEntry.objects.select_related("call"))
    assert len(entries) == len(states) - half
    assert {entry.call.status for entry in entries} == {"approved"}
    assert len({entry.call_id for entry in entries}) == len(entries)
    assert sum(entry.minor for entry in entries) == expected_total
    # The ledgers' hours were kept in the entries' transactions: their totals agree.
    assert sum(LedgerHour.objects.values_list("minor", flat=True)) == expected_total
    # The audit log: per call, one "call pending" and exactly one decision row, the right one.
    audit = Counter(
        AuditEntry.objects.filter(object_type="call").values_list("object_id", "action")
    )
    for call in calls.values():
        decided = "call approved" if call.status == "approved" else "call denied"
        assert audit.pop((str(call.pk), "call pending")) == 1
        assert audit.pop((str(call.pk), decided)) == 1
    assert audit == Counter(), f"unexpected audit rows: {dict(audit)}"


def test_agents_get_their_decisions_after_the_server_is_killed_and_restarted(
    approver: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _world(AGENTS)
    port = free_port()
    first = start_server(port=port, extra_env=NO_RATE_LIMIT)
    servers = [first]
    try:
        states = _submit_all(first, world)
        waiters = Waiters(first.url, world, monkeypatch)
        waiters.start(states)
        wait_until(lambda: waiters.pending_seen >= AGENTS, 20, f"{AGENTS} agents parked")
        assert established_connections(port) >= AGENTS

        first.process.kill()
        first.process.wait(timeout=10)
        with workers(1) as (second,):
            _decide_half_and_half(second, states)
        # Nobody could have heard yet: the agents know only the dead server.
        assert waiters.finished() == 0

        servers.append(restart_on(port))
        finals = waiters.join(30)
    finally:
        for server in servers:
            server.stop()
    _assert_consistent(states, finals, world)
    print(f"\ncrash and restart: {len(finals)} agents, every final state right")


REDIS_OUTAGE = 2.0  # seconds Redis stays down: every agent's socket breaks meanwhile


def test_agents_get_their_decisions_when_redis_restarts_mid_wait(
    approver: User, own_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _world(AGENTS)
    with workers(2, {"REDIS_URL": own_redis.url}) as (a, b):
        states = _submit_all(a, world)
        waiters = Waiters(a.url, world, monkeypatch)
        waiters.start(states)
        wait_until(lambda: waiters.pending_seen >= AGENTS, 20, f"{AGENTS} agents parked")

        # Down long enough for every socket on A to notice and its agent to look elsewhere;
        # restarted empty, as Redis without persistence is: the groups are gone.
        own_redis.kill()
        wait_until(lambda: not own_redis.answers(), 10, "Redis to go away")
        time.sleep(REDIS_OUTAGE)
        own_redis.start()

        _decide_half_and_half(b, states)
        finals = waiters.join(40)
        for server in (a, b):
            assert server.process.poll() is None, "a worker died with Redis"
    _assert_consistent(states, finals, world)
    print(f"\nRedis restart: {len(finals)} agents, every final state right")


@pytest.fixture(params=["rate limit off", "rate limit on"])
def redis_down_world(
    request: pytest.FixtureRequest, approver: User, own_redis: PrivateRedis
) -> Iterator[tuple[LiveServer, PrivateRedis, list[tuple[str, Decimal]]]]:
    """One worker on the private Redis, two agents; the test kills Redis when it wants to.
    With the rate limit on, its counts live in that Redis too."""
    world = _world(2)
    limit = {"COUNTERSIGN_RATE_LIMIT": "600/m" if request.param == "rate limit on" else "0"}
    with workers(1, {"REDIS_URL": own_redis.url, **limit}) as (server,):
        yield server, own_redis, world


def test_a_submission_while_redis_is_down_is_stored_or_refused_whole(
    redis_down_world: tuple[LiveServer, PrivateRedis, list[tuple[str, Decimal]]],
    request: pytest.FixtureRequest,
) -> None:
    server, redis, world = redis_down_world
    redis.kill()
    response = httpx.post(
        f"{server.url}/api/v1/calls",
        json={"tool": "pay", "arguments": '{"amount": "600.00"}'},
        headers=bearer(world[0][0]),
        timeout=10,
    )
    stored = list(Call.objects.values_list("id", "status"))
    if "rate limit on" in request.node.callspec.id:
        # The count cannot be read: refused, retryable, and nothing stored.
        assert response.status_code == 503
        assert response.json()["error"] == {"code": "unavailable", "message": LIMITER_UNAVAILABLE}
        assert response.headers["Retry-After"] == "1"
        assert stored == []
    else:
        # Stored, and the agent is told so although the push could not go out.
        assert response.status_code == 201
        assert [(response.json()["id"], response.json()["status"])] == [
            (str(call_id), status) for call_id, status in stored
        ]
        assert stored[0][1] == "pending"


def test_a_decision_while_redis_is_down_is_committed_once_and_reaches_the_agent_later(
    redis_down_world: tuple[LiveServer, PrivateRedis, list[tuple[str, Decimal]]],
) -> None:
    server, redis, world = redis_down_world
    states = _submit_all(server, world)
    people = Approver(server, APPROVER, PASSWORD)
    try:
        redis.kill()
        statuses = [
            people.decide(
                state["id"],
                approve=index % 2 == 0,
                comment=f"{'yes' if index % 2 == 0 else 'no'} {index}",
            )
            for index, state in enumerate(states)
        ]
        redis.start()
    finally:
        people.close()
    finals = []
    for (token, _), state in zip(world, states, strict=True):
        with Client(server.url, token, timeout=10) as client:
            finals.append(client.wait(state, deadline=20))
    _assert_consistent(states, finals, world)
    # The decisions were committed: the approver must be told so, not shown an error page.
    assert statuses == [303, 303]


def test_a_long_poll_while_redis_is_down_reads_the_database(
    redis_down_world: tuple[LiveServer, PrivateRedis, list[tuple[str, Decimal]]],
) -> None:
    server, redis, world = redis_down_world
    state = _submit_all(server, world[:1])[0]
    redis.kill()
    url = f"{server.url}/api/v1/calls/{state['id']}/wait"
    response = httpx.get(f"{url}?timeout=1", headers=bearer(world[0][0]), timeout=10)
    # The state as it is (still pending), not a server error.
    assert response.status_code == 200, response.status_code
    assert response.headers["content-type"] == "application/json"
    assert response.json()["status"] == "pending"

    # A decision written meanwhile (here by the service itself: no push can reach anyone)
    # is found in the database by a parked long-poll.
    answers: list[httpx.Response] = []
    poll = threading.Thread(
        target=lambda: answers.append(
            httpx.get(f"{url}?timeout=20", headers=bearer(world[0][0]), timeout=30)
        ),
        daemon=True,
    )
    poll.start()
    poll.join(0.5)
    assert poll.is_alive()
    call_decide(
        call_id=state["id"],
        user=User.objects.get(username=APPROVER),
        approve=True,
        comment="read from the database",
        arguments_sha256=state["arguments_sha256"],
    )
    decided = time.monotonic()
    poll.join(10)
    assert not poll.is_alive()
    assert time.monotonic() - decided < 2  # the fallback reads every half second
    assert answers[0].json()["status"] == "approved"
    assert answers[0].json()["decision"]["comment"] == "read from the database"
