"""Helpers for the scale-out and reliability tests: a world on the test database, several
server workers (``tests.live``), a private Redis that a test may kill and restart, and bounded
waits.

Every wait here has a timeout: a test that would hang fails instead.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from django.db import connection

from approvals.models import Agent
from tests.factories import agent_with_token
from tests.live import LiveServer, free_port, start_server

APPROVER, PASSWORD = "alice", "correct horse battery staple"
# Servers started here never rate-limit: some tests submit hundreds of calls from one agent,
# and with Redis the limiter's counters would outlive the test database.
NO_RATE_LIMIT = {"COUNTERSIGN_RATE_LIMIT": "0"}


# --- the world ----------------------------------------------------------------------------


def token_for(name: str) -> str:
    return f"cs_scale-{name}-0123456789abcdef"


def agent_create(name: str, *, mode: str = "danger_full_access") -> tuple[Agent, str]:
    """An agent acting for principal ``carol`` and its token, known from its name."""
    return agent_with_token(token=token_for(name), name=name, mode=mode)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- what the database and Redis are -------------------------------------------------------


def is_postgresql() -> bool:
    return connection.vendor == "postgresql"


def redis_reachable(url: str) -> bool:
    if not url:
        return False
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


# --- servers ------------------------------------------------------------------------------


@contextmanager
def workers(count: int, extra_env: dict[str, str] | None = None) -> Iterator[list[LiveServer]]:
    """``count`` server processes on the test database, each on its own port."""
    env = {**NO_RATE_LIMIT, **(extra_env or {})}
    with ExitStack() as stack:
        servers = []
        for _ in range(count):
            server = start_server(extra_env=env)
            stack.callback(server.stop)
            servers.append(server)
        yield servers


def restart_on(port: int, extra_env: dict[str, str] | None = None) -> LiveServer:
    """A new server on ``port`` (a killed one's), retrying while the port is still taken."""
    env = {**NO_RATE_LIMIT, **(extra_env or {})}
    deadline = time.monotonic() + 20
    while True:
        try:
            return start_server(port=port, extra_env=env)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def established_connections(port: int) -> int:
    """Established TCP connections whose local port is ``port``: the server's side of each
    client connected to a server listening there (Linux ``/proc/net/tcp``)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# --- a private Redis ----------------------------------------------------------------------


class PrivateRedis:
    """A ``redis-server`` of this test's own on a free port, without persistence, that the
    test may kill and start again on the same port."""

    def __init__(self, log_dir: Path) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise FileNotFoundError("redis-server is not on PATH")
        self.executable = executable
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = log_dir / f"redis-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    self.executable,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--daemonize",
                    "no",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while not redis_reachable(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server did not start:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL, and wait until the port no longer answers."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def answers(self) -> bool:
        with socket.socket() as probe:
            probe.settimeout(0.5)
            return probe.connect_ex(("127.0.0.1", self.port)) == 0


@contextmanager
def private_redis(log_dir: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(log_dir)
    server.start()
    try:
        yield server
    finally:
        server.kill()


# --- threads ------------------------------------------------------------------------------


def run_threads(count: int, target: Callable[[int], Any], timeout: float) -> list[Any]:
    """``target(i)`` in ``count`` threads released together; their results in order. Any
    exception, or a thread still running after ``timeout`` seconds, fails the test."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []
    start = threading.Barrier(count, timeout=timeout)

    def run(index: int) -> None:
        try:
            start.wait()
            results[index] = target(index)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = sum(thread.is_alive() for thread in threads)
    assert alive == 0, f"{alive} threads still running after {timeout} s"
    assert errors == [], errors[:3]
    return results


def http_client(server: LiveServer, token: str, *, timeout: float = 30) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=bearer(token), timeout=timeout)
