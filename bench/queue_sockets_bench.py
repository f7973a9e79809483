"""Decision latency to waiting agents while an approver holds many queue sockets open; prints one
JSON object on its last line.

Two runs side by side, each on a fresh database and server process: with 0 and with
``--queue-sockets`` (default 300) ``/ws/v1/queue`` sockets open on one approver's session
(issue 13: one view-only user stalling every WebSocket). In each run, an agent in ``prompt``
mode submits a held call every ``--interval`` seconds (default 0.1) for as long as the run
lasts, so every open queue is pushed a change ten times a second and the queue grows. Meanwhile
``--decisions`` more held calls are each waited for by the agent — on its WebSocket and on the
long-poll in turn — and approved one by one through the approver's form (POST
/calls/<id>/approve with a logged-in session and CSRF); the latency is measured from the moment
the approval request is sent (its first byte written) to the moment the waiting agent has the
final state, as bench/decision_bench.py measures it.

The queue sockets are held, and read as a browser tab reads them, by a process of their own,
so that reading them does not slow the process that measures the agents.

Also per run: each agent WebSocket's time from opening the connection to its first state (the
handshake the issue saw fail), how many pushes the queue sockets received, the server's CPU
time, and the time from an admin's "revoke" in the token admin to the close of an open socket
that authenticated with that token (``null``: not closed within ``CLOSE_WAIT`` seconds).

Usage: python bench/queue_sockets_bench.py [--queue-sockets 300] [--decisions 100]
       [--interval 0.1] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import re
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import BenchServer, cpu_seconds, database, manage, on_sent, percentile, server

ARGUMENTS = '{"amount": "600.00"}'
DIGEST = hashlib.sha256(ARGUMENTS.encode()).hexdigest()
TOKEN, REVOKED_TOKEN = "cs_bench", "cs_bench_revoked"
PASSWORD = "bench-pw"
SETUP = """
import hashlib
from django.contrib.auth.models import Permission, User
from approvals.models import Agent, AgentToken
agent = Agent.objects.create(name="bench", principal="bench-user", mode="prompt")
for token in TOKENS:
    AgentToken.objects.create(
        agent=agent, digest=hashlib.sha256(token.encode()).hexdigest(), prefix=token[:8]
    )
