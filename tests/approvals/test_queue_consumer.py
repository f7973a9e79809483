"""The people's sockets: ``/ws/v1/queue`` and ``/ws/v1/queue/calls/<id>``.

Origin must be one of ALLOWED_HOSTS, the session must be logged in with a permission to see
the pages (else 4403 after the accept), every connect sends the whole state rendered for that
person from the database, and every change is pushed as htmx out-of-band swaps.
"""

from __future__ import annotations

import re
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client

from approvals.models import Agent, Call, Gate
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import calls_expire_due
from config.asgi import application
from tests.asgi import PROMPTLY
from tests.factories import agent_make, call_make, payment, rule_make, user_make

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = (b"origin", b"http://localhost")
QUEUE = "/ws/v1/queue"


@pytest.fixture
def agent(transactional_db: None) -> Agent:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    return agent_make()


def _session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def logged_in(username: str, *, decide: bool = True, view: bool = False) -> tuple[User, str]:
    """A new user and the cookie header of a logged-in session of theirs."""
    user = await sync_to_async(user_make, thread_sensitive=True)(
        username=username, decide=decide, view=view
    )
    return user, await sync_to_async(_session_cookie, thread_sensitive=True)(user)


async def submit(agent: Agent, amount: str = "1250.00", tool: str = "pay") -> Call:
    """Held by default (over the 500.00 cap); allowed under it."""
    return await sync_to_async(call_make, thread_sensitive=True)(
        agent=agent, tool=tool, arguments=payment(amount)
    )


def _decide(call: Call, user: User, approve: bool, comment: str) -> None:
    call_decide(
        call_id=call.pk,
        user=user,
        approve=approve,
        comment=comment,
        arguments_sha256=call.arguments_sha256,
    )


async def decide(call: Call, user: User, *, approve: bool = True, comment: str = "") -> None:
    await sync_to_async(_decide, thread_sensitive=True)(call, user, approve, comment)


def socket(
    path: str, cookie: str | None, origin: tuple[bytes, bytes] | None = ORIGIN
) -> WebsocketCommunicator:
    headers = [] if origin is None else [origin]
    if cookie is not None:
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def opened(path: str, cookie: str | None) -> WebsocketCommunicator:
    communicator = socket(path, cookie)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def text(communicator: WebsocketCommunicator) -> str:
    """The next message: HTML, as text."""
    message = await communicator.receive_from(PROMPTLY)
    assert isinstance(message, str)
    return message


async def assert_closed(communicator: WebsocketCommunicator, code: int) -> None:
    assert await communicator.receive_output(PROMPTLY) == {"type": "websocket.close", "code": code}
    await communicator.disconnect(code)


def rows(html: str, section: str) -> list[str]:
    """The call ids listed in one section (``mine`` or ``others``) of a queue push."""
    start = html.find(f'id="{section}"')
    if start < 0:
        return []
    end = html.find("</ol>", start)
    return re.findall(r'<li id="call-([0-9a-f-]{36})"', html[start:end])


# --- who may connect --------------------------------------------------------------------------


async def test_a_foreign_origin_is_refused_at_the_handshake(agent: Agent) -> None:
    _, cookie = await logged_in("alice")
    communicator = socket(QUEUE, cookie, (b"origin", b"https://evil.example"))
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


async def test_no_origin_is_refused_at_the_handshake(agent: Agent) -> None:
    _, cookie = await logged_in("alice")
    communicator = socket(QUEUE, cookie, None)
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


async def test_without_a_session_the_socket_closes_with_4403(agent: Agent) -> None:
    await assert_closed(await opened(QUEUE, None), 4403)
    await assert_closed(await opened(QUEUE, "sessionid=forged"), 4403)


async def test_without_a_permission_the_socket_closes_with_4403(agent: Agent) -> None:
    _, cookie = await logged_in("nobody", decide=False)
    await assert_closed(await opened(QUEUE, cookie), 4403)


# --- the queue --------------------------------------------------------------------------------


async def test_connect_sends_the_whole_queue_rendered_for_this_person(agent: Agent) -> None:
    held = await submit(agent)
    await submit(agent, "10.00")  # allowed: never in the queue
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    html = await text(communicator)
    assert html.lstrip().startswith('<section id="queue"')
    assert 'hx-swap-oob="true"' in html
    assert rows(html, "mine") == [str(held.pk)]
    assert "USD 1,250.00" in html
    assert await communicator.receive_nothing(0.2)
    await communicator.disconnect()


async def test_rows_differ_per_person(agent: Agent) -> None:
    held = await submit(agent)
    _, alice = await logged_in("alice")
    _, victor = await logged_in("victor", decide=False, view=True)
    alice_socket, victor_socket = await opened(QUEUE, alice), await opened(QUEUE, victor)
    alice_html, victor_html = (
        await text(alice_socket),
        await text(victor_socket),
    )
    assert rows(alice_html, "mine") == [str(held.pk)]
    assert (rows(victor_html, "mine"), rows(victor_html, "others")) == ([], [str(held.pk)])
    await alice_socket.disconnect()
    await victor_socket.disconnect()


async def test_new_calls_appear_and_decided_ones_leave(agent: Agent) -> None:
    bob, _ = await logged_in("bob")
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    assert rows(await text(communicator), "mine") == []
    first = await submit(agent)
    assert rows(await text(communicator), "mine") == [str(first.pk)]
    second = await submit(agent, "900.00")
    html = await text(communicator)
    assert rows(html, "mine") == [str(first.pk), str(second.pk)]
    assert 'id="mine-count">2<' in html
    await decide(first, bob, comment="ok")
    html = await text(communicator)
    assert rows(html, "mine") == [str(second.pk)]
    assert 'id="mine-count">1<' in html
    await communicator.disconnect()


