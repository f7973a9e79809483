"""The demo behind `make run`: demo_setup twice, and demo_agent reacting to a real approval."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from approvals.models import AgentToken, Call, CapRule, Gate
from approvals.services.demo import DEMO_PASSWORD
from tests.live import Approver, live_server

RULES = Path(__file__).resolve().parents[2] / "examples" / "rules.txt"
pytestmark = pytest.mark.django_db(transaction=True)


def test_demo_setup_twice_keeps_one_of_everything_and_only_the_new_token_works() -> None:
    first, second = io.StringIO(), io.StringIO()
    call_command("demo_setup", rules=str(RULES), stdout=first)
    call_command("demo_setup", rules=str(RULES), stdout=second)
    assert CapRule.objects.filter(enabled=True).count() == 5
    assert Gate.objects.get(name="treasury").required_approvals == 2
    assert "curl -sS -X POST http://127.0.0.1:8000/api/v1/calls" in second.getvalue()
    assert f"password {DEMO_PASSWORD}" in second.getvalue()
    assert AgentToken.objects.filter(agent__name="demo-agent", revoked_at__isnull=True).count() == 1


def test_demo_agent_prints_each_decision_as_it_arrives() -> None:
    call_command("demo_setup", rules=str(RULES), stdout=io.StringIO())
    output = io.StringIO()
    with live_server() as server:

        def approve_the_big_payment() -> None:
            try:
                for _ in range(100):
                    held = Call.objects.filter(tool="pay", status="pending").first()
                    if held is not None:
                        Approver(server, "alice", DEMO_PASSWORD).decide(
                            str(held.pk), approve=True, comment="fine for the demo"
                        )
                        return
                    time.sleep(0.1)
            finally:
                connection.close()  # this thread's connection, back to the pool

        approver = threading.Thread(target=approve_the_big_payment)
        approver.start()
        call_command("demo_agent", url=server.url, deadline=6, stdout=output)
        approver.join()
    text = output.getvalue()
    assert "submitted pay (under every cap): allowed" in text
    assert "submitted wire (over the wire ceiling): refused" in text
    assert "submitted read_file (held in prompt mode): pending" in text
    assert "submitted refund (not assessable): pending" in text
    assert "pay (held for a cap) -> approved: by alice: fine for the demo" in text
    assert "read_file: still pending after the deadline" in text
