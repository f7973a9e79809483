"""``python -m countersign submit``: the state as JSON on stdout, and an exit status a shell
can gate on: 0 for go, 1 for anything else, 2 for a usage error. A wait says on stderr where
the call waits, and Ctrl-C withdraws the call."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time

import httpx
import pytest

from countersign.__main__ import (
    DEADLINE_NEEDS_WAIT,
    EXIT_GO,
    EXIT_INTERRUPTED,
    EXIT_NO_GO,
    NO_TOKEN,
)
from countersign.errors import DEADLINE_CANCELLED
from countersign.waiting import WITHDRAWN
from tests.countersign.world import BIG_PAYMENT, BIG_WIRE, SMALL_PAYMENT, TOKEN
from tests.live import ROOT, LiveServer, free_port

EXIT_USAGE = 2  # argparse's


def cli_env(url: str, token: str | None = TOKEN) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env["COUNTERSIGN_URL"] = url
    if token is not None:
        env["COUNTERSIGN_TOKEN"] = token
    return env


def run_cli(*args: str, url: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "countersign", "submit", *args],
        cwd=ROOT,
        env=cli_env(url, token),
        capture_output=True,
        text=True,
        timeout=10,
    )


@pytest.mark.django_db(transaction=True)
def test_an_allowed_call_exits_0_with_its_state(server: LiveServer) -> None:
    result = run_cli(
        "--tool", "pay", "--arguments", json.dumps(SMALL_PAYMENT), "--wait", url=server.url
    )
    assert result.returncode == EXIT_GO, result.stderr
    assert json.loads(result.stdout)["status"] == "allowed"


@pytest.mark.django_db(transaction=True)
def test_a_refused_call_exits_1_with_its_state(server: LiveServer) -> None:
    result = run_cli(
        "--tool",
        "wire",
        "--arguments",
        json.dumps(BIG_WIRE),
        "--run-id",
        "run-7",
        "--wait",
        url=server.url,
    )
    assert result.returncode == EXIT_NO_GO, result.stderr
    state = json.loads(result.stdout)
    assert (state["status"], state["run_id"]) == ("refused", "run-7")


@pytest.mark.django_db(transaction=True)
def test_a_held_call_exits_1_without_wait_and_is_cancelled_at_the_deadline(
    server: LiveServer,
) -> None:
    arguments = json.dumps(BIG_PAYMENT)
    held = run_cli("--tool", "pay", "--arguments", arguments, url=server.url)
    assert held.returncode == EXIT_NO_GO
    assert json.loads(held.stdout)["status"] == "pending"
    late = run_cli(
        "--tool", "pay", "--arguments", arguments, "--wait", "--deadline", "0.5", url=server.url
    )
    assert late.returncode == EXIT_NO_GO
    assert late.stdout == ""
    assert late.stderr.startswith(f"countersign: {DEADLINE_CANCELLED.format(seconds=0.5)} (call ")
    assert "Traceback" not in late.stderr
    call_id = late.stderr.rsplit("(call ", 1)[1].rstrip(")\n")
    state = httpx.get(
        f"{server.url}/api/v1/calls/{call_id}", headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    assert state["status"] == "cancelled"


def test_a_missing_token_is_a_usage_error() -> None:
    result = run_cli("--tool", "pay", "--arguments", "{}", url="http://127.0.0.1:8000", token=None)
    assert result.returncode == EXIT_USAGE
    assert NO_TOKEN in result.stderr


def test_a_deadline_without_wait_is_a_usage_error() -> None:
    result = run_cli("--tool", "pay", "--arguments", "{}", "--deadline", "5", url="http://x")
    assert result.returncode == EXIT_USAGE
    assert DEADLINE_NEEDS_WAIT in result.stderr


def test_an_unreachable_service_exits_1_without_a_traceback() -> None:
    result = run_cli("--tool", "pay", "--arguments", "{}", url=f"http://127.0.0.1:{free_port()}")
    assert result.returncode == EXIT_NO_GO
    assert result.stderr.startswith("countersign: The approval service could not be reached")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def read_line(terminal: int) -> str:
    """One line the process wrote to its terminal (the pty's other end)."""
    seen = b""
    deadline = time.monotonic() + 10
    while not seen.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([terminal], [], [], 0.1)
        if ready:
            seen += os.read(terminal, 1)
    return seen.decode().replace("\r\n", "\n")


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.django_db(transaction=True)
def test_on_a_terminal_a_wait_says_where_the_call_waits_and_ctrl_c_withdraws_it(
    server: LiveServer,
) -> None:
    terminal, stderr = pty.openpty()  # stderr a terminal, as in a shell
    arguments = ["--tool", "pay", "--arguments", json.dumps(BIG_PAYMENT), "--wait"]
    submit = subprocess.Popen(
        [sys.executable, "-m", "countersign", "submit", *arguments],
        cwd=ROOT,
        env=cli_env(server.url),
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        # Ctrl-C's default, as in a shell, even when this run was started in the background
        # (which ignores SIGINT, and children inherit that).
        preexec_fn=_sigint_default,
    )
    try:
        said = read_line(terminal)  # the wait has begun once it says so
        submit.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, _ = submit.communicate(timeout=10)
        withdrawn = read_line(terminal)  # kept readable: this end of the pty is still open
    finally:
        submit.kill()
        os.close(stderr)
        os.close(terminal)
    assert said.startswith("countersign: Call ")
    call_id = said.split()[2]
    assert f"Approve or deny it at {server.url}/calls/{call_id}/" in said
    assert "big: USD 600.00 is over the limit of USD 500.00 per call" in said
    assert submit.returncode == EXIT_INTERRUPTED
    assert out == ""
    assert withdrawn == f"countersign: {WITHDRAWN.format(call_id=call_id)}\n"
    state = httpx.get(
        f"{server.url}/api/v1/calls/{call_id}", headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    assert state["status"] == "cancelled"
