"""The MCP gateway's added latency: p50/p99 of an allowed ``tools/call`` through
``countersign mcp proxy`` and of the same call to the upstream alone, side by side in one run
on one machine, interleaved so that both see the same load (JSON on stdout).

Both are stdio sessions of the test bank (tests/countersign/mcp_upstream.py); the proxy asks a
live Countersign server (bench/_server.py, a fresh database) before each call, for an agent
whose mode lets the call go. The target: at most 5 ms added at p50 (docs/integrations.md).

Usage: python bench/mcp_proxy_bench.py [--calls 500] [--database-url URL]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from countersign import AsyncClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import AGENT_SETUP, database, manage, server

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "countersign" / "mcp_upstream.py"
ARGUMENTS = {"account": "ACME"}
TOKEN = "cs_bench"
SETUP = AGENT_SETUP


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50_ms": round(cuts[49] * 1000, 3), "p99_ms": round(cuts[98] * 1000, 3)}


async def _measure(
    proxy: StdioServerParameters, upstream: StdioServerParameters, calls: int
) -> dict[str, Any]:
    times: dict[str, list[float]] = {"upstream": [], "proxy": [], "submit": []}
    countersign = AsyncClient(proxy.env["COUNTERSIGN_URL"], TOKEN) if proxy.env else None
    assert countersign is not None
    async with (
        stdio_client(proxy) as proxy_streams,
        ClientSession(*proxy_streams) as through,
        stdio_client(upstream) as upstream_streams,
        ClientSession(*upstream_streams) as direct,
    ):
        sessions = {"proxy": through, "upstream": direct}
        for session in sessions.values():
            await session.initialize()
            await session.list_tools()
            for _ in range(20):  # warm up both paths, the proxy's connections included
                await session.call_tool("balance", ARGUMENTS)
        for _ in range(calls):
            for name, session in sessions.items():
                started = time.perf_counter()
                result = await session.call_tool("balance", ARGUMENTS)
                times[name].append(time.perf_counter() - started)
                assert not result.is_error, result
            # The share of it that is Countersign's own: the submit the proxy makes.
            started = time.perf_counter()
            await countersign.submit("balance", ARGUMENTS, context="bench")
            times["submit"].append(time.perf_counter() - started)
    await countersign.aclose()
    proxy_times, upstream_times = _percentiles(times["proxy"]), _percentiles(times["upstream"])
    submit_times = _percentiles(times["submit"])
    added = proxy_times["p50_ms"] - upstream_times["p50_ms"]
    return {
        "calls": calls,
        "upstream": upstream_times,
        "proxy": proxy_times,
        "countersign_submit": submit_times,
        "added_p50_ms": round(added, 3),
        "added_p99_ms": round(proxy_times["p99_ms"] - upstream_times["p99_ms"], 3),
        # What the proxy adds besides waiting for Countersign's answer: the second hop.
        "added_p50_ms_besides_submit": round(added - submit_times["p50_ms"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--database-url", help="PostgreSQL to use (default: a SQLite file)")
    options = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as scratch,
        database(options.database_url) as database_url,
    ):
        manage(database_url, "shell", "-c", SETUP)
        with server(database_url) as target:
            log = str(Path(scratch) / "upstream.jsonl")
            env = {
                **os.environ,
                "COUNTERSIGN_URL": target.url,
                "COUNTERSIGN_TOKEN": TOKEN,
                "MCP_UPSTREAM_LOG": log,
            }
            proxy = StdioServerParameters(
                command=sys.executable,
                args=["-m", "countersign", "mcp", "proxy", "--", sys.executable, str(UPSTREAM)],
                env=env,
            )
            upstream = StdioServerParameters(
                command=sys.executable, args=[str(UPSTREAM)], env={"MCP_UPSTREAM_LOG": log}
            )
            report = anyio.run(_measure, proxy, upstream, options.calls)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
