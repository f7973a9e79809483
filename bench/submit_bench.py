"""Submit overhead: POST /api/v1/calls on the allow path against a bare async Django JSON
endpoint on the same server and settings, side by side in one run; prints one JSON object.

The allow path: 10 cap rules of which 2 apply to the tool (one `max`, one `sum` ledger per
principal per day), an agent whose mode lets caps decide. Besides throughput and latency,
each side reports the server process's CPU time per request, and their ratio.

Usage: python bench/submit_bench.py [--clients 32] [--seconds 5] [--rounds 3] [--database-url URL]
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
BODY = json.dumps({"tool": "pay", "arguments": '{"amount": "12.50", "payee": "ada"}'}).encode()


async def _load(target: BenchServer, path: str, clients: int, seconds: float) -> dict[str, float]:
    """Requests for ``seconds`` from ``clients`` at once; with the server's CPU time per
    request, which the machine's noise moves less than the throughput."""
    cpu_before = cpu_seconds(target.pid)
    latencies: list[float] = []
    failures = 0
    stop = time.perf_counter() + seconds
    headers = {"Authorization": "Bearer cs_bench", "Content-Type": "application/json"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=target.url, headers=headers, limits=limits, timeout=30
    ) as http:

        async def client() -> None:
            nonlocal failures
            while time.perf_counter() < stop:
                started = time.perf_counter()
                response = await http.post(path, content=BODY)
                if response.status_code != 201:
                    failures += 1
                latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    return {
        "requests": len(latencies),
        "failures": failures,
        "per_second": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.50) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "server_cpu_ms_per_request": (cpu_seconds(target.pid) - cpu_before) / len(latencies) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0, help="per round and endpoint")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median kept)")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    options = parser.parse_args()
    with database(options.database_url) as database_url:
        manage(database_url, "shell", "-c", SETUP)
        with server(database_url) as target:
            asyncio.run(_load(target, "/api/v1/calls", options.clients, 1.0))  # warm up
            bare, submit = [], []
            for _ in range(options.rounds):
                bare.append(
                    asyncio.run(_load(target, "/bench/bare", options.clients, options.seconds))
                )
                submit.append(
                    asyncio.run(_load(target, "/api/v1/calls", options.clients, options.seconds))
                )
    bare_median, submit_median = median_round(bare), median_round(submit)
    result = {
        "benchmark": "submit",
        "database": "postgresql" if options.database_url else "sqlite",
        "clients": options.clients,
        "bare": bare_median,
        "submit": submit_median,
        "throughput_ratio": submit_median["per_second"] / bare_median["per_second"],
        "server_cpu_ratio": bare_median["server_cpu_ms_per_request"]
        / submit_median["server_cpu_ms_per_request"],
        "target_ratio": 0.5,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
