"""A real HTTP server on a local port that plays the agent API slowly: each step — the
submit, the call socket's handshake, the long-poll, the cancel — either answers at once,
dribbles its answer a byte a second (each byte well within any read timeout), or reads the
request and never answers. The clients' deadlines are tested against it."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.receivers import serve_each_connection

CALL_ID = "5f0c2d1e-0000-4000-8000-000000000000"
PENDING: dict[str, Any] = {
    "id": CALL_ID,
    "status": "pending",
    "tool": "Bash",
    "gates": [""],
    "reasons": [{"rule": "", "message": "Bash is a dangerous tool"}],
}
CANCELLED: dict[str, Any] = {**PENDING, "status": "cancelled"}
APPROVED: dict[str, Any] = {**PENDING, "status": "approved", "decision": {"by": "alice"}}
PAUSE = 1.0  # between two dribbled bytes

Step = Literal["answer", "dribble", "silent"]
SUBMIT, SOCKET, WAIT, CANCEL, READ = "submit", "socket", "wait", "cancel", "read"
CALL = re.compile(r"^/api/v1/calls/[^/]+$")


def response(status: str, state: dict[str, Any]) -> bytes:
    body = json.dumps(state).encode()
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}"
    return head.encode() + b"\r\n\r\n" + body


# What each step answers by default when it answers: the call held, the socket refused (so the
# client long-polls), the call still pending, and cancelled.
ANSWERS = {
    SUBMIT: response("201 Created", PENDING),
    SOCKET: b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
    WAIT: response("200 OK", PENDING),
    CANCEL: response("200 OK", CANCELLED),
    READ: response("200 OK", CANCELLED),
}
# A cancel of a call that is final already.
ALREADY_FINAL = response(
    "409 Conflict", {"error": {"code": "already_final", "message": "The call is final."}}
)


@dataclass
class SlowService:
    url: str
    steps: dict[str, Step]
    answers: dict[str, bytes]
    asked: list[str] = field(default_factory=list)  # the steps, in the order they were asked


def step_of(method: str, path: str) -> str:
    if path.startswith("/ws/"):
        return SOCKET
    if path.endswith("/wait"):
        return WAIT
    if path.endswith("/cancel"):
        return CANCEL
    if method == "GET" and CALL.match(path):
        return READ
    return SUBMIT


@contextmanager
def slow_service(
    steps: dict[str, Step], *, answers: dict[str, bytes] | None = None
) -> Iterator[SlowService]:
    """A server whose named steps (``submit``, ``socket``, ``wait``, ``cancel``, ``read``)
    dribble or stay silent as ``steps`` says; the others answer at once, with ``answers`` in
    place of the defaults."""
    listener = socket.create_server(("127.0.0.1", 0))
    service = SlowService(
        f"http://127.0.0.1:{listener.getsockname()[1]}",
        {name: steps.get(name, "answer") for name in ANSWERS},
        {**ANSWERS, **(answers or {})},
    )
    stop = threading.Event()

    def serve(conn: socket.socket, port: int) -> None:
        with conn, conn.makefile("rb") as reader:
            while lines := list(iter(lambda: reader.readline().rstrip(b"\r\n"), b"")):
                method, path, _ = lines[0].decode("latin-1").split(" ", 2)
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in lines
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                reader.read(length)
                step = step_of(method, path.split("?", 1)[0])
                service.asked.append(step)
                answer = service.answers[step]
                try:
                    if service.steps[step] == "answer":
                        conn.sendall(answer)
                        continue
                    if service.steps[step] == "silent":
                        stop.wait()
                        return
                    for byte in answer:
                        conn.sendall(bytes([byte]))
                        if stop.wait(PAUSE):
                            return
                except OSError:  # the client gave up and closed the connection
                    return

    serve_each_connection(listener, serve)
    try:
        yield service
    finally:
        stop.set()
        listener.close()
