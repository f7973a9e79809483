"""Agent WebSockets: bearer auth and its close codes, state on connect, pushes, expiry."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import Agent, AgentToken, Call
from approvals.realtime import consumers
from approvals.realtime.pushes import call_group
from approvals.selectors.calls import call_state
from approvals.services.agents import (
    agent_save,
    agent_token_revoke,
    agent_token_rotate,
    token_digest,
)
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import EXPIRED_COMMENT, call_extend
from config.asgi import application
from tests.asgi import PROMPTLY
from tests.factories import (
    agent_with_token,
    call_make,
    payment,
    rule_make,
    token_make,
    user_make,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

TOKEN = "cs_bot-token-0123456789"
OTHER_TOKEN = "cs_other-token-0123456789"
IDLE_TOKEN = "cs_idle-token-0123456789"


def make_agent(name: str, token: str, *, active: bool = True) -> Agent:
    agent, _ = agent_with_token(token=token, name=name, active=active)
    return agent


@pytest.fixture
def agent(transactional_db: None) -> Agent:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    return make_agent("bot", TOKEN)


@pytest.fixture
def approver(transactional_db: None) -> User:
    return user_make(username="alice")


@pytest.fixture
def no_sweeper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the socket's own timer can expire anything."""
    monkeypatch.setattr("approvals.realtime.consumers.ensure_sweeper_started", lambda: None)


async def submit(agent: Agent, amount: str = "600.00") -> Call:
    """A held call by default (over the 500.00 cap); an allowed one under it."""
    return await sync_to_async(call_make, thread_sensitive=True)(
        agent=agent, arguments=payment(amount)
    )


def _decide(call: Call, user: User, approve: bool, comment: str) -> Call:
    return call_decide(
        call_id=call.pk,
        user=user,
        approve=approve,
        comment=comment,
        arguments_sha256=call.arguments_sha256,
    )


async def decide(call: Call, user: User, *, approve: bool = True, comment: str = "") -> Call:
    return await sync_to_async(_decide, thread_sensitive=True)(call, user, approve, comment)


def _state(call_id: uuid.UUID) -> dict[str, Any]:
    return call_state(
        Call.objects.select_related("decided_by")
        .prefetch_related("approvals__user")
        .get(pk=call_id)
    )


async def state_of(call: Call) -> dict[str, Any]:
    return await sync_to_async(_state, thread_sensitive=True)(call.pk)


async def set_deadline(call: Call, seconds: float) -> None:
    deadline = timezone.now() + timedelta(seconds=seconds)
    await sync_to_async(Call.objects.filter(pk=call.pk).update, thread_sensitive=True)(
        expires_at=deadline
    )


def socket(
    path: str, token: str | None = TOKEN, *extra: tuple[bytes, bytes]
) -> WebsocketCommunicator:
    headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
    return WebsocketCommunicator(application, path, headers=[*headers, *extra])


async def opened(
    path: str, token: str | None = TOKEN, *extra: tuple[bytes, bytes]
) -> WebsocketCommunicator:
    communicator = socket(path, token, *extra)
    connected, _ = await communicator.connect()
    assert connected  # refusals are close codes after the accept, never a bare 403
    return communicator


async def receive_call(
    communicator: WebsocketCommunicator, timeout: float = PROMPTLY
) -> dict[str, Any]:
    message = await communicator.receive_json_from(timeout)
    assert message["type"] == "call"
    call: dict[str, Any] = message["call"]
    return call


async def assert_closed(communicator: WebsocketCommunicator, code: int) -> None:
    """The next thing the socket does is close with ``code``: no state was sent before."""
    assert await communicator.receive_output(PROMPTLY) == {"type": "websocket.close", "code": code}
    await communicator.disconnect(code)


def call_path(call: Call | uuid.UUID) -> str:
    return f"/ws/v1/calls/{call.pk if isinstance(call, Call) else call}"


# --- /ws/v1/calls/<id> ----------------------------------------------------------------------


async def test_connect_sends_the_current_state(agent: Agent) -> None:
    call = await submit(agent)
    # Agents send no Origin (or any Origin): agent routes have no browser Origin check.
    communicator = await opened(call_path(call), TOKEN, (b"origin", b"https://elsewhere.example"))
    state = await receive_call(communicator)
    assert state == await state_of(call)
    assert state["status"] == "pending"
    assert state["links"]["ws"] == call_path(call)
    assert await communicator.receive_nothing(0.2)
    await communicator.disconnect()


