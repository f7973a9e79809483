"""The README's examples run and show what it says they show: capcore's on its own, and the
agent's (Python, TypeScript's arguments, the command line) against the demo make run sets up."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import capcore
from approvals.models import Call, Gate
from approvals.services.demo import DEMO_PASSWORD, demo_ensure
from countersign import Client
from tests.live import Approver, LiveServer, live_server

README = Path(__file__).resolve().parent.parent / "README.md"


def test_capcore_example_runs_and_holds_the_call() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    example = next((b for b in blocks if "import capcore" in b), None)
    assert example is not None
    namespace: dict[str, object] = {}
    exec(compile(example, str(README), "exec"), namespace)

    evaluation = namespace["evaluation"]
    assert isinstance(evaluation, capcore.Evaluation)
    assert evaluation.verdict.status is capcore.Status.PENDING
    assert [r.as_reason() for r in evaluation.verdict.reasons] == [
        {
            "policy": "cap",
            "rule": "daily-spend",
            "action": "gate",
            "gate": "",
            "message": "USD 1,050.00 would exceed the limit of USD 1,000.00 per day "
            "(spent USD 800.00)",
        }
    ]


# --- "Gate an agent in three lines", against the demo make run sets up ----------------------

RULES = README.parent / "examples" / "rules.txt"
TS_CALL = re.compile(r"^await pay\((\{.*\})\);$", re.MULTILINE)
STATED_REASON = re.compile(r"\(`(not assessable: [^`]+)`\)")


def _readme() -> str:
    return README.read_text()


def _block(language: str, marker: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", _readme(), re.DOTALL)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"no single {language} block with {marker!r} in the README"
    return str(found[0])


def _js_object_as_json(literal: str) -> str:
    """The README's TypeScript object literal (bare keys, single-quoted strings) as JSON."""
    return re.sub(r"([{,]\s*)([A-Za-z_]\w*):", r'\1"\2":', literal.replace("'", '"'))


@pytest.fixture
def demo(transactional_db: None) -> Iterator[tuple[LiveServer, str]]:
    """The demo make run sets up (its rules, gates, people and agents) and a live server; the
    demo agent's token."""
    setup = demo_ensure(rules_file=RULES)
    with live_server() as server:
        yield server, setup.token


def test_the_readme_examples_pay_at_once_against_the_demo(
    demo: tuple[LiveServer, str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    server, token = demo
    monkeypatch.setenv("COUNTERSIGN_URL", server.url)
    monkeypatch.setenv("COUNTERSIGN_TOKEN", token)

    python = _block("python", "from countersign import")
    namespace: dict[str, object] = {}
    exec(compile(python, str(README), "exec"), namespace)
    assert capsys.readouterr().out == "paying USD 12.50 to ada@example.com\n"

    command = _block("sh", "countersign submit").replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[0] == "countersign"
    done = subprocess.run(
        [str(Path(sys.executable).with_name("countersign")), *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "allowed"

    ts_call = TS_CALL.search(_block("ts", "from 'countersign-client'"))
    assert ts_call is not None, "no `await pay({...});` in the README's TypeScript example"
    with Client(server.url, token) as client:
        state = client.submit("pay", _js_object_as_json(ts_call[1]))
    assert state["status"] == "allowed", state["reasons"]
    paid = Call.objects.filter(tool="pay").values_list("status", "arguments")
    assert [status for status, _ in paid] == ["allowed"] * 3
    assert all(
        json.loads(arguments)["payee"]["email"] == "ada@example.com" for _, arguments in paid
    )


def test_over_the_cap_one_approver_lets_it_through_and_an_unread_payee_is_held_with_its_path(
    demo: tuple[LiveServer, str],
) -> None:
    server, token = demo
    big = {"amount": "1250.00", "currency": "USD", "payee": {"email": "ada@example.com"}}
    with Client(server.url, token) as client:
        held = client.submit("pay", big)
        assert held["status"] == "pending"
        assert [(r["rule"], r["gate"]) for r in held["reasons"]] == [("per-payment", "finance")]
        alice = Approver(server, "alice", DEMO_PASSWORD)
        assert alice.decide(held["id"], approve=True, comment="one is enough") == 303
        alice.close()
        assert client.get(held["id"])["status"] == "approved"

        no_payee = client.submit("pay", {"amount": "12.50", "currency": "USD"})
    assert no_payee["status"] == "pending"
    [reason] = no_payee["reasons"]
    assert (reason["rule"], reason["gate"]) == ("per-payee", "treasury")
    assert Gate.objects.get(name="treasury").required_approvals == 2
    # The reason names the argument it could not read, as the README quotes it (its prose is
    # wrapped: the quote may span two lines).
    stated = STATED_REASON.search(_readme().replace("\n", " "))
    assert stated is not None
    assert stated[1] == "not assessable: the key argument payee.email is missing"
    assert reason["message"] == stated[1]