user = User.objects.create_user("approver", password=PASSWORD)
user.user_permissions.add(Permission.objects.get(codename="decide_call"))
User.objects.create_superuser("root", password=PASSWORD)
print(AgentToken.objects.get(digest=hashlib.sha256(TOKENS[1].encode()).hexdigest()).pk)
"""
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
OPEN_TIMEOUT = 60  # seconds for a handshake: the issue saw them fail under load
DECISION_TIMEOUT = 60  # seconds for one decision to reach its agent before the bench gives up
CLOSE_WAIT = 5.0  # seconds the revoked socket is given to close
POLL_PARK = 0.2  # seconds a long-poll is given at most to reach the server and park
METRICS_TOKEN = "bench-metrics"
PARKED = "countersign_open_long_polls 1.0"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class _Person:
    """A logged-in browser session: its HTTP client, cookie and CSRF token."""

    def __init__(self, http: httpx.AsyncClient, csrf: str) -> None:
        self.http, self.csrf = http, csrf

    @classmethod
    async def log_in(cls, url: str, username: str) -> _Person:
        http = httpx.AsyncClient(base_url=url, timeout=60)
        page = await http.get("/accounts/login/")
        token = CSRF_INPUT.search(page.text)
        assert token is not None, "no CSRF token on the login page"
        answer = await http.post(
            "/accounts/login/",
            data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token[1]},
        )
        assert answer.status_code == 302, answer.status_code
        # Logging in rotates the CSRF secret; the new cookie's value is a valid form token too.
        return cls(http, str(http.cookies["csrftoken"]))

    @property
    def cookie(self) -> str:
        return f"sessionid={self.http.cookies['sessionid']}"

    async def approve(self, call_id: str) -> float:
        """Approve the call; when the request was sent (its first byte written, as
        bench/decision_bench.py measures it)."""
        sent: list[float] = []
        answer = await self.http.post(
            f"/calls/{call_id}/approve",
            data={"csrfmiddlewaretoken": self.csrf, "arguments_sha256": DIGEST, "comment": ""},
            headers={"Referer": f"{self.http.base_url}calls/{call_id}/"},
            extensions=on_sent(sent.append),
        )
        assert answer.status_code == 303, answer.status_code
        return sent[-1]

    async def revoke_token(self, token_id: str) -> None:
        answer = await self.http.post(
            "/admin/approvals/agenttoken/",
            data={
                "csrfmiddlewaretoken": self.csrf,
                "action": "revoke",
                "_selected_action": token_id,
                "index": "0",
            },
            headers={"Referer": f"{self.http.base_url}admin/approvals/agenttoken/"},
        )
        assert answer.status_code == 302, answer.status_code


async def _submit(agent: httpx.AsyncClient) -> str:
    answer = await agent.post("/api/v1/calls", json={"tool": "pay", "arguments": ARGUMENTS})
    assert answer.status_code == 201, answer.status_code
    assert answer.json()["status"] == "pending"
    return str(answer.json()["id"])


async def _arrivals(agent: httpx.AsyncClient, interval: float, count: list[int]) -> None:
    """A held call every ``interval`` seconds, for ever."""
    while True:
        began = time.perf_counter()
        await _submit(agent)
        count[0] += 1
        await asyncio.sleep(max(0.0, interval - (time.perf_counter() - began)))


async def _drain(socket: ClientConnection, pushes: list[int]) -> None:
    """Read a queue socket as a browser tab does, counting what it is sent: pushes, bytes."""
    try:
        async for message in socket:
            pushes[0] += 1
            pushes[1] += len(message)
    except ConnectionClosed:
        pass


async def _hold(url: str, cookie: str, count: int, parent: Connection) -> None:
    ws_url = url.replace("http://", "ws://")
    opening = time.perf_counter()
    queue = [
        await connect(
            f"{ws_url}/ws/v1/queue",
            origin=Origin(url),
            additional_headers={"Cookie": cookie},
            open_timeout=OPEN_TIMEOUT,
        )
        for _ in range(count)
    ]
    pushes = [0, 0]
    drains = [asyncio.ensure_future(_drain(socket, pushes)) for socket in queue]
    parent.send(time.perf_counter() - opening)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, parent.recv)  # until the measuring is done
    for drain in drains:
        drain.cancel()
    for socket in queue:
        await socket.close()
    parent.send(pushes)


def _queue_holder(url: str, cookie: str, count: int, parent: Connection) -> None:
    """A process of its own that opens ``count`` queue sockets on the session of ``cookie``,
    sends how long opening them took, reads them until told to stop, then sends how many
    pushes, and how many bytes, they were sent."""
    asyncio.run(_hold(url, cookie, count, parent))


async def _decide_over_socket(ws_url: str, approver: _Person, call_id: str) -> tuple[float, float]:
    """Open the call's socket, approve once the first state is there: (seconds from opening
    to the first state, seconds from sending the approval to the final state). The socket is
    read while the approval request is under way, as the agent reads it: the final state
    comes before the approval's answer."""
    opening = time.perf_counter()
    async with connect(
        f"{ws_url}/ws/v1/calls/{call_id}", additional_headers=_bearer(TOKEN), open_timeout=60
    ) as socket:
        first = json.loads(await asyncio.wait_for(socket.recv(), DECISION_TIMEOUT))
        first_state = time.perf_counter() - opening
        assert first["call"]["status"] == "pending", first
        final = asyncio.ensure_future(_approved(socket))
        sent = await approver.approve(call_id)
        return first_state, await asyncio.wait_for(final, DECISION_TIMEOUT) - sent


async def _approved(socket: ClientConnection) -> float:
    """When the socket had the approved state."""
    while True:
        state = json.loads(await socket.recv())
        if state["call"]["status"] == "approved":
            return time.perf_counter()


async def _long_poll(host: str, port: int, call_id: str) -> tuple[float, dict[str, Any]]:
    """One ``GET /wait`` on a connection of its own (as bench/decision_bench.py): when the
    answer arrived, and the state."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"GET /api/v1/calls/{call_id}/wait?timeout=60 HTTP/1.0\r\n"
            f"Host: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    arrived = time.perf_counter()
    head, _, body = answer.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head else b"none"
    if status != b"200":
        raise RuntimeError(f"a long-poll was answered {status.decode(errors='replace')}")
    state: dict[str, Any] = json.loads(body)
    return arrived, state


async def _decide_over_long_poll(url: str, approver: _Person, call_id: str) -> float:
    address = httpx.URL(url)
    poll = asyncio.ensure_future(_long_poll(address.host, address.port or 80, call_id))
    await _parked(approver.http)
    sent = await approver.approve(call_id)
    arrived, state = await asyncio.wait_for(poll, DECISION_TIMEOUT)
    assert state["status"] == "approved", state["status"]
    return arrived - sent


async def _parked(http: httpx.AsyncClient) -> None:
    """Until the server counts the long-poll as waiting (its /metrics gauge), at most
    POLL_PARK seconds. Approving as soon as it parks, as the socket's approval follows its
    first state: after a fixed park the approval request was slowed by the sleeping threads'
    wake-ups, not by the server's work."""
    give_up = time.perf_counter() + POLL_PARK
    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    while time.perf_counter() < give_up:
        answer = await http.get("/metrics", headers=headers)
        if PARKED in answer.text:
            return
        await asyncio.sleep(0.001)


