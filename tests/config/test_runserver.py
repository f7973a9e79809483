"""``manage.py runserver`` serves the project's ASGI application through config/serve.py: an
agent's WebSocket and its long-poll both hear a decision made at the approver's form; with
the autoreloader on, the server starts, and starts again when a module it loaded changes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from websockets.sync.client import connect

from tests.factories import agent_with_token, rule_make, user_make
from tests.live import ROOT, Approver, LiveServer, _database_url, collect_static, free_port

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "cs_runserver-token"
START_SECONDS = 60  # the reloader starts Python twice, each loading Django and the checks
STARTED = re.compile(r"Started server process \[(\d+)\]")


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def _serving(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, f"runserver exited:\n{log.read_text()[-3000:]}"
        try:
            httpx.get(f"{url}/api/v1/currencies", timeout=1).raise_for_status()
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError(f"runserver did not serve:\n{log.read_text()[-3000:]}")


@contextmanager
def runserver(*options: str, env: dict[str, str] | None = None) -> Iterator[LiveServer]:
    """``manage.py runserver`` on a free port in a session of its own (the reloader starts a
    child), stopped with everything it started."""
    collect_static()
    port = free_port()
    log = Path(settings.VAR_DIR) / f"runserver-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", *options, f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env or _env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LiveServer(port, process, log)
    try:
        _serving(server.url, process, log)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_runserver_serves_the_agents_websocket_and_long_poll() -> None:
    agent_with_token(token=TOKEN)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    user_make(username="alice")
    with runserver("--noreload") as server:
        agent = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        )
        held = agent.post("/api/v1/calls", json={"tool": "pay", "arguments": '{"amount": "600"}'})
        assert held.status_code == 201, held.text
        call_id = held.json()["id"]
        assert held.json()["status"] == "pending"

        long_poll: dict[str, Any] = {}

        def wait() -> None:
            long_poll["answer"] = agent.get(f"/api/v1/calls/{call_id}/wait?timeout=25")

        waiter = threading.Thread(target=wait)
        with connect(
            f"{server.ws_url}/ws/v1/calls/{call_id}",
            additional_headers={"Authorization": f"Bearer {TOKEN}"},
            open_timeout=10,
        ) as socket:
            assert json.loads(socket.recv(timeout=10))["call"]["status"] == "pending"
            waiter.start()
            approver = Approver(server, "alice", "pw")
            assert approver.decide(call_id, approve=True, comment="via runserver") == 303
            pushed = json.loads(socket.recv(timeout=10))["call"]
        waiter.join(30)
        assert (pushed["status"], pushed["decision"]["comment"]) == ("approved", "via runserver")
        answer = long_poll["answer"]
        assert answer.status_code == 200
        assert answer.json()["status"] == "approved"
        # The page's live socket too: a person's queue socket opens on their session.
        session = approver.http.cookies["sessionid"]
        with connect(
            f"{server.ws_url}/ws/v1/queue",
            additional_headers={"Cookie": f"sessionid={session}"},
            origin=server.url,  # type: ignore[arg-type]
            open_timeout=10,
        ) as queue:
            queue.ping().wait(10)
        approver.close()
        # Ctrl-C stops it cleanly.
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(timeout=20) == 0
    log = server.log.read_text()
    assert "The project's ASGI server (config/serve.py)" in log
    assert "Uvicorn running on" in log


def test_runserver_with_the_reloader_starts_and_restarts_on_a_change(tmp_path: Path) -> None:
    # A settings module of this test's own: changing it restarts the server, as a change to
    # any module the server loaded does, without touching the project's files.
    module = tmp_path / "runserver_reload_settings.py"
    module.write_text("from config.settings import *  # noqa: F403\n")
    env = _env(
        DJANGO_SETTINGS_MODULE="runserver_reload_settings",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
    )
    with runserver(env=env) as server:
        log = server.log
        assert "restarted when the code changes" in log.read_text()
        first = STARTED.findall(log.read_text())
        assert len(first) == 1
        deadline = time.monotonic() + START_SECONDS
        touches = 0
        while time.monotonic() < deadline and len(STARTED.findall(log.read_text())) < 2:
            # Changed again each second: the reloader compares each file's time with the one
            # it first saw, which a loaded machine may read only after a first change.
            touches += 1
            later = time.time() + 5 + touches
            os.utime(module, (later, later))
            time.sleep(1.0)
        started = STARTED.findall(log.read_text())
        assert len(started) >= 2, log.read_text()[-3000:]
        assert started[1] != started[0]  # a new process: the reloader started it again
        _serving(server.url, server.process, log)
