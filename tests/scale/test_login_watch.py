"""A password changed outside the forms closes the person's open queue socket within a second
(approvals/realtime/login_watch.py; docs/reliability.md, "Access ends when it is taken
away"): a real server process on the embedded in-memory channel layer, and the change made in
another process that cannot push to it, by ``manage.py changepassword`` itself and by a
script's ``set_password()`` and ``save()``.

Closes are timed from the moment the other process reports the change saved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from tests.live import ROOT, Approver, LiveServer, _database_url
from tests.scale.servers import APPROVER, PASSWORD, workers
from tests.scale.test_hostile_sockets import closed_with, queue_socket, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

CLOSED_WITHIN = 1.0
NEW_PASSWORD = "a brand new passphrase 42"
# No Redis: the server's channel layer is its own memory, which no other process reaches.
IN_MEMORY_LAYER = {"REDIS_URL": ""}
SAVED = "saved"

SCRIPT = f"""
from django.contrib.auth.models import User
user = User.objects.get(username={APPROVER!r})
user.set_password({NEW_PASSWORD!r})
user.save()
print({SAVED!r}, flush=True)
"""


@pytest.fixture
def server(approver: User) -> Iterator[LiveServer]:
    with workers(1, extra_env=IN_MEMORY_LAYER) as (single,):
        yield single


def _other_process(*args: str) -> subprocess.Popen[str]:
    """``manage.py`` on the test database, in a session of its own: no terminal, so
    ``changepassword`` reads the password from its input as it does in a pipeline."""
    env = {
        **os.environ,
        **IN_MEMORY_LAYER,
        "DATABASE_URL": _database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _saved_at(process: subprocess.Popen[str], *, when: str, answer: str = "") -> float:
    """Feed ``answer`` to the process; the moment its output says the change is saved."""
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(answer)
    process.stdin.close()
    for line in process.stdout:
        if when in line:
            return time.monotonic()
    _, errors = process.communicate(timeout=30)
    raise AssertionError(f"the other process never saved: {errors[-2000:]}")


@pytest.mark.parametrize("how", ["changepassword", "set_password and save"])
def test_a_password_changed_in_another_process_closes_the_queue_socket_within_a_second(
    server: LiveServer, approver: User, how: str
) -> None:
    alice = Approver(server, APPROVER, PASSWORD)
    with queue_socket(server, session_cookie(alice)) as ws:
        assert 'id="queue"' in str(ws.recv(timeout=10))
        if how == "changepassword":
            process = _other_process("changepassword", APPROVER)
            saved_at = _saved_at(
                process, when="Password changed", answer=f"{NEW_PASSWORD}\n{NEW_PASSWORD}\n"
            )
        else:
            process = _other_process("shell", "-v0", "-c", SCRIPT)
            saved_at = _saved_at(process, when=SAVED)
        code, pushed = closed_with(ws, CLOSED_WITHIN + 5)
        closed_after = time.monotonic() - saved_at
    process.wait(timeout=30)
    alice.close()
    assert (code, pushed) == (4403, [])
    assert closed_after < CLOSED_WITHIN
    approver.refresh_from_db()
    assert approver.check_password(NEW_PASSWORD)
