"""The agent API's latency with and without a dozen clients failing to log in as fast as they
can, side by side in one run; prints one JSON object.

Each guesser is a browser at ``/accounts/login/``: the form's CSRF token, then wrong passwords
for a new username each time, so that every attempt hashes a password (PBKDF2) and none is
locked out. Meanwhile ``--agents`` agents submit calls (``POST /api/v1/calls``, the allow
path) and read them back (``GET /api/v1/calls?limit=1``), one request after another each.
Rounds alternate quiet and guessed-at; the median round of each is kept. Besides latency,
the loaded side reports how many logins the server answered a second.

Usage: python bench/login_bench.py [--guessers 12] [--agents 1] [--seconds 10] [--rounds 3]
                                   [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
import uuid
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
from django.contrib.auth.models import User
User.objects.create_user("approver", password="bench-pw")
"""
)
BODY = json.dumps({"tool": "read_file", "arguments": '{"path": "notes.txt"}'}).encode()
HEADERS = {"Authorization": "Bearer cs_bench", "Content-Type": "application/json"}
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
LOGIN = "/accounts/login/"
TIMEOUT = 60  # seconds for one request: a guard, far beyond any figure here


async def _guess(target: BenchServer, stop: float, answered: list[float]) -> None:
    """One browser failing to log in until ``stop``; each answer's latency in ``answered``."""
    async with httpx.AsyncClient(base_url=target.url, timeout=TIMEOUT) as browser:
        page = await browser.get(LOGIN)
        token = CSRF_INPUT.search(page.text)
        assert token is not None, "no CSRF token on the login page"
        while time.perf_counter() < stop:
            started = time.perf_counter()
            response = await browser.post(
                LOGIN,
                data={
                    "username": f"guess-{uuid.uuid4().hex}",
                    "password": "wrong",
                    "csrfmiddlewaretoken": token[1],
                },
            )
            assert response.status_code == 200, response.status_code
            answered.append(time.perf_counter() - started)


REQUESTS = (
    ("submit", "POST", "/api/v1/calls", BODY, 201),
    ("read", "GET", "/api/v1/calls?limit=1", None, 200),
)


async def _agent(http: httpx.AsyncClient, stop: float, latencies: dict[str, list[float]]) -> int:
    """Submit and read back until ``stop``; how many answers were not the expected ones."""
    failures = 0
    while time.perf_counter() < stop:
        for kind, method, path, body, expected in REQUESTS:
            started = time.perf_counter()
            response = await http.request(method, path, content=body)
            latencies[kind].append(time.perf_counter() - started)
            failures += response.status_code != expected
    return failures


async def _round(
    target: BenchServer, *, agents: int, guessers: int, seconds: float
) -> dict[str, float]:
    cpu_before = cpu_seconds(target.pid)
    latencies: dict[str, list[float]] = {kind: [] for kind, *_ in REQUESTS}
    logins: list[float] = []
    limits = httpx.Limits(max_connections=agents, max_keepalive_connections=agents)
    async with httpx.AsyncClient(
        base_url=target.url, headers=HEADERS, limits=limits, timeout=TIMEOUT
    ) as http:
        start = time.perf_counter()
        stop = start + seconds
        guessing = [asyncio.ensure_future(_guess(target, stop, logins)) for _ in range(guessers)]
        if guessers:
            await asyncio.sleep(1.0)  # the guessers' first hashes are under way
        failures = sum(
            await asyncio.gather(*(_agent(http, stop, latencies) for _ in range(agents)))
        )
        await asyncio.gather(*guessing)
        elapsed = time.perf_counter() - start
    every = [latency for kind in latencies.values() for latency in kind]
    figures = {
        "requests": len(every),
        "failures": failures,
        "p50_ms": percentile(every, 0.50) * 1e3,
        "p99_ms": percentile(every, 0.99) * 1e3,
        "max_ms": max(every) * 1e3,
        "server_cpu_share": (cpu_seconds(target.pid) - cpu_before) / elapsed,
    }
    for kind, kept in latencies.items():
        figures[f"{kind}_p50_ms"] = percentile(kept, 0.50) * 1e3
        figures[f"{kind}_p99_ms"] = percentile(kept, 0.99) * 1e3
    if guessers:
        figures["logins_per_second"] = len(logins) / elapsed
        figures["login_p50_ms"] = percentile(logins, 0.50) * 1e3
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--guessers", type=int, default=12)
    parser.add_argument("--agents", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0, help="per round and side")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median kept)")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    options = parser.parse_args()
    quiet: list[dict[str, float]] = []
    guessed: list[dict[str, float]] = []
    with database(options.database_url) as database_url:
        manage(database_url, "shell", "-c", SETUP)
        with server(database_url) as target:
            asyncio.run(_round(target, agents=options.agents, guessers=0, seconds=1.0))  # warm up
            for _ in range(options.rounds):
                for guessers, kept in ((0, quiet), (options.guessers, guessed)):
                    kept.append(
                        asyncio.run(
                            _round(
                                target,
                                agents=options.agents,
                                guessers=guessers,
                                seconds=options.seconds,
                            )
                        )
                    )
    quiet_median, guessed_median = median_round(quiet), median_round(guessed)
    result = {
        "benchmark": "login",
        "database": "postgresql" if options.database_url else "sqlite",
        "agents": options.agents,
        "guessers": options.guessers,
        "quiet": quiet_median,
        "guessed_at": guessed_median,
        "p50_ratio": guessed_median["p50_ms"] / quiet_median["p50_ms"],
        "p99_ratio": guessed_median["p99_ms"] / quiet_median["p99_ms"],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
