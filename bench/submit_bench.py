"""Submit overhead: POST /api/v1/calls on the allow path and on the held path against a
bare async Django JSON endpoint on the same server and settings, side by side in one run
(the three interleaved in each round); prints one JSON object.

The allow path: 10 cap rules of which 2 apply to the tool (one `max`, one `sum` ledger per
principal per day), an agent whose mode lets caps decide. The held path: the same call over
the `max` cap, so the server writes a pending call, its findings and audit, and pushes it to
the queue. Each side sends ``--requests`` after ``--warmup`` untimed ones from ``--clients``
at once; besides throughput and latency it reports the server process's CPU time per
request. Compare held throughput with the tree before a change (docs/performance.md).

Usage: python bench/submit_bench.py [--clients 20] [--requests 500] [--warmup 20]
                                    [--rounds 3] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

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
cap_rule_save(line="per-payment: pay arg=amount max USD 100000.00 -> gate")
cap_rule_save(line="daily: pay arg=amount sum USD 90000000000.00 per day by principal -> gate")
for i in range(8):
    cap_rule_save(line=f"other-{i}: tool_{i} arg=amount max USD {i + 1}00.00 -> gate")
"""
)
ALLOWED = json.dumps({"tool": "pay", "arguments": '{"amount": "12.50", "payee": "ada"}'}).encode()
HELD = json.dumps({"tool": "pay", "arguments": '{"amount": "250000.00", "payee": "ada"}'}).encode()
SIDES = {
    "bare": ("/bench/bare", ALLOWED),
    "allow": ("/api/v1/calls", ALLOWED),
    "held": ("/api/v1/calls", HELD),
}


async def _load(
    target: BenchServer, side: str, clients: int, requests: int, warmup: int
) -> dict[str, float]:
    """``warmup`` requests, then ``requests`` timed ones, from ``clients`` at once; with the
    server's CPU time per timed request, which the machine's noise moves less than the
    throughput."""
    path, body = SIDES[side]
    expected = "pending" if side == "held" else "allowed"
    headers = {"Authorization": "Bearer cs_bench", "Content-Type": "application/json"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=target.url, headers=headers, limits=limits, timeout=30
    ) as http:

        async def send(count: int, latencies: list[float]) -> int:
            failures = 0
            for _ in range(count):
                started = time.perf_counter()
                response = await http.post(path, content=body)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 201 or (
                    side != "bare" and response.json()["status"] != expected
                ):
                    failures += 1
            return failures

        async def round_of(total: int, latencies: list[float]) -> int:
            shares = [total // clients + (i < total % clients) for i in range(clients)]
            return sum(await asyncio.gather(*(send(share, latencies) for share in shares)))

        await round_of(warmup, [])
        latencies: list[float] = []
        cpu_before = cpu_seconds(target.pid)
        began = time.perf_counter()
        failures = await round_of(requests, latencies)
        elapsed = time.perf_counter() - began
        cpu = cpu_seconds(target.pid) - cpu_before
    return {
        "requests": len(latencies),
        "failures": failures,
        "per_second": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.50) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "server_cpu_ms_per_request": cpu / len(latencies) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=500, help="timed, per round and side")
    parser.add_argument("--warmup", type=int, default=20, help="untimed, per round and side")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median kept)")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    options = parser.parse_args()
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    with database(options.database_url) as database_url:
        manage(database_url, "shell", "-c", SETUP)
        with server(database_url) as target:
            for _ in range(options.rounds):
                for side in SIDES:
                    rounds[side].append(
                        asyncio.run(
                            _load(target, side, options.clients, options.requests, options.warmup)
                        )
                    )
    bare, allow, held = (median_round(rounds[side]) for side in SIDES)
    result = {
        "benchmark": "submit",
        "database": "postgresql" if options.database_url else "sqlite",
        "clients": options.clients,
        "bare": bare,
        "allow": allow,
        "held": held,
        "allow_throughput_ratio": allow["per_second"] / bare["per_second"],
        "held_throughput_ratio": held["per_second"] / bare["per_second"],
        "allow_server_cpu_ratio": bare["server_cpu_ms_per_request"]
        / allow["server_cpu_ms_per_request"],
        "held_server_cpu_ratio": bare["server_cpu_ms_per_request"]
        / held["server_cpu_ms_per_request"],
        "targets": {
            "allow_throughput_ratio": 0.8,
            "held_throughput_ratio": 0.6,
            "held_p99_ms": 100,
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
