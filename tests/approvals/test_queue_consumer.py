"""The people's sockets: ``/ws/v1/queue`` and ``/ws/v1/queue/calls/<id>``.

Origin must be the site's own (scheme, host and port of the Host header, that host one of
ALLOWED_HOSTS) or one of CSRF_TRUSTED_ORIGINS, the session must be logged in with a
permission to see the pages (else 4403 after the accept), every connect sends the whole state
rendered for that person from the database, and every change is pushed as htmx out-of-band
swaps, rendered once per person however many sockets they have open. A logout, a lost
session or an expired one ends the socket; one socket past the person's cap gets 4429.
"""

from __future__ import annotations

import asyncio
import html
import re
import uuid
import weakref
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from approvals.models import Agent, Call, Gate
from approvals.realtime import consumers, pushes
from approvals.realtime.queue_updates import QueuePush
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import calls_expire_due
from config.asgi import application
from tests.asgi import PROMPTLY
from tests.factories import agent_make, call_make, payment, rule_make, user_make
from tests.shown_queue import ShownQueue

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = (b"origin", b"http://localhost")
HOST = (b"host", b"localhost")
QUEUE = "/ws/v1/queue"


@pytest.fixture
def agent(transactional_db: None) -> Agent:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    return agent_make()


def _session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def _client_of(cookie: str) -> Client:
    """A test client on the session of this cookie header."""
    client = Client()
    client.cookies["sessionid"] = cookie.partition("=")[2]
    return client


async def log_out(cookie: str) -> None:
    """Django's logout of this session (its ``user_logged_out`` signal included)."""
    await sync_to_async(lambda: _client_of(cookie).logout(), thread_sensitive=True)()


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
    path: str,
    cookie: str | None,
    origin: tuple[bytes, bytes] | None = ORIGIN,
    host: tuple[bytes, bytes] = HOST,
) -> WebsocketCommunicator:
    headers = [host] if origin is None else [host, origin]
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


_shown: weakref.WeakKeyDictionary[WebsocketCommunicator, ShownQueue] = weakref.WeakKeyDictionary()


async def queue_text(communicator: WebsocketCommunicator) -> str:
    """The queue as this socket's page shows it after the next push."""
    return _shown.setdefault(communicator, ShownQueue()).apply(await text(communicator))


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


async def test_the_queue_is_pushed_as_ascii_that_reads_as_the_page_does() -> None:
    """Every socket encodes the push again: ASCII costs it a copy, anything else a
    transcoding. Non-ASCII text arrives as character references, read as the same text."""
    await sync_to_async(rule_make, thread_sensitive=True)(
        line="big: pay arg=amount max USD 500.00 -> gate"
    )
    zoe = await sync_to_async(agent_make, thread_sensitive=True)(name="zoë-bot", principal="zoë")
    await submit(zoe)
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    pushed = await text(communicator)
    assert pushed.isascii()
    assert "zo&#235;" in pushed
    shown = html.unescape(pushed)
    assert '<span class="agent">zoë-bot</span>' in shown
    assert 'data-title="(1) Queue · Countersign"' in shown
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
    assert rows(await queue_text(communicator), "mine") == []
    first = await submit(agent)
    assert rows(await queue_text(communicator), "mine") == [str(first.pk)]
    second = await submit(agent, "900.00")
    html = await queue_text(communicator)
    assert rows(html, "mine") == [str(first.pk), str(second.pk)]
    assert 'id="mine-count">2<' in html
    await decide(first, bob, comment="ok")
    html = await queue_text(communicator)
    assert rows(html, "mine") == [str(second.pk)]
    assert 'id="mine-count">1<' in html
    await communicator.disconnect()


async def test_a_change_sends_only_the_rows_that_changed(agent: Agent) -> None:
    """After the whole queue, a socket is sent the difference: the new row added at the end
    of its section, a decided row deleted, and the heads with the counts; never the rows it
    already shows. A socket opened meanwhile gets the whole queue, then differences too."""
    bob, _ = await logged_in("bob")
    _, cookie = await logged_in("alice")
    first = await submit(agent)
    communicator = await opened(QUEUE, cookie)
    await queue_text(communicator)
    second = await submit(agent, "900.00")
    added = await text(communicator)
    assert not added.lstrip().startswith('<section id="queue"')
    assert re.search(f'<ol hx-swap-oob="beforeend:#mine">\\s*<li id="call-{second.pk}"', added)
    assert f"call-{first.pk}" not in added
    assert 'id="mine-count">2<' in added
    assert 'id="queue-head" data-title="(2) Queue' in added
    late = await opened(QUEUE, cookie)
    whole = await text(late)
    assert whole.lstrip().startswith('<section id="queue"')
    assert rows(ShownQueue().apply(whole), "mine") == [str(first.pk), str(second.pk)]
    await decide(first, bob, comment="ok")
    removed = await text(communicator)
    assert f'<li id="call-{first.pk}" hx-swap-oob="delete"></li>' in removed
    assert f"call-{second.pk}" not in removed
    # Each socket gets the difference from what it was last sent.
    assert await text(late) == removed
    for socket_ in (communicator, late):
        await socket_.disconnect()


