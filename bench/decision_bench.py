"""Decision latency and many waiters; prints one JSON object on its last line.

N agents wait on N held calls — half on the WebSocket, half on the long-poll — against one
server process (or, with --redis, wait on one worker while decisions are made on another).
Then the calls are approved through the approver's own form (POST /calls/<id>/approve with a
logged-in session and CSRF):

- ``--mode latency`` approves them one by one and measures, per call, from the moment the
  approval request is sent (its first byte written to the socket) to the moment the waiting
  agent has the final state; ``client_p50_ms`` is what httpx spent before that, building the
  request in the bench's own process (a browser's click is not slowed by it);
- ``--mode bulk`` sends every approval at once and measures the time until every agent has
  its final state.

While all agents wait, it reads the server's thread count and resident memory from /proc.

``--request htmx`` sends the approve button's htmx request (``HX-Request``, answered with the
call's re-rendered partial) instead of the plain form's POST (answered ``303``).
``--request batch`` approves through the queue's "Approve selected" (``POST /calls/decide``,
``--batch`` calls a request, answered ``303``); each call's latency is measured from its
batch's request.

Usage: python bench/decision_bench.py [--agents 1000] [--mode latency|bulk] [--redis URL]
       [--request form|htmx|batch] [--batch 100]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import (
    AGENT_SETUP,
    BenchServer,
    database,
    latency_summary,
    manage,
    on_sent,
    percentile,
    server,
)

ARGUMENTS = '{"amount": "600.00"}'
SETUP = (
    AGENT_SETUP
    + """
import uuid
from datetime import timedelta
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from approvals.models import Call
user = User.objects.create_user("approver", password="bench-pw")
user.user_permissions.add(Permission.objects.get(codename="decide_call"))
now = timezone.now()
reason = {"policy": "cap", "rule": "big", "action": "gate", "gate": "", "message": "bench"}
Call.objects.bulk_create(
    Call(agent=agent, tool="pay", arguments=ARGS,
         arguments_sha256=hashlib.sha256(ARGS.encode()).hexdigest(), principal="bench-user",
         status="pending", reasons=[reason], gates=[""], created_at=now,
         updated_at=now, expires_at=now + timedelta(hours=2))
    for _ in range(COUNT)
)
print(",".join(str(pk) for pk in Call.objects.values_list("pk", flat=True)))
"""
)
APPROVER_CONNECTIONS = 32  # a bulk approval's requests in flight at once
DELIVERY_TIMEOUT = 120  # seconds without progress before the bench gives up
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
DIGEST = hashlib.sha256(ARGUMENTS.encode()).hexdigest()
HEADERS = {"Authorization": "Bearer cs_bench"}


def _proc_status(pid: int) -> dict[str, int]:
    fields = dict(
        line.split(":", 1)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    )
    return {
        "threads": int(fields["Threads"].strip()),
        "rss_mb": int(fields["VmRSS"].split()[0]) // 1024,
        "peak_rss_mb": int(fields["VmHWM"].split()[0]) // 1024,
    }


async def _login(http: httpx.AsyncClient) -> str:
    page = await http.get("/accounts/login/")
    token = CSRF_INPUT.search(page.text)
    assert token is not None
    answer = await http.post(
        "/accounts/login/",
        data={"username": "approver", "password": "bench-pw", "csrfmiddlewaretoken": token[1]},
    )
    assert answer.status_code == 302, answer.status_code
    # Logging in rotates the CSRF secret; the new cookie's value is a valid form token too.
    return str(http.cookies["csrftoken"])


async def _socket_waiter(
    ws_url: str, call_id: str, ready: asyncio.Event, done: dict[str, float], dropped: list[str]
) -> None:
    """Waits on the call's socket. A socket dropped without a close frame is opened again,
    as the client package does (every connect starts with the current state), and counted:
    the bench fails only if that happens twice to one agent."""
    for attempt in range(2):
        try:
            async with connect(
                f"{ws_url}/ws/v1/calls/{call_id}", additional_headers=HEADERS, open_timeout=60
            ) as socket:
                # The current state first (approved if decided while this agent reconnected),
                # then every change.
                async for raw in socket:
                    ready.set()
                    if json.loads(raw)["call"]["status"] == "approved":
                        done[call_id] = time.perf_counter()
                        return
            raise RuntimeError(f"a socket closed before its decision ({socket.close_code})")
        except ConnectionClosedError:
            if attempt:
                raise
            dropped.append(call_id)


async def _long_poll(host: str, port: int, call_id: str) -> dict[str, Any]:
    """One ``GET /wait`` on a connection of its own, with asyncio's streams. (httpx's pool
    looks through its connections for every request: with thousands parked at once, the
    bench's own process, not the server, was what ran out of CPU.) HTTP/1.0, so the answer
    ends where the server closes the connection."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"GET /api/v1/calls/{call_id}/wait?timeout=60 HTTP/1.0\r\n"
            f"Host: {host}:{port}\r\nAuthorization: {HEADERS['Authorization']}\r\n\r\n".encode()
        )
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head else b"none"
    if status != b"200":
        raise RuntimeError(f"a long-poll was answered {status.decode(errors='replace')}")
    state: dict[str, Any] = json.loads(body)
    return state


