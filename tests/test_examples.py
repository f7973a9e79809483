"""The examples run to completion against a live server, with an approver approving every
held call over HTTP as a person would."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.db import connection

from approvals.models import Call
from tests.factories import agent_with_token, rule_make, user_make
from tests.live import Approver, LiveServer, live_server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOKEN = "cs_examples-token"
pytestmark = pytest.mark.django_db(transaction=True)


def _world() -> None:
    agent_with_token(token=TOKEN, name="example", principal="acme-ops", mode="default")
    rule_make(line="per-payment: pay arg=amount currency=currency max USD 500.00 -> gate")
    # The MCP gateway's example submits the bank's tools under its --name.
    rule_make(line="bank-payment: bank:pay arg=amount currency=currency max USD 500.00 -> gate")
    user_make(username="alice")


def _auto_approver(server: LiveServer, stop: threading.Event) -> None:
    approver = Approver(server, "alice", "pw")
    decided: set[str] = set()
    try:
        while not stop.wait(0.1):
            for call_id in Call.objects.filter(status="pending").values_list("pk", flat=True):
                if str(call_id) not in decided:
                    decided.add(str(call_id))
                    approver.decide(
                        str(call_id), approve=True, comment="approved by the auto-approver"
                    )
    finally:
        approver.close()
        connection.close()  # this thread's connection, back to the pool


@pytest.mark.parametrize(
    "example",
    [
        "gated_agent.py",
        "openai_tool_loop.py",
        "claude_code_hook.py",
        "openai_agents_gated.py",
        "langchain_middleware.py",
        "pydantic_ai_deferred.py",
        "mcp_gateway.py",
    ],
)
def test_the_example_runs_to_completion(example: str) -> None:
    _world()
    with live_server() as server:
        stop = threading.Event()
        approver = threading.Thread(target=_auto_approver, args=(server, stop))
        approver.start()
        try:
            done = subprocess.run(
                [sys.executable, str(EXAMPLES / example)],
                env={**os.environ, "COUNTERSIGN_URL": server.url, "COUNTERSIGN_TOKEN": TOKEN},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            stop.set()
            approver.join()
    assert done.returncode == 0, done.stderr
    assert "approved" in done.stdout or "done: paid USD 1250.00" in done.stdout
    assert Call.objects.filter(status="approved").exists()
