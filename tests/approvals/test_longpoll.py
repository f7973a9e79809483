"""GET /api/v1/calls/{id}/wait through the real ASGI application (no thread per waiter)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import ApplicationCommunicator, HttpCommunicator
from django.utils import timezone

from approvals.api import errors
from approvals.models import Agent, AgentToken, Call
from approvals.services.agents import agent_save, agent_token_revoke
from approvals.services.decisions import call_decide
from config.asgi import application
from tests.asgi import PROMPTLY, finished
from tests.factories import agent_with_token, call_make, payment, rule_make, user_make

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]
TOKEN = "cs_longpoll-test-token"


def _held_call(token: str = TOKEN, name: str = "bot") -> Call:
    agent, _ = agent_with_token(token=token, name=name)
    rule_make(line=f"big-{name}: pay arg=amount max USD 500.00 -> gate")
    call = call_make(agent=agent, arguments=payment("600.00"))
    assert call.status == "pending"
    return call


def _decide(call: Call, *, approve: bool, comment: str) -> None:
    call_decide(
        call_id=call.pk,
        user=user_make(username="alice"),
        approve=approve,
        comment=comment,
        arguments_sha256=call.arguments_sha256,
    )


def _wait(
    call_id: object, query: str = "timeout=30", token: str = TOKEN, method: str = "GET"
) -> HttpCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return HttpCommunicator(
        application, method, f"/api/v1/calls/{call_id}/wait?{query}", headers=headers
    )


async def _answer(
    communicator: HttpCommunicator, timeout: float = PROMPTLY
) -> tuple[int, dict[str, Any]]:
    response = await finished(communicator, timeout)
    return response["status"], json.loads(response["body"])


async def test_an_approval_reaches_the_waiting_agent_at_once() -> None:
    call = await sync_to_async(_held_call)()
    waiter = _wait(call.pk)
    answer = asyncio.ensure_future(_answer(waiter))
    await asyncio.sleep(0.3)
    assert not answer.done()
    await sync_to_async(_decide)(call, approve=True, comment="go ahead")
    status, state = await answer  # long before the wait's own 30 s are up
    assert status == 200
    assert state["status"] == "approved"
    assert state["decision"]["comment"] == "go ahead"
    assert state["decision"]["by"] == "alice"
    # The receipt signed in the decision's transaction comes with the push (docs/receipts.md).
    stored = await sync_to_async(Call.objects.get)(pk=call.pk)
    assert state["receipt"] == stored.receipt != ""


async def test_a_deny_returns_the_comment() -> None:
    call = await sync_to_async(_held_call)()
    answer = asyncio.ensure_future(_answer(_wait(call.pk)))
    await asyncio.sleep(0.2)
    await sync_to_async(_decide)(call, approve=False, comment="not this payee")
    status, state = await answer
    assert (status, state["status"], state["decision"]["comment"], state["receipt"]) == (
        200,
        "denied",
        "not this payee",
        None,
    )


async def test_a_decision_made_before_the_wait_is_answered_first_thing() -> None:
    call = await sync_to_async(_held_call)()
    await sync_to_async(_decide)(call, approve=True, comment="")
    status, state = await _answer(_wait(call.pk))
    assert (status, state["status"]) == (200, "approved")


async def test_timeout_answers_with_the_state_as_it_is() -> None:
    call = await sync_to_async(_held_call)()
    started = asyncio.get_running_loop().time()
    status, state = await _answer(_wait(call.pk, "timeout=1"))
    assert (status, state["status"]) == (200, "pending")
    assert asyncio.get_running_loop().time() - started >= 0.9
    status, state = await _answer(_wait(call.pk, "timeout=0"))
    assert (status, state["status"]) == (200, "pending")


async def test_the_deadline_expires_the_call_for_the_waiter() -> None:
    call = await sync_to_async(_held_call)()
    soon = timezone.now() + timedelta(seconds=1)
    await sync_to_async(Call.objects.filter(pk=call.pk).update)(expires_at=soon)
    status, state = await _answer(_wait(call.pk, "timeout=30"))
    assert (status, state["status"]) == (200, "expired")
    assert state["decision"]["by"] is None


@pytest.mark.parametrize(
    "query", ["timeout=abc", "timeout=-1", "timeout=61", "timeout=1.5", "timeout=", "timeout=%00"]
)
async def test_a_bad_timeout_is_400_naming_the_parameter_and_its_range(query: str) -> None:
    call = await sync_to_async(_held_call)()
    status, body = await _answer(_wait(call.pk, query))
    assert status == 400
    assert body["error"] == {
        "code": "bad_request",
        "message": "The query parameter timeout is malformed or out of range (0 to 60).",
    }


async def test_the_timeout_range_is_the_servers_own(settings: Any) -> None:
    settings.COUNTERSIGN_MAX_WAIT = 5
    call = await sync_to_async(_held_call)()
    _, body = await _answer(_wait(call.pk, "timeout=6"))
    assert body["error"]["message"] == errors.BAD_QUERY.format(
        name="timeout", expected=errors.QUERY_RANGE.format(low=0, high=5)
    )


async def test_without_a_token_it_is_401_with_the_challenge() -> None:
    call = await sync_to_async(_held_call)()
    response = await finished(_wait(call.pk, token=""), PROMPTLY)
    assert response["status"] == 401
    assert (b"www-authenticate", b"Bearer") in response["headers"]


async def test_another_agents_call_and_a_malformed_id_are_404() -> None:
    call = await sync_to_async(_held_call)()
    await sync_to_async(_held_call)(token="cs_other-agent-token", name="other")
    status, _ = await _answer(_wait(call.pk, token="cs_other-agent-token"))
    assert status == 404
    status, _ = await _answer(_wait("not-a-uuid"))
    assert status == 404


async def test_other_methods_are_405() -> None:
    call = await sync_to_async(_held_call)()
    status, body = await _answer(_wait(call.pk, method="POST"))
    assert (status, body["error"]["code"]) == (405, "method_not_allowed")


async def _waiting(call: Call) -> ApplicationCommunicator:
    """A 30 s long-poll on ``call``, sent and left waiting."""
    communicator = ApplicationCommunicator(  # type: ignore[no-untyped-call]
        application,
        {
            "type": "http",
            "method": "GET",
            "path": f"/api/v1/calls/{call.pk}/wait",
            "query_string": b"timeout=30",
            "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
        },
    )
    await communicator.send_input({"type": "http.request", "body": b""})
    await asyncio.sleep(0.3)
    return communicator


async def test_a_client_that_goes_away_ends_the_wait() -> None:
    call = await sync_to_async(_held_call)()
    communicator = await _waiting(call)
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=PROMPTLY)  # the app returned on its own, long before 30 s
    assert await communicator.receive_nothing(timeout=0.1)


async def test_a_wait_the_stopping_server_cancels_is_answered_503_to_wait_again() -> None:
    """Past its graceful shutdown the server cancels what still runs: the long-poll answers
    ``503`` with Retry-After (the clients wait again), not the server's bare ``500``."""
    call = await sync_to_async(_held_call)()
    communicator = await _waiting(call)
    communicator.future.cancel()  # as uvicorn does to the requests still running
    start = await communicator.receive_output(timeout=PROMPTLY)
    body = await communicator.receive_output(timeout=PROMPTLY)
    assert start["status"] == 503
    assert (b"retry-after", b"1") in start["headers"]
    assert json.loads(body["body"])["error"]["code"] == "unavailable"