async def test_expired_calls_leave(agent: Agent) -> None:
    held = await submit(agent)
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    assert rows(await queue_text(communicator), "mine") == [str(held.pk)]
    await sync_to_async(Call.objects.filter(pk=held.pk).update, thread_sensitive=True)(
        expires_at=held.created_at
    )
    await sync_to_async(calls_expire_due, thread_sensitive=True)()
    assert rows(await queue_text(communicator), "mine") == []
    await communicator.disconnect()


async def test_a_held_call_refused_when_approved_leaves(agent: Agent) -> None:
    """A cap rule written while the call waits refuses it when its approval re-checks it."""
    held = await submit(agent)
    bob, _ = await logged_in("bob")
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    assert rows(await queue_text(communicator), "mine") == [str(held.pk)]
    await sync_to_async(rule_make, thread_sensitive=True)(
        line="ceiling: pay arg=amount sum USD 1000.00 -> refuse"
    )
    await decide(held, bob)
    assert rows(await queue_text(communicator), "mine") == []
    assert (await sync_to_async(Call.objects.get)(pk=held.pk)).status == "refused"
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


# --- origins ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        # Another port of the same host: cookies ignore ports, the Origin check must not.
        (b"http://localhost:9999", b"localhost"),
        (b"http://localhost", b"localhost:8222"),
        (b"http://localhost:9999", b"localhost:8222"),
        (b"https://localhost", b"localhost"),  # another scheme
        (b"http://127.0.0.1", b"localhost"),  # another host, though allowed
        (b"http://evil.example", b"evil.example"),  # a Host not in ALLOWED_HOSTS
        (b"null", b"localhost"),
        (b"http://localhost/queue", b"localhost"),
    ],
)
async def test_any_other_origin_is_refused_at_the_handshake(
    agent: Agent, origin: bytes, host: bytes
) -> None:
    _, cookie = await logged_in("alice")
    communicator = socket(QUEUE, cookie, (b"origin", origin), (b"host", host))
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        (b"http://localhost:8222", b"localhost:8222"),
        (b"http://LOCALHOST:80", b"localhost"),  # the scheme's default port, spelled out
        (b"http://127.0.0.1:8222", b"127.0.0.1:8222"),
    ],
)
async def test_the_sites_own_origin_is_let_through(
    agent: Agent, origin: bytes, host: bytes
) -> None:
    _, cookie = await logged_in("alice")
    communicator = socket(QUEUE, cookie, (b"origin", origin), (b"host", host))
    connected, _ = await communicator.connect()
    assert connected
    assert 'id="queue"' in await text(communicator)
    await communicator.disconnect()


async def test_a_trusted_origin_is_let_through(agent: Agent, settings: Any) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["https://approvals.example", "https://*.corp.example"]
    _, cookie = await logged_in("alice")
    for origin in (b"https://approvals.example", b"https://queue.corp.example"):
        communicator = socket(QUEUE, cookie, (b"origin", origin), (b"host", b"localhost:8000"))
        connected, _ = await communicator.connect()
        assert connected
        await communicator.disconnect()
    communicator = socket(QUEUE, cookie, (b"origin", b"https://approvals.example:8443"))
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


async def test_behind_a_tls_proxy_the_origin_is_https(agent: Agent, settings: Any) -> None:
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    _, cookie = await logged_in("alice")
    communicator = WebsocketCommunicator(
        application,
        QUEUE,
        headers=[
            (b"host", b"localhost"),
            (b"origin", b"https://localhost"),
            (b"x-forwarded-proto", b"https"),
            (b"cookie", cookie.encode()),
        ],
    )
    connected, _ = await communicator.connect()
    assert connected
    await communicator.disconnect()


# --- access taken away ------------------------------------------------------------------------


async def test_a_logout_closes_that_sessions_sockets_at_once_and_no_other(agent: Agent) -> None:
    call = await submit(agent)
    alice, cookie = await logged_in("alice")
    other_cookie = await sync_to_async(_session_cookie, thread_sensitive=True)(alice)
    here, there = await opened(QUEUE, cookie), await opened(QUEUE, other_cookie)
    page = await opened(call_path(call), cookie)
    await text(here), await queue_text(there), await text(page)
    await log_out(cookie)
    await assert_closed(here, 4403)  # with no change to push: the logout itself closes it
    await assert_closed(page, 4403)
    assert await there.receive_nothing(0.3)  # another browser stays logged in
    await submit(agent)
    assert len(rows(await queue_text(there), "mine")) == 2
    await there.disconnect()


