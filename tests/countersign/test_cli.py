"""``python -m countersign submit``: the state as JSON on stdout, and an exit status a shell
can gate on: 0 for go, 1 for anything else, 2 for a usage error."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from countersign.__main__ import DEADLINE_NEEDS_WAIT, EXIT_GO, EXIT_NO_GO, NO_TOKEN
from countersign.errors import DEADLINE_CANCELLED
from tests.countersign.world import BIG_PAYMENT, BIG_WIRE, SMALL_PAYMENT, TOKEN
from tests.live import ROOT, LiveServer, free_port

EXIT_USAGE = 2  # argparse's


def run_cli(*args: str, url: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env["COUNTERSIGN_URL"] = url
    if token is not None:
        env["COUNTERSIGN_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "countersign", "submit", *args],
        cwd=ROOT,
        env=env,
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