class _BrokenLayer:
    """A channel layer whose server has gone away."""

    async def new_channel(self) -> str:
        raise ConnectionError("redis is restarting")


async def test_without_a_channel_layer_the_waiter_reads_the_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("approvals.api.longpoll.get_channel_layer", lambda: _BrokenLayer())
    call = await sync_to_async(_held_call)()
    answer = asyncio.ensure_future(_answer(_wait(call.pk)))
    await asyncio.sleep(0.3)
    assert not answer.done()
    await sync_to_async(_decide)(call, approve=True, comment="seen in the database")
    status, state = await answer
    assert (status, state["status"], state["decision"]["comment"]) == (
        200,
        "approved",
        "seen in the database",
    )


def _revoke_all(call: Call) -> None:
    for row in AgentToken.objects.filter(agent_id=call.agent_id):
        agent_token_revoke(token_row=row)


def _disable(call: Call) -> None:
    agent = Agent.objects.get(pk=call.agent_id)
    agent.active = False
    agent_save(agent=agent)


@pytest.mark.parametrize(
    ("take_away", "status", "code"),
    [(_revoke_all, 401, "unauthenticated"), (_disable, 403, "agent_disabled")],
    ids=["token-revoked", "agent-disabled"],
)
async def test_a_waiter_whose_access_is_taken_away_is_answered_at_once(
    take_away: Any, status: int, code: str
) -> None:
    call = await sync_to_async(_held_call)()
    answer = asyncio.ensure_future(_answer(_wait(call.pk)))
    await asyncio.sleep(0.3)
    assert not answer.done()
    await sync_to_async(take_away)(call)
    got, body = await asyncio.wait_for(answer, timeout=PROMPTLY)  # not after the wait's 30 s
    assert (got, body["error"]["code"]) == (status, code)
