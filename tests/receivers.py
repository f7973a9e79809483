"""Real receivers on local ports for the notification tests: an HTTP server that records
every request (webhooks, Apprise's json:// scheme), an SMTP server (aiosmtpd) that keeps
every message it is handed, and a forward proxy (proxy.py) that webhooks go through."""

from __future__ import annotations

import email
import email.policy
import re
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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
    """Answers each request with ``answer(received) -> (status, headers)``: by default 204,
    with ``body`` (by default none)."""

    url: str
    requests: list[Received] = field(default_factory=list)
    answer: Callable[[Received], tuple[int, dict[str, str]]] = lambda _: (204, {})
    body: bytes = b""
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.requests) >= count, timeout=timeout)
            return list(self.requests)


@contextmanager
def http_receiver(
    *, hang: threading.Event | None = None, tls: ssl.SSLContext | None = None, ipv6: bool = False
) -> Iterator[HttpReceiver]:
    """An HTTP server on 127.0.0.1 (``ipv6``: on ::1); with ``hang``, each request is held
    until it is set; with ``tls``, HTTPS with that server context."""
    host = "::1" if ipv6 else "127.0.0.1"
    port = free_port(host)
    authority = f"[{host}]:{port}" if ipv6 else f"{host}:{port}"
    receiver = HttpReceiver(url=f"{'https' if tls else 'http'}://{authority}")

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
            body = receiver.body
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ipv6 else socket.AF_INET

    server = Server((host, port), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
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
class RawHttpReceiver:
    """Answers the n-th request with ``answers[n]``, bytes written as they are (an answer
    that is not HTTP, or not only HTTP); ``None`` closes the connection unanswered. The
    connection is closed after an answer in ``closing``. Records each request's head (its
    lines, lowercased names) and the sender's port."""

    url: str
    answers: list[bytes | None]
    closing: set[int] = field(default_factory=set)
    heads: list[list[str]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)


def serve_each_connection(
    listener: socket.socket, serve: Callable[[socket.socket, int], None]
) -> None:
    """Accept on ``listener`` until it is closed, each connection served on a thread of its
    own with its peer's port."""

    def accept() -> None:
        while True:
            try:
                conn, address = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn, address[1]), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


@contextmanager
def raw_http_receiver(
    answers: list[bytes | None], closing: frozenset[int] = frozenset()
) -> Iterator[RawHttpReceiver]:
    """A TCP server on 127.0.0.1 that reads HTTP requests and writes scripted answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    receiver = RawHttpReceiver(
        f"http://127.0.0.1:{listener.getsockname()[1]}/hook", answers, set(closing)
    )

    def serve(conn: socket.socket, port: int) -> None:
        with conn, conn.makefile("rb") as reader:
            while len(receiver.heads) < len(receiver.answers):
                lines = []
                while (line := reader.readline()) not in (b"\r\n", b""):
                    lines.append(line.decode("latin-1").rstrip("\r\n"))
                if not lines:
                    return
                length = next(
                    (
                        int(line.split(":", 1)[1])
                        for line in lines
                        if line.lower().startswith("content-length:")
                    ),
                    0,  # a request without a body (a proxy's CONNECT)
                )
                reader.read(length)
                index = len(receiver.heads)
                receiver.heads.append(lines)
                receiver.ports.append(port)
                answer = receiver.answers[index]
                if answer is None:
                    return
                conn.sendall(answer)
                if index in receiver.closing:
                    return

    serve_each_connection(listener, serve)
    try:
        yield receiver
    finally:
        listener.close()


@dataclass
class Dribbler:
    """A server that writes its answers a byte at a time (``dribbling_http_receiver``,
    ``dribbling_smtp_server``): each connection's sender port, the bytes it has written, and
    when (``time.monotonic()``) the sender closed it."""

    url: str
    ports: list[int] = field(default_factory=list)
    written: list[int] = field(default_factory=list)  # bytes written, by connection
    closed_at: list[float] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, predicate: Callable[[Dribbler], bool], timeout: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self), timeout=timeout)

    def connected(self, port: int) -> int:
        with self.changed:
            self.ports.append(port)
            self.written.append(0)
            self.changed.notify_all()
            return len(self.ports) - 1

    def dribble(self, conn: socket.socket, index: int, data: bytes, pause: float) -> bool:
        """Write ``data`` a byte every ``pause`` seconds; False once the sender has gone."""
        for byte in data:
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                return False
            with self.changed:
                self.written[index] += 1
            # A sender that has closed its end shows as readable with nothing to read.
            readable, _, _ = select.select([conn], [], [], pause)
            try:
                if readable and not conn.recv(1, socket.MSG_PEEK):
                    return False
            except OSError:
                return False
        return True

    def gone(self) -> None:
        with self.changed:
            self.closed_at.append(time.monotonic())
            self.changed.notify_all()


# Longer than any attempt of a test, at a byte a second.
ENDLESS = b"y" * 600


@contextmanager
def dribbling_http_receiver(*, pause: float = 1.0) -> Iterator[Dribbler]:
    """An HTTP server on 127.0.0.1 that reads each request and answers it a byte every
    ``pause`` seconds, each byte well within any socket timeout, a head that never ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    receiver = Dribbler(f"http://127.0.0.1:{listener.getsockname()[1]}/hook")

    def serve(conn: socket.socket, port: int) -> None:
        index = receiver.connected(port)
        with conn, conn.makefile("rb") as reader:
            lines = list(iter(lambda: reader.readline().rstrip(b"\r\n"), b""))
            length = next(
                (
                    int(ln.split(b":", 1)[1])
                    for ln in lines
                    if ln.lower().startswith(b"content-length:")
                ),
                0,
            )
            reader.read(length)
            receiver.dribble(conn, index, b"HTTP/1.1 200 OK\r\nx-slow: " + ENDLESS, pause)
        receiver.gone()

    serve_each_connection(listener, serve)
    try:
        yield receiver
    finally:
        listener.close()