async def _poll_waiter(
    url: str, call_id: str, ready: asyncio.Event, done: dict[str, float]
) -> None:
    address = httpx.URL(url)
    ready.set()
    while True:
        state = await _long_poll(address.host, address.port or 80, call_id)
        if state["status"] == "approved":
            done[call_id] = time.perf_counter()
            return


async def _until(condition: Callable[[], bool], failures: list[BaseException]) -> None:
    """Wait for ``condition``; fail at once if a waiting agent failed (else the bench would
    wait for ever for an agent that is gone), and after DELIVERY_TIMEOUT seconds."""
    give_up = time.perf_counter() + DELIVERY_TIMEOUT
    while not condition():
        if failures:
            raise RuntimeError("a waiting agent failed") from failures[0]
        if time.perf_counter() > give_up:
            raise TimeoutError(f"no progress in {DELIVERY_TIMEOUT} s")
        await asyncio.sleep(0.0005)


def _note_failure(failures: list[BaseException]) -> Callable[[asyncio.Task[None]], None]:
    def note(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            failures.append(task.exception())  # type: ignore[arg-type]

    return note


async def _run(
    waiting: BenchServer, decide_url: str, call_ids: list[str], mode: str, request: str, batch: int
) -> dict[str, Any]:
    url = waiting.url
    ws_url = url.replace("http://", "ws://")
    async with (
        httpx.AsyncClient(
            base_url=decide_url,
            timeout=60,
            limits=httpx.Limits(max_connections=APPROVER_CONNECTIONS),
        ) as approver,
    ):
        csrf = await _login(approver)
        done: dict[str, float] = {}
        dropped: list[str] = []
        ready = [asyncio.Event() for _ in call_ids]
        sockets = set(call_ids[: len(call_ids) // 2])
        waiters = [
            asyncio.create_task(
                _socket_waiter(ws_url, call_id, ready[i], done, dropped)
                if call_id in sockets
                else _poll_waiter(url, call_id, ready[i], done)
            )
            for i, call_id in enumerate(call_ids)
        ]
        failures: list[BaseException] = []
        for waiter in waiters:
            waiter.add_done_callback(_note_failure(failures))
        all_ready = asyncio.ensure_future(asyncio.gather(*(event.wait() for event in ready)))
        await _until(all_ready.done, failures)
        await asyncio.sleep(1.0)  # let the last long-polls reach the server and park
        parked = _proc_status(waiting.pid)
        called: dict[str, float] = {}
        sent: dict[str, float] = {}

        retried: list[str] = []
        # A bulk approval's requests wait their turn here, not in httpx's pool, which looks
        # through every queued request each time a connection frees up.
        in_flight = asyncio.Semaphore(APPROVER_CONNECTIONS)

        async def approve(ids: list[str]) -> None:
            async with in_flight:
                await _approve_once(ids)

        async def _approve_once(ids: list[str]) -> None:
            called.update(dict.fromkeys(ids, time.perf_counter()))
            if request == "batch":
                path = "/calls/decide"
                data: dict[str, Any] = {
                    "csrfmiddlewaretoken": csrf,
                    "verb": "approve",
                    "comment": "",
                    "call": [f"{call_id}:{DIGEST}" for call_id in ids],
                }
                headers = {"Referer": f"{decide_url}/"}
            else:
                path = f"/calls/{ids[0]}/approve"
                data = {"csrfmiddlewaretoken": csrf, "arguments_sha256": DIGEST, "comment": ""}
                headers = {"Referer": f"{decide_url}/calls/{ids[0]}/"}
            if request == "htmx":
                headers["HX-Request"] = "true"
            for attempt in range(2):
                try:
                    answer = await approver.post(
                        path,
                        data=data,
                        headers=headers,
                        extensions=on_sent(lambda moment: sent.update(dict.fromkeys(ids, moment))),
                    )
                except httpx.TransportError:
                    # A kept-alive connection the server had just closed: send it once more,
                    # and count it. On the retry, 409 means the first attempt was recorded.
                    if attempt:
                        raise
                    retried.extend(ids)
                    continue
                assert answer.status_code == (200 if request == "htmx" else 303) or (
                    attempt and answer.status_code == 409
                ), answer.status_code
                return

        size = batch if request == "batch" else 1
        groups = [call_ids[start : start + size] for start in range(0, len(call_ids), size)]
        began = time.perf_counter()
        if mode == "bulk":
            await asyncio.gather(*(approve(ids) for ids in groups))
        else:
            for ids in groups:
                await approve(ids)
                # One request at a time: its agents have it before the next.
                await _until(lambda: all(i in done for i in ids), failures)  # noqa: B023
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=DELIVERY_TIMEOUT)
        finished = time.perf_counter()
    latency = {call_id: done[call_id] - sent[call_id] for call_id in call_ids}

    def summary(ids: list[str]) -> dict[str, float]:
        return latency_summary([latency[i] for i in ids])

    return {
        "while_waiting": parked,
        "all_delivered_s": finished - began,
        "approvals_resent": len(retried),
        "client_p50_ms": percentile([sent[i] - called[i] for i in call_ids], 0.5) * 1e3,
        "sockets_reopened": len(dropped),
        "websocket": summary([i for i in call_ids if i in sockets]),
        "long_poll": summary([i for i in call_ids if i not in sockets]),
        "after": _proc_status(waiting.pid),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--mode", choices=["latency", "bulk"], default="latency")
    parser.add_argument("--request", choices=["form", "htmx", "batch"], default="form")
    parser.add_argument("--batch", type=int, default=100, help="calls per POST /calls/decide")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument(
        "--redis", default=None, help="REDIS_URL: agents wait on one worker, decisions on another"
    )
    options = parser.parse_args()
    setup = SETUP.replace("ARGS", repr(ARGUMENTS)).replace("COUNT", str(options.agents))
    with database(options.database_url) as database_url:
        call_ids = manage(database_url, "shell", "-c", setup).strip().splitlines()[-1].split(",")
        # Every waiting agent is the agent ``bench``: its sockets may not be capped below them.
        extra = {"COUNTERSIGN_MAX_SOCKETS_PER_AGENT": str(options.agents)}
        if options.redis:
            extra["REDIS_URL"] = options.redis
        with server(database_url, extra) as waiting:
            if options.redis:
                with server(database_url, extra) as deciding:
                    result = asyncio.run(
                        _run(
                            waiting,
                            deciding.url,
                            call_ids,
                            options.mode,
                            options.request,
                            options.batch,
                        )
                    )
            else:
                result = asyncio.run(
                    _run(
                        waiting, waiting.url, call_ids, options.mode, options.request, options.batch
                    )
                )
    print(
        json.dumps(
            {
                "benchmark": "decision",
                "mode": options.mode,
                "request": options.request,
                **({"batch": options.batch} if options.request == "batch" else {}),
                "agents": options.agents,
                "workers": 2 if options.redis else 1,
                "database": "postgresql" if options.database_url else "sqlite",
                **result,
                "targets": {
                    "p50_ms": 5,
                    "p99_ms": 20,
                    "threads_at_1000": 32,
                    "peak_rss_mb_at_5000": 512,
                    "peak_rss_mb_at_10000": 1024,
                    "all_delivered_s_at_5000_batch": 10,
                },
            }
        )
    )


if __name__ == "__main__":
    main()
