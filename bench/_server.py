"""Start and stop what a benchmark needs on loopback: a fresh database, the server
(config/serve.py)."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import dj_database_url
import httpx
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
# The start of every benchmark's setup script (run by ``manage.py shell -c``): the agent
# ``bench``, whose token is ``cs_bench``, in a mode that lets the rules decide.
AGENT_SETUP = """
import hashlib
from approvals.models import Agent, AgentToken
agent = Agent.objects.create(name="bench", principal="bench-user", mode="danger_full_access")
digest = hashlib.sha256(b"cs_bench").hexdigest()
AgentToken.objects.create(agent=agent, digest=digest, prefix="cs_bench")
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env(database_url: str, extra: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": database_url,
        "COUNTERSIGN_RATE_LIMIT": "0",
        "DEBUG": "0",
        **extra,
    }


def manage(database_url: str, *args: str, extra: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_env(database_url, extra or {}),
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def _create_postgresql_database(url: str) -> None:
    """Create the URL's PostgreSQL database if it is not there (a fresh machine has none)."""
    settings = dj_database_url.parse(url)
    if settings["ENGINE"] != "django.db.backends.postgresql":
        return
    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        password=settings["PASSWORD"],
        dbname="postgres",
        autocommit=True,
    ) as maintenance:
        name = settings["NAME"]
        if maintenance.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return
        maintenance.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@contextmanager
def database(url: str | None) -> Iterator[str]:
    """A migrated, empty database: a temporary SQLite file, or the given URL flushed (and
    created first if it is a PostgreSQL database that does not exist)."""
    with tempfile.TemporaryDirectory() as folder:
        database_url = url or f"sqlite:///{folder}/bench.sqlite3"
        if url:
            _create_postgresql_database(url)
        manage(database_url, "migrate", "--noinput", "-v0")
        manage(database_url, "collectstatic", "--noinput", "-v0")  # the pages need the manifest
        if url:
            manage(database_url, "flush", "--noinput")
            manage(database_url, "migrate", "--noinput", "-v0")
        yield database_url


class BenchServer(NamedTuple):
    url: str
    pid: int  # the server process, for its CPU time, threads and memory


@contextmanager
def server(database_url: str, extra: dict[str, str] | None = None) -> Iterator[BenchServer]:
    """A server process serving the app."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "config.serve", "--port", str(port), "--no-access-log"],
        cwd=ROOT,
        env=_env(database_url, {"COUNTERSIGN_BENCH": "1", **(extra or {})}),
        stdout=subprocess.DEVNULL,
        stderr=None,  # the server's errors show in the bench's own stderr
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/api/v1/currencies", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the benchmark server did not start") from None
                time.sleep(0.1)
        yield BenchServer(url, process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def on_sent(sent: Callable[[float], None]) -> dict[str, Any]:
    """httpx's ``extensions`` calling ``sent`` with the moment the request's first byte is
    written: a decision's latency is measured from there, not from the call into httpx."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event == "http11.send_request_headers.started":
            sent(time.perf_counter())

    return {"trace": trace}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency_summary(seconds: list[float]) -> dict[str, float]:
    """How many, and the p50 and p99 in milliseconds, of latencies given in seconds."""
    return {
        "count": len(seconds),
        "p50_ms": percentile(seconds, 0.5) * 1e3,
        "p99_ms": percentile(seconds, 0.99) * 1e3,
    }


def median_round(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds."""
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
