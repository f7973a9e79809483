"""A real ASGI server (config/serve.py: uvicorn) in a child process, on the test database, for
tests that need real sockets: the Python client, the examples and the browser.

The server is another process with its own in-memory channel layer, so tests change state
through HTTP (the API, or the approver's forms with a logged-in session), never through the
ORM, when they expect a push; the database is shared (file-backed SQLite or PostgreSQL), so
setting up rows with the ORM before the server needs them is fine. Use it from tests marked
``django_db(transaction=True)`` so that what they write is committed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _database_url() -> str:
    """The URL of the database the tests are using right now (the test database)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{db.get('HOST') or '127.0.0.1'}{port}/{db['NAME']}"


class LiveServer:
    def __init__(self, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
        self.port, self.process, self.log = port, process, log
        self.url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


_static_collected = False


def collect_static() -> None:
    """The pages name their CSS and scripts through the manifest storage, which needs
    ``collectstatic`` to have run: once per test process, into ``STATIC_ROOT``."""
    global _static_collected
    if not _static_collected:
        subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
            check=True,
        )
        _static_collected = True


def start_server(port: int | None = None, extra_env: dict[str, str] | None = None) -> LiveServer:
    collect_static()
    port = port or free_port()
    log = Path(settings.VAR_DIR) / f"live-server-{port}.log"
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        # Its own address, as `make run` sets it: the receipts' issuer, where a verifier
        # fetches the keys, and the links in notifications.
        "COUNTERSIGN_PUBLIC_URL": f"http://127.0.0.1:{port}",
        **(extra_env or {}),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "config.serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = LiveServer(port, process, log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited at start:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(f"{server.url}/api/v1/currencies", timeout=1).raise_for_status()
            return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"the server did not start:\n{log.read_text()[-3000:]}")


@contextmanager
def live_server(extra_env: dict[str, str] | None = None) -> Iterator[LiveServer]:
    server = start_server(extra_env=extra_env)
    try:
        yield server
    finally:
        server.stop()


class Approver:
    """A person at the approver's forms: logs in over HTTP and posts decisions with CSRF."""

    def __init__(self, server: LiveServer, username: str, password: str) -> None:
        self.http = httpx.Client(base_url=server.url, timeout=10, follow_redirects=False)
        page = self.http.get("/accounts/login/")
        token = CSRF_INPUT.search(page.text)
        assert token is not None, "no CSRF token on the login page"
        response = self.http.post(
            "/accounts/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token[1]},
        )
        assert response.status_code == 302, "login failed"

    def decide(
        self,
        call_id: str,
        *,
        approve: bool,
        comment: str = "",
        scope: str = "once",
        arguments: str | None = None,
    ) -> int:
        """Decide at the call page's form; ``arguments``: the approver's edit (approve only)."""
        page = self.http.get(f"/calls/{call_id}/")
        token = CSRF_INPUT.search(page.text)
        digest = re.search(r'name="arguments_sha256" value="([0-9a-f]{64})"', page.text)
        assert token is not None, "no CSRF token on the call page"
        assert digest is not None, "no decision form on the call page"
        verb = "approve" if approve else "deny"
        response = self.http.post(
            f"/calls/{call_id}/{verb}",
            data={
                "csrfmiddlewaretoken": token[1],
                "arguments_sha256": digest[1],
                "comment": comment,
                "scope": scope,
                **({} if arguments is None else {"arguments": arguments}),
            },
            headers={"Referer": f"{page.url}"},
        )
        return response.status_code

    def close(self) -> None:
        self.http.close()