@contextmanager
def dribbling_smtp_server(*, pause: float = 1.0) -> Iterator[Dribbler]:
    """An SMTP server on 127.0.0.1 that answers each command as it should, a byte every
    ``pause`` seconds: its greeting alone takes the better part of a minute."""
    listener = socket.create_server(("127.0.0.1", 0))
    receiver = Dribbler(f"smtp://127.0.0.1:{listener.getsockname()[1]}")
    replies = {
        b"EHLO": b"250 slow.example.test\r\n",
        b"HELO": b"250 slow.example.test\r\n",
        b"MAIL": b"250 OK\r\n",
        b"RCPT": b"250 OK\r\n",
        b"DATA": b"354 go ahead\r\n",
        b"QUIT": b"221 bye\r\n",
    }

    def serve(conn: socket.socket, port: int) -> None:
        index = receiver.connected(port)
        with conn, conn.makefile("rb") as reader:
            answer = b"220 slow.example.test ESMTP a byte a second\r\n"
            while receiver.dribble(conn, index, answer, pause):
                line = reader.readline()
                if not line:
                    break
                answer = replies.get(line[:4].upper(), b"502 not here\r\n")
                if line[:4].upper() == b"DATA":
                    receiver.dribble(conn, index, answer, pause)
                    while reader.readline() not in (b".\r\n", b""):
                        pass
                    answer = b"250 accepted\r\n"
        receiver.gone()

    serve_each_connection(listener, serve)
    try:
        yield receiver
    finally:
        listener.close()


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


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate: a server's context that presents it, and the PEM a client
    trusts it by."""

    server: ssl.SSLContext
    pem: str


def self_signed(*, ip: str = "", dns: str = "") -> Certificate:
    """A certificate for the IP address ``ip`` or the host name ``dns``, valid for a day."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip or dns)])
    alternative: x509.GeneralName = (
        x509.IPAddress(ipaddress.ip_address(ip)) if ip else x509.DNSName(dns)
    )
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.NamedTemporaryFile(suffix=".pem") as chain:
        chain.write(pem + key_pem)
        chain.flush()
        server.load_cert_chain(chain.name)
    return Certificate(server=server, pem=pem.decode())


@dataclass(frozen=True)
class ForwardProxy:
    """A proxy.py forward proxy on 127.0.0.1 (``url`` has no credentials) and its log."""

    url: str
    log: Path

    def requests(self, count: int, timeout: float = 10.0) -> list[str]:
        """Each request it passed on, as its access log has it (``CONNECT host:port`` for a
        tunnel, ``POST host:port/path`` for a plain request), once there are ``count`` or the
        time is up: a line is written when the client's connection ends."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.log.read_text().splitlines() if self.log.exists() else []
            found = [match[1] for line in lines if (match := _ACCESS.search(line))]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.02)


_ACCESS = re.compile(r"server\.access_log:\d+ - [^ ]+ - ([A-Z]+ \S+)")


@contextmanager
def forward_proxy(*, basic_auth: str = "") -> Iterator[ForwardProxy]:
    """proxy.py in a process of its own; with ``basic_auth`` (``user:password``) it asks for
    those credentials."""
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "proxy.log"
        command = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", str(port)]
        command += ["--num-workers", "1", "--num-acceptors", "1", "--log-level", "INFO"]
        command += ["--log-file", str(log), *(["--basic-auth", basic_auth] if basic_auth else [])]
        process = subprocess.Popen(command, cwd=folder)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or process.poll() is not None:
                        raise RuntimeError("proxy.py did not start") from None
                    time.sleep(0.05)
            yield ForwardProxy(f"http://127.0.0.1:{port}", log)
        finally:
            process.terminate()
            process.wait(10)
