"""Whether an agent waits, across two workers on one PostgreSQL and one Redis: an agent
waiting by WebSocket on worker A shows as waiting on worker B's live queue, and stops showing
soon after it goes away, by closing its socket or with its worker killed."""

from __future__ import annotations

import re
import signal
import time

import httpx
from django.contrib.auth.models import User
from websockets.sync.client import ClientConnection, connect
from websockets.sync.connection import Connection
from websockets.typing import Origin

from approvals.services.rules import cap_rule_save
from tests.live import Approver, LiveServer
from tests.scale.servers import APPROVER, PASSWORD, agent_create, bearer, workers

HELD = '{"amount": "600.00"}'
GONE_WITHIN = 2.0  # seconds from the agent's going to the queue's saying so


def submit_held(server: LiveServer, token: str) -> str:
    answer = httpx.post(
        f"{server.url}/api/v1/calls",
        json={"tool": "pay", "arguments": HELD},
        headers=bearer(token),
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def queue_socket(server: LiveServer, person: Approver) -> ClientConnection:
    return connect(
        f"{server.ws_url}/ws/v1/queue",
        origin=Origin(server.url),
        additional_headers={"Cookie": f"sessionid={person.http.cookies['sessionid']}"},
        open_timeout=10,
    )


def row_text(html: str, call_id: str) -> str | None:
    row = re.search(rf'<li id="call-{call_id}".*?</li>', html, re.S)
    return None if row is None else " ".join(re.sub(r"<[^>]+>", " ", row[0]).split())


def until_row_says(queue: Connection, call_id: str, words: str, within: float) -> str:
    """The first render of the queue whose row of ``call_id`` says ``words``."""
    deadline = time.monotonic() + within
    seen = None
    while True:
        left = deadline - time.monotonic()
        try:
            seen = row_text(str(queue.recv(timeout=max(0.0, left))), call_id)
        except TimeoutError:
            raise AssertionError(f"within {within} s no row said {words!r}; last: {seen}") from None
        if seen is not None and words in seen:
            return seen


def test_an_agent_waiting_on_worker_a_shows_on_worker_b_and_stops_when_it_goes(
    postgres_and_redis: str, approver: User
) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    _, token = agent_create("waiter")
    with workers(2, {"REDIS_URL": postgres_and_redis}) as (a, b):
        call_id = submit_held(a, token)
        person = Approver(b, APPROVER, PASSWORD)
        with queue_socket(b, person) as queue:
            until_row_says(queue, call_id, "no agent has waited", within=10)

            agent = connect(f"{a.ws_url}/ws/v1/calls/{call_id}", additional_headers=bearer(token))
            agent.recv(timeout=10)  # the call's state: it waits
            until_row_says(queue, call_id, "agent waiting", within=10)
            agent.close()
            row = until_row_says(queue, call_id, "no agent waiting since", within=GONE_WITHIN)
            assert re.search(r"no agent waiting since \d\d:\d\d", row)

            # Again, and this time worker A is killed under the waiting agent.
            agent = connect(f"{a.ws_url}/ws/v1/calls/{call_id}", additional_headers=bearer(token))
            agent.recv(timeout=10)
            until_row_says(queue, call_id, "agent waiting", within=10)
            a.stop(signal.SIGKILL)
            until_row_says(queue, call_id, "no agent waiting since", within=GONE_WITHIN + 1)
        person.close()