async def test_person_sockets_close_ends_every_session_of_the_person(agent: Agent) -> None:
    alice, cookie = await logged_in("alice")
    other_cookie = await sync_to_async(_session_cookie, thread_sensitive=True)(alice)
    _, bob_cookie = await logged_in("bob")
    sockets = [await opened(QUEUE, cookie), await opened(QUEUE, other_cookie)]
    bob = await opened(QUEUE, bob_cookie)
    for communicator in [*sockets, bob]:
        await text(communicator)
    await sync_to_async(pushes.person_sockets_close, thread_sensitive=True)(user_id=alice.pk)
    for communicator in sockets:
        await assert_closed(communicator, 4403)
    assert await bob.receive_nothing(0.3)
    await bob.disconnect()


async def test_a_changed_password_ends_the_pushes_even_without_a_close_message(
    agent: Agent,
) -> None:
    alice, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    await text(communicator)
    # Behind every signal's back: only the check before the push can notice.
    await sync_to_async(User.objects.filter(pk=alice.pk).update, thread_sensitive=True)(
        password=make_password("something else")
    )
    await submit(agent)
    await assert_closed(communicator, 4403)


async def test_a_deactivated_person_gets_no_further_push(agent: Agent) -> None:
    alice, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    await text(communicator)
    await sync_to_async(User.objects.filter(pk=alice.pk).update, thread_sensitive=True)(
        is_active=False
    )
    await submit(agent)
    await assert_closed(communicator, 4403)


def _expire_in(cookie: str, seconds: float) -> None:
    Session.objects.filter(session_key=cookie.partition("=")[2]).update(
        expire_date=timezone.now() + timedelta(seconds=seconds)
    )


async def test_a_session_that_expires_closes_its_socket_at_its_expiry(agent: Agent) -> None:
    _, cookie = await logged_in("alice")
    await sync_to_async(_expire_in, thread_sensitive=True)(cookie, 1)
    communicator = await opened(QUEUE, cookie)
    await text(communicator)
    # Nothing is pushed and nothing else happens: the expiry remembered at connect does it.
    await assert_closed(communicator, 4403)


async def test_the_session_is_checked_every_minute_without_pushes(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumers, "SESSION_RECHECK_SECONDS", 0.2)
    _, cookie = await logged_in("alice")
    communicator = await opened(QUEUE, cookie)
    await text(communicator)
    await sync_to_async(
        Session.objects.filter(session_key=cookie.partition("=")[2]).delete,
        thread_sensitive=True,
    )()
    await assert_closed(communicator, 4403)


# --- fair sockets -----------------------------------------------------------------------------


async def test_one_socket_past_the_persons_cap_is_closed_with_4429(agent: Agent) -> None:
    call = await submit(agent)
    _, cookie = await logged_in("alice")
    _, bob_cookie = await logged_in("bob")
    open_sockets = []
    for index in range(20):  # the default cap, queue and call pages alike
        communicator = await opened(QUEUE if index % 2 else call_path(call), cookie)
        await text(communicator)
        open_sockets.append(communicator)
    await assert_closed(await opened(QUEUE, cookie), 4429)
    bob = await opened(QUEUE, bob_cookie)  # another person has a cap of their own
    await text(bob)
    await open_sockets.pop().disconnect()
    again = await opened(QUEUE, cookie)
    await text(again)
    for communicator in [*open_sockets, again, bob]:
        await communicator.disconnect()


async def test_a_change_is_rendered_once_for_all_of_a_persons_sockets(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    renders: list[int] = []
    real = consumers._queue_push_async

    async def counted(user_id: int) -> QueuePush | None:
        renders.append(user_id)
        return await real(user_id)

    monkeypatch.setattr(consumers, "_queue_push_async", counted)
    alice, cookie = await logged_in("alice")
    bob, bob_cookie = await logged_in("bob")
    alices = [await opened(QUEUE, cookie) for _ in range(8)]
    bobs = [await opened(QUEUE, bob_cookie) for _ in range(4)]
    for communicator in [*alices, *bobs]:
        await text(communicator)
    renders.clear()
    held = await submit(agent)
    pushed = await asyncio.gather(*(text(communicator) for communicator in [*alices, *bobs]))
    assert all(rows(html, "mine") == [str(held.pk)] for html in pushed)
    assert sorted(renders) == sorted([alice.pk, bob.pk])  # one per person, not per socket
    for communicator in [*alices, *bobs]:
        await communicator.disconnect()