async def test_approval_is_pushed_as_the_final_state_then_closes(
    agent: Agent, approver: User
) -> None:
    call = await submit(agent)
    communicator = await opened(call_path(call))
    assert (await receive_call(communicator))["status"] == "pending"
    await decide(call, approver, comment="paid, thanks")
    state = await receive_call(communicator)
    assert state["status"] == "approved"
    assert state["decision"]["by"] == "alice"
    assert state["decision"]["comment"] == "paid, thanks"
    assert [approval["by"] for approval in state["approvals"]] == ["alice"]
    assert state["expires_at"] is None
    # The receipt signed in the decision's transaction comes with the push (docs/receipts.md).
    assert state["receipt"] is not None
    assert state["receipt"] == (await state_of(call))["receipt"]
    await assert_closed(communicator, 1000)


async def test_denial_is_pushed_with_the_reviewers_comment(agent: Agent, approver: User) -> None:
    call = await submit(agent)
    communicator = await opened(call_path(call))
    await receive_call(communicator)
    await decide(call, approver, approve=False, comment="too much")
    state = await receive_call(communicator)
    assert (state["status"], state["decision"]["comment"]) == ("denied", "too much")
    assert state["receipt"] is None
    await assert_closed(communicator, 1000)


async def test_connecting_after_the_decision_gets_the_final_state_and_a_close(
    agent: Agent, approver: User
) -> None:
    call = await submit(agent)
    await decide(call, approver, comment="ok")
    communicator = await opened(call_path(call))
    state = await receive_call(communicator)
    assert (state["status"], state["decision"]["comment"]) == ("approved", "ok")
    await assert_closed(communicator, 1000)


async def test_a_call_allowed_at_once_is_final_at_connect(agent: Agent) -> None:
    call = await submit(agent, "12.50")
    communicator = await opened(call_path(call))
    state = await receive_call(communicator)
    assert state["status"] == "allowed"
    assert state["receipt"] == call.receipt != ""
    await assert_closed(communicator, 1000)


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer not-a-token")],
        [(b"authorization", f"Basic {TOKEN}".encode())],
        [(b"authorization", b"Bearer ")],
        # A session cookie never authenticates an agent socket.
        [(b"cookie", f"sessionid={TOKEN}".encode())],
    ],
    ids=["missing", "unknown", "not-bearer", "empty", "cookie-only"],
)
async def test_a_bad_token_is_closed_with_4401(
    agent: Agent, headers: list[tuple[bytes, bytes]]
) -> None:
    call = await submit(agent)
    communicator = await opened(call_path(call), None, *headers)
    await assert_closed(communicator, 4401)


async def test_a_revoked_token_is_closed_with_4401(agent: Agent) -> None:
    call = await submit(agent)
    await sync_to_async(AgentToken.objects.filter(agent=agent).update, thread_sensitive=True)(
        revoked_at=timezone.now()
    )
    await assert_closed(await opened(call_path(call)), 4401)


async def test_another_agents_call_or_a_missing_one_is_closed_with_4404(agent: Agent) -> None:
    call = await submit(agent)
    await sync_to_async(make_agent, thread_sensitive=True)("other", OTHER_TOKEN)
    await assert_closed(await opened(call_path(call), OTHER_TOKEN), 4404)
    await assert_closed(await opened(call_path(uuid.uuid4())), 4404)


async def test_a_disabled_agent_is_closed_with_4403(agent: Agent) -> None:
    idle = await sync_to_async(make_agent, thread_sensitive=True)("idle", IDLE_TOKEN, active=False)
    call = await submit(agent)
    await sync_to_async(Call.objects.filter(pk=call.pk).update, thread_sensitive=True)(agent=idle)
    await assert_closed(await opened(call_path(call), IDLE_TOKEN), 4403)


async def test_the_socket_expires_its_call_at_the_deadline_by_itself(
    agent: Agent, no_sweeper: None
) -> None:
    call = await submit(agent)
    await set_deadline(call, 1)
    communicator = await opened(call_path(call))
    assert (await receive_call(communicator))["status"] == "pending"
    state = await receive_call(communicator)  # nothing else expires it: no sweeper runs
    assert state["status"] == "expired"
    assert state["decision"] == {
        "by": None,
        "comment": EXPIRED_COMMENT,
        "at": state["decision"]["at"],
    }
    await assert_closed(communicator, 1000)


async def test_an_extended_deadline_is_pushed_and_the_old_one_no_longer_expires(
    agent: Agent, approver: User, no_sweeper: None
) -> None:
    call = await submit(agent)
    await set_deadline(call, 1)
    communicator = await opened(call_path(call))
    first = await receive_call(communicator)
    await sync_to_async(call_extend, thread_sensitive=True)(call_id=call.pk, user=approver)
    extended = await receive_call(communicator)
    assert extended["status"] == "pending"
    assert extended["expires_at"] > first["expires_at"]
    # The first deadline passes: nothing happens, the call waits for the new one.
    assert await communicator.receive_nothing(1.5)
    assert (await state_of(call))["status"] == "pending"
    await communicator.disconnect()


