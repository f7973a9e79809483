"""Real receivers on local ports for the notification tests: an HTTP server that records
every request (webhooks, Apprise's json:// scheme) and an SMTP server (aiosmtpd) that keeps
every message it is handed."""

from __future__ import annotations

import email
import email.policy
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from tests.live import free_port


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    # The sender's end of the connection: requests over one kept-alive connection share it.
    client_port: int = 0


@dataclass
class HttpReceiver:
    """Answers each request with ``answer(received) -> (status, headers)``: by default 204."""

    url: str
    requests: list[Received] = field(default_factory=list)
    answer: Callable[[Received], tuple[int, dict[str, str]]] = lambda _: (204, {})
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.requests) >= count, timeout=timeout)
            return list(self.requests)


@contextmanager
def http_receiver(*, hang: threading.Event | None = None) -> Iterator[HttpReceiver]:
    """An HTTP server on 127.0.0.1; with ``hang``, each request is held until it is set."""
    port = free_port()
    receiver = HttpReceiver(url=f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # connections kept alive, as a real receiver's are

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            got = Received(
                "POST",
                self.path,
                {key.lower(): value for key, value in self.headers.items()},
                self.rfile.read(length),
                self.client_address[1],
            )
            with receiver.arrived:
                receiver.requests.append(got)
                receiver.arrived.notify_all()
            if hang is not None:
                hang.wait(30)
            status, headers = receiver.answer(got)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if hang is not None:
            hang.set()
        server.shutdown()
        server.server_close()


@dataclass
class SmtpReceiver:
    host: str
    port: int
    messages: list[tuple[str, list[str], EmailMessage]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 Message accepted for delivery"


@contextmanager
def smtp_receiver() -> Iterator[SmtpReceiver]:
    """An SMTP server (aiosmtpd) in a thread of the test process, on 127.0.0.1."""
    port = free_port()
    receiver = SmtpReceiver("127.0.0.1", port)
    controller = Controller(receiver, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield receiver
    finally:
        controller.stop()