async def test_expired_calls_leave(agent: Agent) -> None:
    held = await submit(agent)
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    assert rows(await text(communicator), "mine") == [str(held.pk)]
    await sync_to_async(Call.objects.filter(pk=held.pk).update, thread_sensitive=True)(
        expires_at=held.created_at
    )
    await sync_to_async(calls_expire_due, thread_sensitive=True)()
    assert rows(await text(communicator), "mine") == []
    await communicator.disconnect()


async def test_calls_that_never_wait_push_nothing(agent: Agent) -> None:
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    await text(communicator)
    await submit(agent, "10.00")
    assert await communicator.receive_nothing(0.3)
    await communicator.disconnect()


async def test_every_reconnect_renders_from_the_database(agent: Agent) -> None:
    _, cookie = await logged_in("alice")
    first = await opened(QUEUE, cookie)
    await text(first)
    await first.disconnect()
    held = await submit(agent)  # missed while away
    second = await opened(QUEUE, cookie)
    assert rows(await text(second), "mine") == [str(held.pk)]
    await second.disconnect()


async def test_a_logout_ends_the_pushes(agent: Agent) -> None:
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    await text(communicator)
    session_key = cookie.partition("=")[2]

    def log_out() -> None:
        from django.contrib.sessions.models import Session

        Session.objects.filter(session_key=session_key).delete()

    await sync_to_async(log_out, thread_sensitive=True)()
    await submit(agent)
    await assert_closed(communicator, 4403)


async def test_a_lost_permission_ends_the_pushes(agent: Agent) -> None:
    alice, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    await text(communicator)
    await sync_to_async(alice.user_permissions.clear, thread_sensitive=True)()
    await submit(agent)
    await assert_closed(communicator, 4403)


async def test_what_the_page_sends_is_ignored(agent: Agent) -> None:
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    await text(communicator)
    await communicator.send_to(text_data='{"approve": "everything"}')
    assert await communicator.receive_nothing(0.2)
    await communicator.disconnect()


# --- the call page ----------------------------------------------------------------------------


def call_path(call: Call | uuid.UUID) -> str:
    return f"/ws/v1/queue/calls/{call.pk if isinstance(call, Call) else call}"


async def test_the_call_page_gets_its_live_parts_and_keeps_the_form_while_it_is_open(
    agent: Agent,
) -> None:
    await sync_to_async(rule_make, thread_sensitive=True)(
        line="wire: wire arg=amount max USD 100.00 -> gate treasury"
    )
    await sync_to_async(Gate.objects.filter(name="treasury").update, thread_sensitive=True)(
        required_approvals=2
    )
    call = await submit(agent, "200.00", tool="wire")
    alice, _ = await logged_in("alice")
    _, bob_cookie = await logged_in("bob")
    bob = await opened(call_path(call), bob_cookie)
    html = await text(bob)
    assert f'<section id="live-{call.pk}"' in html
    assert f'<section id="audit-{call.pk}"' in html
    assert f'id="decide-{call.pk}"' not in html  # bob may be typing a comment
    assert "0 of 2" in html
    await decide(call, alice, comment="looks right")
    html = await text(bob)
    assert "1 of 2" in html
    assert "approved by alice" in html
    assert f'id="decide-{call.pk}"' not in html
    await decide(call, await sync_to_async(user_make, thread_sensitive=True)(username="dan"))
    html = await text(bob)
    decide_part = re.search(f'<section id="decide-{call.pk}"[^>]*>', html)
    assert decide_part is not None
    assert 'hx-swap-oob="true"' in decide_part[0]
    assert "approved by dan" in html
    assert "call approved" in html
    await bob.disconnect()


async def test_the_call_page_follows_the_ledger_as_other_calls_are_allowed(agent: Agent) -> None:
    await sync_to_async(rule_make, thread_sensitive=True)(
        line="daily: pay arg=amount sum USD 5000.00 per day -> gate"
    )
    call = await submit(agent)
    _, cookie = await logged_in("alice")
    communicator = await opened(call_path(call), cookie)
    html = await text(communicator)
    assert "USD 0.00" in html
    await submit(agent, "100.00")  # allowed: recorded in the daily ledger
    html = await text(communicator)
    assert "<span>USD 100.00</span>" in html
    assert "<strong>USD 1,350.00</strong>" in html
    await communicator.disconnect()


async def test_a_read_only_person_gets_the_decision_part_at_once(agent: Agent) -> None:
    call = await submit(agent)
    _, cookie = await logged_in("victor", decide=False, view=True)
    communicator = await opened(call_path(call), cookie)
    html = await text(communicator)
    assert f'id="decide-{call.pk}"' in html
    assert "may not decide it" in html
    assert "Approve" not in html
    await communicator.disconnect()


async def test_a_call_page_socket_needs_the_session_and_the_call(agent: Agent) -> None:
    call = await submit(agent)
    await assert_closed(await opened(call_path(call), None), 4403)
    _, cookie = await logged_in("alice")
    await assert_closed(await opened(call_path(uuid.uuid4()), cookie), 4404)


async def test_a_group_gate_person_sees_the_call_read_only(agent: Agent) -> None:
    await sync_to_async(rule_make, thread_sensitive=True)(
        line="wire: wire arg=amount max USD 100.00 -> gate treasury"
    )

    def lock_gate() -> None:
        Gate.objects.filter(name="treasury").update(group=Group.objects.create(name="treasury"))

    await sync_to_async(lock_gate, thread_sensitive=True)()
    call = await submit(agent, "200.00", tool="wire")
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    html = await text(communicator)
    assert (rows(html, "mine"), rows(html, "others")) == ([], [str(call.pk)])
    await communicator.disconnect()
