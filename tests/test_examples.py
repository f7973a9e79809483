"""The examples run to completion against a live server, with an approver approving every
held call over HTTP as a person would."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest
from django.db import connection
from mcp import ClientSession, StdioServerParameters, stdio_client

import countersign
import countersign.receipts
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


# --- the MCP bank that requires receipts (examples/mcp_bank_server.py --require-receipts) ---


def _bank_direct(
    issuer: str, calls: list[tuple[str, dict[str, str], str | None]]
) -> list[tuple[bool, str]]:
    """Each ``(tool, arguments, receipt)`` called on the bank with no gateway in between, the
    receipt (if any) where the gateway puts it; whether it failed, and its text."""

    async def session() -> list[tuple[bool, str]]:
        bank = StdioServerParameters(
            command=sys.executable,
            args=[str(EXAMPLES / "mcp_bank_server.py"), "--require-receipts", "--issuer", issuer],
        )
        answers = []
        async with stdio_client(bank) as streams, ClientSession(*streams) as client:
            await client.initialize()
            for tool, arguments, receipt in calls:
                meta = None if receipt is None else {countersign.RECEIPT_META_KEY: receipt}
                result = await client.call_tool(tool, arguments, meta=meta)  # type: ignore[arg-type]
                text = " ".join(item.text for item in result.content if item.type == "text")
                answers.append((result.is_error, text))
        return answers

    async def bounded() -> list[tuple[bool, str]]:
        with anyio.fail_after(60):
            return await session()

    return anyio.run(bounded)


def test_the_receipt_checking_bank_runs_a_call_once_for_its_own_arguments_only() -> None:
    """Without the gateway: no receipt, a receipt for other arguments or another tool, and a
    receipt used twice are all refused; the one call its receipt was signed for runs once."""
    _world()
    payment = {"amount": "12.50", "currency": "USD", "invoice": "INV-7"}
    with live_server() as server, countersign.Client(server.url, TOKEN) as agent:
        held = agent.submit("bank:pay", payment)  # the agent's mode asks before paying
        approver = Approver(server, "alice", "pw")
        try:
            assert approver.decide(held["id"], approve=True) == 303
        finally:
            approver.close()
        state = agent.get(held)
        assert state["status"] == "approved"
        receipt = state["receipt"]
        answers = _bank_direct(
            server.url,
            [
                ("pay", payment, None),
                ("pay", {**payment, "amount": "1250.00"}, receipt),
                ("balance", {"account": "ACME"}, receipt),
                ("pay", payment, receipt),
                ("pay", payment, receipt),
            ],
        )
    assert answers[3] == (False, "paid USD 12.50 for INV-7")
    refusals = [answers[0], answers[1], answers[2], answers[4]]
    assert all(failed for failed, _ in refusals)
    texts = [text for _, text in refusals]
    assert countersign.receipts.MISSING in texts[0]
    assert countersign.receipts.WRONG_ARGUMENTS in texts[1]
    assert countersign.receipts.WRONG_TOOL in texts[2]
    assert countersign.receipts.REPLAYED in texts[3]