async def test_a_decision_whose_push_was_lost_reaches_the_open_socket(
    agent: Agent, approver: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The channel layer may drop a push while the socket stays open: the socket reads the
    call again on its own."""
    monkeypatch.setattr("approvals.realtime.call_waiter.RECHECK_SECONDS", 0.3)
    call = await submit(agent)
    communicator = await opened(call_path(call))
    assert (await receive_call(communicator))["status"] == "pending"
    monkeypatch.setattr(
        "approvals.realtime.pushes.get_channel_layer", lambda: None
    )  # the push is lost
    await decide(call, approver, approve=True, comment="fine")
    state = await receive_call(communicator)
    assert (state["status"], state["decision"]["comment"]) == ("approved", "fine")
    await assert_closed(communicator, 1000)


async def test_a_repeated_push_is_not_sent_again(agent: Agent) -> None:
    call = await submit(agent)
    communicator = await opened(call_path(call))
    state = await receive_call(communicator)
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(call_group(call.pk), {"type": "call.changed", "call": state})
    assert await communicator.receive_nothing(0.3)
    await communicator.disconnect()


async def test_client_frames_are_ignored(agent: Agent) -> None:
    call = await submit(agent)
    communicator = await opened(call_path(call))
    await receive_call(communicator)
    await communicator.send_to(text_data="not json")
    await communicator.send_to(bytes_data=b"\x00")
    assert await communicator.receive_nothing(0.2)
    await communicator.disconnect()


# --- /ws/v1/agent ---------------------------------------------------------------------------


async def test_the_agent_stream_sends_pending_calls_then_changes(
    agent: Agent, approver: User
) -> None:
    first = await submit(agent)
    await submit(agent, "12.50")  # allowed: not pending, not sent
    second = await submit(agent)
    other = await sync_to_async(make_agent, thread_sensitive=True)("other", OTHER_TOKEN)
    await submit(other)  # another agent's: never sent
    communicator = await opened("/ws/v1/agent")
    assert [(await receive_call(communicator))["id"] for _ in range(2)] == [
        str(first.pk),
        str(second.pk),
    ]
    assert await communicator.receive_nothing(0.2)
    await decide(second, approver, comment="fine")
    state = await receive_call(communicator)
    assert (state["id"], state["status"]) == (str(second.pk), "approved")
    assert state["decision"]["comment"] == "fine"
    await submit(other)
    later = await submit(agent)
    assert (await receive_call(communicator))["id"] == str(later.pk)
    await communicator.disconnect()


async def test_since_sends_every_call_changed_since_oldest_first(agent: Agent) -> None:
    old = await submit(agent, "1.00")
    await sync_to_async(Call.objects.filter(pk=old.pk).update, thread_sensitive=True)(
        updated_at=timezone.now() - timedelta(hours=2)
    )
    allowed = await submit(agent, "12.50")
    held = await submit(agent)
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    communicator = await opened(f"/ws/v1/agent?{urlencode({'since': since})}")
    states = [await receive_call(communicator) for _ in range(2)]
    assert [(s["id"], s["status"]) for s in states] == [
        (str(allowed.pk), "allowed"),
        (str(held.pk), "pending"),
    ]
    assert await communicator.receive_nothing(0.2)
    await communicator.disconnect()


async def test_since_accepts_a_z_time_and_an_unencoded_offset(agent: Agent) -> None:
    call = await submit(agent, "12.50")
    for since in ("2000-01-01T00:00:00Z", "2000-01-01T00:00:00+00:00"):
        communicator = await opened(f"/ws/v1/agent?since={since}")
        assert (await receive_call(communicator))["id"] == str(call.pk)
        await communicator.disconnect()


@pytest.mark.parametrize("since", ["yesterday", "", "2026-13-01T00:00:00Z", "1"])
async def test_a_malformed_since_is_closed_with_4400(agent: Agent, since: str) -> None:
    await submit(agent)
    await assert_closed(await opened(f"/ws/v1/agent?{urlencode({'since': since})}"), 4400)


async def test_the_agent_stream_authenticates_like_the_call_socket(agent: Agent) -> None:
    await assert_closed(await opened("/ws/v1/agent", "wrong"), 4401)
    await sync_to_async(make_agent, thread_sensitive=True)("idle", IDLE_TOKEN, active=False)
    await assert_closed(await opened("/ws/v1/agent", IDLE_TOKEN), 4403)


# --- access taken away (docs/reliability.md, "Access ends when it is taken away") ------------


def _token_row(token: str) -> AgentToken:
    return AgentToken.objects.get(digest=token_digest(token))


async def revoke(token: str) -> None:
    row = await sync_to_async(_token_row, thread_sensitive=True)(token)
    await sync_to_async(agent_token_revoke, thread_sensitive=True)(token_row=row)


def _disable(agent: Agent) -> None:
    agent.active = False
    agent_save(agent=agent)


async def test_revoking_the_token_closes_both_kinds_of_open_socket_with_4401(
    agent: Agent,
) -> None:
    call = await submit(agent)
    on_call = await opened(call_path(call))
    await receive_call(on_call)
    stream = await opened("/ws/v1/agent")
    await receive_call(stream)
    await revoke(TOKEN)
    await assert_closed(on_call, 4401)
    await assert_closed(stream, 4401)


async def test_revoking_another_token_of_the_agent_leaves_the_socket_open(
    agent: Agent,
) -> None:
    second = await sync_to_async(token_make, thread_sensitive=True)(agent=agent)
    stream = await opened("/ws/v1/agent")
    await revoke(second)
    assert await stream.receive_nothing(0.3)
    later = await submit(agent)
    assert (await receive_call(stream))["id"] == str(later.pk)
    await stream.disconnect()


async def test_rotating_the_tokens_closes_the_socket_and_the_new_token_connects(
    agent: Agent,
) -> None:
    stream = await opened("/ws/v1/agent")
    new = await sync_to_async(agent_token_rotate, thread_sensitive=True)(agent=agent)
    await assert_closed(stream, 4401)
    again = await opened("/ws/v1/agent", new)
    later = await submit(agent)
    assert (await receive_call(again))["id"] == str(later.pk)
    await again.disconnect()


async def test_disabling_the_agent_closes_both_kinds_of_open_socket_with_4403(
    agent: Agent,
) -> None:
    call = await submit(agent)
    on_call = await opened(call_path(call))
    await receive_call(on_call)
    stream = await opened("/ws/v1/agent")
    await receive_call(stream)
    await sync_to_async(_disable, thread_sensitive=True)(agent)
    await assert_closed(on_call, 4403)
    await assert_closed(stream, 4403)


async def test_a_revocation_between_authentication_and_listening_is_not_missed(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Revoked (without a push reaching the socket) just after the token was read: the read
    made once the socket listens finds it."""
    real = consumers._bearer_of

    async def read_then_revoke(headers: Any) -> Any:
        found = await real(headers)
        await sync_to_async(AgentToken.objects.filter(pk=found.token_id).update)(
            revoked_at=timezone.now()
        )
        return found

    monkeypatch.setattr(consumers, "_bearer_of", read_then_revoke)
    call = await submit(agent)
    await assert_closed(await opened(call_path(call)), 4401)
    await assert_closed(await opened("/ws/v1/agent"), 4401)


async def test_a_lost_close_message_is_made_up_for_by_the_recheck(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", 0.2)
    stream = await opened("/ws/v1/agent")
    # Revoked behind the services' back: no push.
    await sync_to_async(AgentToken.objects.filter(agent=agent).update, thread_sensitive=True)(
        revoked_at=timezone.now()
    )
    await assert_closed(stream, 4401)


# --- fair sockets -----------------------------------------------------------------------------


async def test_one_socket_past_the_agents_cap_is_closed_with_4429(
    agent: Agent, settings: Any
) -> None:
    settings.COUNTERSIGN_MAX_SOCKETS_PER_AGENT = 2
    call = await submit(agent)
    first = await opened(call_path(call))
    await receive_call(first)
    second = await opened("/ws/v1/agent")
    await receive_call(second)
    await assert_closed(await opened("/ws/v1/agent"), 4429)
    # Another agent has a cap of its own.
    await sync_to_async(make_agent, thread_sensitive=True)("other", OTHER_TOKEN)
    other = await opened("/ws/v1/agent", OTHER_TOKEN)
    assert await other.receive_nothing(0.2)
    await other.disconnect()
    # A socket that closes frees its place.
    await first.disconnect()
    third = await opened(call_path(call))
    assert (await receive_call(third))["id"] == str(call.pk)
    await third.disconnect()
    await second.disconnect()


async def test_refused_sockets_do_not_count(agent: Agent, settings: Any) -> None:
    settings.COUNTERSIGN_MAX_SOCKETS_PER_AGENT = 1
    for _ in range(3):
        await assert_closed(await opened(call_path(uuid.uuid4())), 4404)
        await assert_closed(await opened("/ws/v1/agent?since=x"), 4400)
    stream = await opened("/ws/v1/agent")
    assert await stream.receive_nothing(0.2)
    await stream.disconnect()