async def _revocation_close(ws_url: str, admin: _Person, token_id: str) -> float | None:
    """Seconds from sending the admin's revocation to the close of the token's open socket."""
    async with connect(
        f"{ws_url}/ws/v1/agent", additional_headers=_bearer(REVOKED_TOKEN), open_timeout=60
    ) as socket:
        sent = time.perf_counter()
        await admin.revoke_token(token_id)
        try:
            # Every held call still arriving is pushed to it until it closes.
            while (left := sent + CLOSE_WAIT - time.perf_counter()) > 0:
                await asyncio.wait_for(socket.recv(), left)
        except ConnectionClosed:
            return time.perf_counter() - sent
        except TimeoutError:
            pass
        return None


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 0.5) * 1e3, 2),
        "p99_ms": round(percentile(values, 0.99) * 1e3, 2),
        "max_ms": round(max(values) * 1e3, 2),
    }


async def _run(
    bench: BenchServer, queue_sockets: int, decisions: int, interval: float, token_id: str
) -> dict[str, Any]:
    url = bench.url
    ws_url = url.replace("http://", "ws://")
    approver = await _Person.log_in(url, "approver")
    admin = await _Person.log_in(url, "root")
    agent = httpx.AsyncClient(base_url=url, headers=_bearer(TOKEN), timeout=60)
    holder_end, our_end = multiprocessing.get_context("spawn").Pipe()
    holder = multiprocessing.get_context("spawn").Process(
        target=_queue_holder, args=(url, approver.cookie, queue_sockets, holder_end)
    )
    holder.start()
    assert holder.pid is not None
    holder_pid = holder.pid
    loop = asyncio.get_running_loop()
    opened_s = await loop.run_in_executor(None, our_end.recv)
    arrived = [0]
    cpu_before = cpu_seconds(bench.pid)
    holder_cpu_before = cpu_seconds(holder_pid)
    began = time.perf_counter()
    arrivals = asyncio.ensure_future(_arrivals(agent, interval, arrived))
    socket_latency: list[float] = []
    first_states: list[float] = []
    poll_latency: list[float] = []
    try:
        for index in range(decisions):
            call_id = await _submit(agent)
            if index % 2 == 0:
                first_state, latency = await _decide_over_socket(ws_url, approver, call_id)
                first_states.append(first_state)
                socket_latency.append(latency)
            else:
                poll_latency.append(await _decide_over_long_poll(url, approver, call_id))
        revoked_close = await _revocation_close(ws_url, admin, token_id)
    finally:
        arrivals.cancel()
        elapsed = time.perf_counter() - began
        cpu = cpu_seconds(bench.pid) - cpu_before
        holder_cpu = cpu_seconds(holder_pid) - holder_cpu_before
        our_end.send("stop")
        pushes, pushed_bytes = await loop.run_in_executor(None, our_end.recv)
        holder.join(30)
        for client in (approver.http, admin.http, agent):
            await client.aclose()
    return {
        "queue_sockets": queue_sockets,
        "queue_sockets_opened_s": round(opened_s, 2),
        "held_calls_arrived": arrived[0],
        "seconds": round(elapsed, 1),
        "queue_pushes_received": pushes,
        "queue_push_bytes_received": pushed_bytes,
        "server_cpu_s": round(cpu, 1),
        # The browser tabs' CPU, on the same machine here (one core of two, say).
        "queue_sockets_reader_cpu_s": round(holder_cpu, 1),
        "websocket": _summary(socket_latency),
        "websocket_first_state": _summary(first_states),
        "long_poll": _summary(poll_latency),
        "revoked_socket_closed_ms": (
            None if revoked_close is None else round(revoked_close * 1e3, 1)
        ),
    }


def _scenario(options: argparse.Namespace, queue_sockets: int) -> dict[str, Any]:
    setup = SETUP.replace("TOKENS", repr((TOKEN, REVOKED_TOKEN))).replace(
        "PASSWORD", repr(PASSWORD)
    )
    with database(options.database_url) as database_url:
        token_id = manage(database_url, "shell", "-c", setup).strip().splitlines()[-1]
        # The cap on one person's sockets is raised so that all of them open: what is measured
        # is what they cost, not the cap that refuses most of them by default.
        extra = {
            "COUNTERSIGN_MAX_SOCKETS_PER_USER": str(max(queue_sockets, 1) + 10),
            "COUNTERSIGN_METRICS_TOKEN": METRICS_TOKEN,
        }
        with server(database_url, extra) as bench:
            return asyncio.run(
                _run(bench, queue_sockets, options.decisions, options.interval, token_id)
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queue-sockets", type=int, default=300)
    parser.add_argument("--decisions", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between held calls")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    options = parser.parse_args()
    runs = [_scenario(options, count) for count in (0, options.queue_sockets)]
    print(
        json.dumps(
            {
                "benchmark": "queue_sockets",
                "database": "postgresql" if options.database_url else "sqlite",
                "held_call_interval_s": options.interval,
                "runs": runs,
                "targets": {"p50_ms": 5, "p99_ms": 20, "revoked_socket_closed_ms": 1000},
            }
        )
    )


if __name__ == "__main__":
    main()
