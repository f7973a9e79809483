"""Webhook notifications: how soon a hold's webhook arrives, and what a webhook channel costs
held submissions; prints one JSON object on its last line.

A threaded ``http.server`` in the bench process is the receiver: it verifies nothing,
records each message's arrival time and ``webhook-id`` and answers 204. The channel is
created with ``manage.py add_channel webhook URL --events call.held`` before the server
starts. Every submission is held: one cap rule, ``max USD 1.00``, under which every submitted
amount (600.00) is over.

1. **Hold to webhook.** ``--holds`` submissions, one at a time, each after the previous
   one's webhook arrived. The hold's commit is approximated by the moment the submit
   response arrives at the client (the commit happens just before the answer is written);
   the latency is the receiver's arrival time minus that, per message, matched to its call
   by the payload's ``data.call.id`` (the first arrival of each ``webhook-id`` counts).
2. **Throughput with and without a channel.** Two server processes, one fresh database each,
   identical but for the webhook channel (set up before the server starts: nothing is
   switched on or off while it runs, and neither phase inherits the other's outbox). Phases
   run in turn, interleaved (none, webhook, none, …); each is 20 warm-up and then
   ``--submissions`` held submissions from ``--clients`` concurrent clients. A webhook phase
   ends when every one of its webhooks has arrived (the time after the last answer is
   ``drain_s``), so no delivery spills into the next phase; the server CPU per request
   includes that drain. Both databases grow by the same number of calls per round; the
   latency part runs last, on the webhook server.

Usage: python bench/notify_bench.py [--holds 1000] [--rounds 2] [--clients 20]
       [--submissions 500] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import (
    AGENT_SETUP,
    BenchServer,
    cpu_seconds,
    database,
    manage,
    median_round,
    percentile,
    server,
)

SETUP = (
    AGENT_SETUP
    + """
from approvals.services.rules import cap_rule_save
cap_rule_save(line="hold-all: pay arg=amount max USD 1.00 -> gate")
"""
)
BODY = json.dumps({"tool": "pay", "arguments": '{"amount": "600.00", "payee": "ada"}'}).encode()
HEADERS = {"Authorization": "Bearer cs_bench", "Content-Type": "application/json"}
WARM_UP = 20
DELIVERY_TIMEOUT = 60.0  # seconds to wait for a webhook before the bench gives up


class Arrivals:
    """What the receiver saw: call id -> first arrival (perf_counter), and duplicates."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.at: dict[str, float] = {}
        self.ids: set[str] = set()
        self.duplicates = 0

    def record(self, webhook_id: str, call_id: str, moment: float) -> None:
        with self.lock:
            if webhook_id in self.ids:
                self.duplicates += 1
                return
            self.ids.add(webhook_id)
            self.at.setdefault(call_id, moment)
            self.lock.notify_all()

    def wait_for(self, call_ids: set[str], timeout: float = DELIVERY_TIMEOUT) -> None:
        with self.lock:
            if not self.lock.wait_for(lambda: call_ids <= self.at.keys(), timeout=timeout):
                missing = len(call_ids - self.at.keys())
                raise TimeoutError(f"{missing} webhooks did not arrive within {timeout} s")


