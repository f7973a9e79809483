"""The login watch (approvals/realtime/login_watch.py): a password changed or a deactivation
made behind every signal's back (an ``UPDATE``, as a process whose pushes never reach this
one) closes that person's page sockets within a second, with nothing pushed meanwhile;
other people's sockets, and a session that was given the new password's hash (as Django's
password change view does for the browser that changed it), stay open.

The same across processes, with a real ``changepassword``: tests/scale/test_login_watch.py.
"""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import HASH_SESSION_KEY
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore

from approvals.models import Agent
from tests.approvals.test_queue_consumer import (
    QUEUE,
    assert_closed,
    call_path,
    logged_in,
    opened,
    queue_text,
    rows,
    submit,
    text,
)
from tests.factories import agent_make, rule_make

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

CLOSED_WITHIN = 1.0  # seconds, the promise


@pytest.fixture
def agent(transactional_db: None) -> Agent:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    return agent_make()


def _behind_the_signals(user_id: int, **fields: object) -> None:
    User.objects.filter(pk=user_id).update(**fields)


async def _closed_within(
    communicator: WebsocketCommunicator, code: int, changed_at: float
) -> float:
    await assert_closed(communicator, code)
    return time.monotonic() - changed_at


@pytest.mark.parametrize("change", [{"password": make_password("a new one")}, {"is_active": False}])
async def test_a_change_no_push_reports_closes_the_persons_sockets_within_a_second(
    agent: Agent,
    change: dict[str, object],
) -> None:
    call = await submit(agent)
    alice, cookie = await logged_in("alice")
    _, bob_cookie = await logged_in("bob")
    queue, page = await opened(QUEUE, cookie), await opened(call_path(call), cookie)
    bob = await opened(QUEUE, bob_cookie)
    await text(queue), await text(page), await text(bob)
    changed_at = time.monotonic()
    await sync_to_async(_behind_the_signals, thread_sensitive=True)(alice.pk, **change)
    assert await _closed_within(queue, 4403, changed_at) < CLOSED_WITHIN
    assert await _closed_within(page, 4403, changed_at) < CLOSED_WITHIN
    assert await bob.receive_nothing(0.3)  # another person's socket stays
    await bob.disconnect()


def _new_password_kept_by(user_id: int, session_key: str) -> None:
    """The password changed, and this session given its hash, as Django's
    ``update_session_auth_hash`` does for the browser that changed it."""
    user = User.objects.get(pk=user_id)
    user.password = make_password("changed in this browser")
    User.objects.filter(pk=user_id).update(password=user.password)
    session = SessionStore(session_key)
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()


async def test_a_session_given_the_new_passwords_hash_stays_open(
    agent: Agent,
) -> None:
    alice, cookie = await logged_in("alice")
    queue = await opened(QUEUE, cookie)
    await text(queue)
    session_key = cookie.partition("=")[2]
    await sync_to_async(_new_password_kept_by, thread_sensitive=True)(alice.pk, session_key)
    assert await queue.receive_nothing(2 * CLOSED_WITHIN)
    call = await submit(agent)
    assert rows(await queue_text(queue), "mine") == [str(call.pk)]
    await queue.disconnect()
