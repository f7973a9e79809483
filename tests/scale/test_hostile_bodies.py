"""Bodies sent to hurt a real server process (docs/reliability.md, "Hostile conditions"): a body
over ``COUNTERSIGN_MAX_BODY`` is refused before it is received, one that does not arrive in
``COUNTERSIGN_BODY_TIMEOUT`` seconds is refused then, and what clients declare never grows the
server's memory or disk, while agents go on being answered.

Raw sockets on loopback, because an HTTP client library would send the body it was given
before reading the answer.
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.live import LiveServer
from tests.scale.servers import agent_create, bearer, run_threads, workers

MIB = 1 << 20
GIB = 1 << 30
BODY_TIMEOUT = 2  # seconds, the server's COUNTERSIGN_BODY_TIMEOUT here
# A guard against a hang, well above what a prompt answer takes on a loaded machine.
ANSWER_WITHIN = 10.0
ATTACKERS = 200

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server() -> Iterator[LiveServer]:
    with workers(1, {"COUNTERSIGN_BODY_TIMEOUT": str(BODY_TIMEOUT)}) as (server,):
        yield server


def _head(length: int | None, *, chunked: bool = False) -> bytes:
    lines = ["POST /api/v1/calls HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_WITHIN)


def _status(connection: socket.socket) -> int:
    """The status of the answer: the server must send one, and then close."""
    received = b""
    while b"\r\n" not in received:
        data = connection.recv(4096)
        if not data:
            raise AssertionError(f"closed without an answer after {received!r}")
        received += data
    return int(received.split(b" ", 2)[1])


def _closed(connection: socket.socket) -> bool:
    """Whether the server has closed its side: reads drain to EOF (or a reset) in time."""
    try:
        while connection.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _temp_bytes() -> int:
    return sum(
        path.stat().st_size
        for path in Path(tempfile.gettempdir()).iterdir()
        if path.is_file() and not path.is_symlink()
    )


def _agent_answers(server: LiveServer, token: str) -> int:
    return httpx.get(f"{server.url}/api/v1/calls", headers=bearer(token), timeout=10).status_code


def test_a_declared_400_mib_body_is_refused_before_it_is_sent(server: LiveServer) -> None:
    with _connect(server) as connection:
        connection.sendall(_head(400 * MIB))
        started = time.monotonic()
        assert _status(connection) == 413
        assert time.monotonic() - started < ANSWER_WITHIN
        assert _closed(connection)


def test_a_declared_5_gb_body_with_nothing_sent_is_answered_at_once(server: LiveServer) -> None:
    with _connect(server) as connection:
        connection.sendall(_head(5_000_000_000))
        assert _status(connection) == 413


def test_a_chunked_body_is_cut_off_at_the_limit(server: LiveServer) -> None:
    """No length declared: the server reads up to the limit, answers 413 and closes, while the
    client would go on sending for ever."""
    piece = b"x" * (256 * 1024)
    frame = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    with _connect(server) as connection:
        connection.sendall(_head(None, chunked=True))
        sent = 0
        try:
            while sent < 64 * MIB:  # far past the 1 MiB limit, if nothing stopped it
                connection.sendall(frame)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert sent < 64 * MIB
        assert _status(connection) == 413


def test_a_body_that_does_not_arrive_in_time_is_408(server: LiveServer) -> None:
    with _connect(server) as connection:
        connection.sendall(_head(1000) + b"{")
        started = time.monotonic()
        assert _status(connection) == 408
        assert BODY_TIMEOUT - 0.5 <= time.monotonic() - started < ANSWER_WITHIN
        assert _closed(connection)


def test_200_connections_declaring_2_gib_grow_nothing_and_agents_are_answered(
    server: LiveServer,
) -> None:
    _, token = agent_create("steady")
    rss_before, temp_before = _rss_bytes(server.process.pid), _temp_bytes()
    statuses: list[int] = []
    agent_statuses: list[int] = []
    stop = threading.Event()

    def agent() -> None:
        while not stop.is_set():
            agent_statuses.append(_agent_answers(server, token))

    steady = threading.Thread(target=agent)
    steady.start()

    def attack(_: int) -> int:
        with _connect(server) as connection:
            connection.sendall(_head(2 * GIB))
            # The answer comes before the body: read it first, since a server that closes
            # with unread data resets the connection, which can drop what it had sent.
            status = _status(connection)
            # Closed before all of it went out: as it should be.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                connection.sendall(b"x" * (2 * MIB))
            return status

    try:
        statuses = run_threads(ATTACKERS, attack, timeout=60)
    finally:
        stop.set()
        steady.join(timeout=30)
    assert statuses == [413] * ATTACKERS
    assert agent_statuses
    assert set(agent_statuses) == {200}
    # Nothing the attackers declared or sent was kept: not in memory, not on disk.
    assert _rss_bytes(server.process.pid) - rss_before < 64 * MIB
    assert _temp_bytes() - temp_before < 16 * MIB
    assert _agent_answers(server, token) == 200
