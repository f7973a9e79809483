"""What the framework adapters' live tests share: one server per test module, a world on the
test database (an agent, an approver, a cap that holds big payments and one that refuses big
wires), a person deciding held calls at the approver's forms while the agent waits, and a
client for a service that is not there."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from django.db import connection

from approvals.models import Call
from tests.factories import agent_with_token, rule_make, user_make
from tests.live import Approver, LiveServer, free_port, start_server

TOKEN = "cs_integrations-0123456789"
APPROVER, PASSWORD = "alice", "pw"
WAIT = 20.0  # the longest a person takes here: a guard against hangs, not a measure
Decision = tuple[bool, str] | tuple[bool, str, str]


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[LiveServer]:
    """One server for the module; every test makes the same world in the database it reads."""
    running = start_server()
    try:
        yield running
    finally:
        running.stop()


def world_create() -> None:
    agent_with_token(token=TOKEN, name="framework-agent")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="wires: wire arg=amount max USD 100.00 -> refuse")
    user_make(username=APPROVER, password=PASSWORD)


def nowhere() -> str:
    """The URL of a port nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"


@dataclass
class Person:
    """Decides, at the approver's forms, each call that comes up pending, in turn: the
    decisions are (approve?, comment) or (True, comment, edited arguments), in order."""

    server: LiveServer
    decisions: list[Decision]
    decided: list[str] = field(default_factory=list)
    failure: list[BaseException] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        approver = Approver(self.server, APPROVER, PASSWORD)
        deadline = time.monotonic() + WAIT
        try:
            while self.decisions and not stop.is_set() and time.monotonic() < deadline:
                pending = Call.objects.filter(status="pending").exclude(pk__in=self.decided)
                for call_id in pending.order_by("created_at").values_list("pk", flat=True):
                    approve, comment, *edit = self.decisions.pop(0)
                    status = approver.decide(
                        str(call_id),
                        approve=approve,
                        comment=comment,
                        arguments=edit[0] if edit else None,
                    )
                    assert status in (200, 302, 303), status
                    self.decided.append(str(call_id))
                    if not self.decisions:
                        break
                stop.wait(0.05)
        except BaseException as error:  # shown by the test that started it
            self.failure.append(error)
        finally:
            approver.close()
            connection.close()  # this thread's connection


@contextmanager
def person(server: LiveServer, *decisions: Decision) -> Iterator[Person]:
    """A person deciding the next pending calls while the body of the ``with`` runs."""
    deciding = Person(server, list(decisions))
    stop = threading.Event()
    thread = threading.Thread(target=deciding.run, args=(stop,))
    thread.start()
    try:
        yield deciding
    finally:
        stop.set()
        thread.join()
    if deciding.failure:
        raise deciding.failure[0]
    assert not deciding.decisions, "the person had calls left to decide"


APPROVE: Decision = (True, "Fine, go ahead.")
DENY: Decision = (False, "Use the other card.")
# Approved with the amount cut to 400.00, under the cap: the edited call is allowed at once.
EDITED_ARGUMENTS = '{"amount": "400.00", "payee": "ACME"}'
EDIT: Decision = (True, "400 for now.", EDITED_ARGUMENTS)