def _receiver(arrivals: Arrivals) -> ThreadingHTTPServer:
    class Receiver(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # connections kept alive, as a real receiver's are

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            moment = time.perf_counter()
            call_id = json.loads(body)["data"]["call"]["id"]
            arrivals.record(self.headers["webhook-id"], str(call_id), moment)
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    receiver.daemon_threads = True
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    return receiver


def _held_id(response: httpx.Response) -> str:
    if response.status_code != 201:
        raise RuntimeError(f"a submission was answered {response.status_code}")
    state = response.json()
    if state["status"] != "pending":
        raise RuntimeError(f"a submission was not held: {state['status']}")
    return str(state["id"])


def _hold_to_webhook(target: BenchServer, arrivals: Arrivals, holds: int) -> dict[str, float]:
    latencies: list[float] = []
    with httpx.Client(base_url=target.url, headers=HEADERS, timeout=30) as http:
        for i in range(WARM_UP + holds):
            response = http.post("/api/v1/calls", content=BODY)
            answered = time.perf_counter()
            call_id = _held_id(response)
            arrivals.wait_for({call_id})
            if i >= WARM_UP:
                latencies.append(arrivals.at[call_id] - answered)
    return {
        "holds": holds,
        "p50_ms": percentile(latencies, 0.50) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "max_ms": max(latencies) * 1e3,
    }


async def _submit(target: BenchServer, clients: int, count: int) -> tuple[list[float], set[str]]:
    latencies: list[float] = []
    call_ids: set[str] = set()
    remaining = count
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=target.url, headers=HEADERS, limits=limits, timeout=30
    ) as http:

        async def client() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                response = await http.post("/api/v1/calls", content=BODY)
                latencies.append(time.perf_counter() - started)
                call_ids.add(_held_id(response))

        await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, call_ids


def _phase(
    target: BenchServer, arrivals: Arrivals | None, clients: int, submissions: int
) -> dict[str, float]:
    _, warm_ids = asyncio.run(_submit(target, clients, WARM_UP))
    if arrivals is not None:
        arrivals.wait_for(warm_ids)
    cpu_before = cpu_seconds(target.pid)
    began = time.perf_counter()
    latencies, call_ids = asyncio.run(_submit(target, clients, submissions))
    finished = time.perf_counter()
    drain = 0.0
    if arrivals is not None:
        arrivals.wait_for(call_ids)
        drain = max(0.0, max(arrivals.at[i] for i in call_ids) - finished)
    return {
        "requests": len(latencies),
        "per_second": len(latencies) / (finished - began),
        "p50_ms": percentile(latencies, 0.50) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "drain_s": drain,
        "server_cpu_ms_per_request": (cpu_seconds(target.pid) - cpu_before) / len(latencies) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--holds", type=int, default=1000, help="holds timed to their webhook")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved throughput rounds")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--submissions", type=int, default=500, help="per phase, after warm-up")
    parser.add_argument(
        "--database-url",
        default=None,
        help="default: temporary SQLite files; a PostgreSQL URL is used for the webhook "
        "server and the same URL with _none appended to its name for the other",
    )
    options = parser.parse_args()
    arrivals = Arrivals()
    receiver = _receiver(arrivals)
    hook_url = f"http://127.0.0.1:{receiver.server_address[1]}/countersign"
    none_url = options.database_url and options.database_url.rstrip("/") + "_none"
    with ExitStack() as stack:
        hook_db = stack.enter_context(database(options.database_url))
        none_db = stack.enter_context(database(none_url))
        for database_url in (hook_db, none_db):
            manage(database_url, "shell", "-c", SETUP)
        manage(hook_db, "add_channel", "webhook", hook_url, "--events", "call.held")
        hooked = stack.enter_context(server(hook_db))
        bare = stack.enter_context(server(none_db))
        none_rounds, hook_rounds = [], []
        for _ in range(options.rounds):
            none_rounds.append(_phase(bare, None, options.clients, options.submissions))
            hook_rounds.append(_phase(hooked, arrivals, options.clients, options.submissions))
        latency = _hold_to_webhook(hooked, arrivals, options.holds)
    receiver.shutdown()
    none_median, hook_median = median_round(none_rounds), median_round(hook_rounds)
    result = {
        "benchmark": "notify",
        "database": "postgresql" if options.database_url else "sqlite",
        "hold_to_webhook": {**latency, "duplicates": arrivals.duplicates},
        "clients": options.clients,
        "submissions": options.submissions,
        "none": none_median,
        "webhook": hook_median,
        "rounds": {"none": none_rounds, "webhook": hook_rounds},
        "throughput_ratio": hook_median["per_second"] / none_median["per_second"],
        "target_ratio": 0.9,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
