"""Hostile logins against a real server process: the fifth failure locks the username out
from that address, the right password included, and logins hash on threads of their own while
the agent keeps being answered. How fast it is answered is bench/login_bench.py's to say, not
a test's.
"""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest
from django.contrib.auth.models import User

from approvals.accounts.lockouts import LOCKED_OUT_STATUS, locked_out_message
from approvals.models import AuditEntry
from tests.live import CSRF_INPUT, LiveServer, live_server
from tests.scale.servers import (
    APPROVER,
    NO_RATE_LIMIT,
    PASSWORD,
    agent_create,
    http_client,
    run_threads,
    token_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

LOGIN = "/accounts/login/"
GUESSERS = 12
SUBMISSIONS = 40
GUESSES = 24  # logins answered while the agent submits
GUESSING_AT_MOST = 120.0  # seconds: a guard against a hang, not a measure


class Guesser:
    """A browser at the login form: the CSRF token from the page, then a post; from the
    loopback address ``address`` (the whole of 127.0.0.0/8 reaches the server)."""

    def __init__(self, server: LiveServer, address: str = "127.0.0.1") -> None:
        self.http = httpx.Client(
            base_url=server.url,
            timeout=60,
            follow_redirects=False,
            transport=httpx.HTTPTransport(local_address=address),
        )
        page = self.http.get(LOGIN)
        token = CSRF_INPUT.search(page.text)
        assert token is not None, "no CSRF token on the login page"
        self.csrf = token[1]

    def post(self, username: str, password: str) -> httpx.Response:
        return self.http.post(
            LOGIN,
            data={"username": username, "password": password, "csrfmiddlewaretoken": self.csrf},
        )

    def close(self) -> None:
        self.http.close()


def test_a_hundred_wrong_passwords_lock_the_username_out_and_the_right_one_is_refused(
    approver: User,
) -> None:
    with live_server(NO_RATE_LIMIT) as server:
        guesser = Guesser(server)
        try:
            statuses = [guesser.post(APPROVER, f"guess {n}").status_code for n in range(100)]
            right = guesser.post(APPROVER, PASSWORD)
            queue = guesser.http.get("/")
        finally:
            guesser.close()
        # The same person from another address is not locked out.
        other = Guesser(server, address="127.0.0.2")
        try:
            elsewhere = other.post(APPROVER, PASSWORD)
        finally:
            other.close()
    assert statuses[:4] == [200] * 4
    assert statuses[4:] == [LOCKED_OUT_STATUS] * 96
    assert right.status_code == LOCKED_OUT_STATUS
    assert locked_out_message() in right.text
    assert queue.status_code == 302  # still not logged in
    assert AuditEntry.objects.filter(action=AuditEntry.Action.LOGIN_LOCKED_OUT).count() == 1
    assert elsewhere.status_code == 302


def test_an_agent_is_answered_throughout_a_dozen_failing_login_loops() -> None:
    """The agent goes on until it has made ``SUBMISSIONS`` submissions and reads and the
    guessers have been answered ``GUESSES`` times, so both ran at once."""
    agent_create("steady")
    done = threading.Event()
    answered = threading.Semaphore(0)
    with live_server(NO_RATE_LIMIT) as server:

        def guess(index: int) -> int:
            """Wrong passwords for new usernames (each hashed, none locked out) until the
            agent is done."""
            guesser = Guesser(server)
            tries = 0
            try:
                while not done.is_set():
                    response = guesser.post(f"guess-{index}-{uuid.uuid4().hex}", "wrong")
                    assert response.status_code == 200
                    answered.release()
                    tries += 1
            finally:
                guesser.close()
            return tries

        def submit() -> list[int]:
            statuses: list[int] = []
            deadline = time.monotonic() + GUESSING_AT_MOST
            try:
                with http_client(server, token_for("steady")) as agent:
                    guesses = 0
                    while len(statuses) < 2 * SUBMISSIONS or guesses < GUESSES:
                        assert time.monotonic() < deadline, "the guessers were never answered"
                        body = {"tool": "read_file", "arguments": '{"path": "notes.txt"}'}
                        statuses.append(agent.post("/api/v1/calls", json=body).status_code)
                        statuses.append(agent.get("/api/v1/calls?limit=1").status_code)
                        while guesses < GUESSES and answered.acquire(blocking=False):
                            guesses += 1
            finally:
                done.set()
            return statuses

        def run(index: int) -> object:
            return submit() if index == GUESSERS else guess(index)

        *tries, statuses = run_threads(GUESSERS + 1, run, timeout=GUESSING_AT_MOST + 60)
    assert len(statuses) >= 2 * SUBMISSIONS
    assert statuses == [201, 200] * (len(statuses) // 2)  # every submission and read answered
    assert sum(tries) >= GUESSES
