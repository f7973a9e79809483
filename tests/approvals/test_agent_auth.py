"""One reading of the bearer token: the same table of ``Authorization`` headers answered the
same way by the API, the long-poll and both agent sockets, through the ASGI application."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.core.handlers.asgi import ASGIRequest
from django.test import RequestFactory

from approvals.api import errors
from approvals.api.auth import authorization_values, bearer_token, request_authorization
from approvals.models import Call
from config.asgi import application
from tests.asgi import PROMPTLY, asgi_response
from tests.factories import agent_with_token, call_make, payment, rule_make

TOKEN = "cs_agent-auth-test-token"
IDLE_TOKEN = "cs_agent-auth-idle-token"
UNKNOWN = "cs_agent-auth-unknown-token"

OK, UNAUTHENTICATED, DISABLED = "ok", "unauthenticated", "disabled"

# (case, the Authorization headers sent, the outcome): the same everywhere.
HEADER_CASES = [
    ("missing", [], UNAUTHENTICATED),
    ("unknown token", [f"Bearer {UNKNOWN}"], UNAUTHENTICATED),
    ("another scheme", [f"Basic {TOKEN}"], UNAUTHENTICATED),
    ("no scheme", [TOKEN], UNAUTHENTICATED),
    ("scheme only", ["Bearer"], UNAUTHENTICATED),
    ("empty token", ["Bearer "], UNAUTHENTICATED),
    ("two equal headers", [f"Bearer {TOKEN}", f"Bearer {TOKEN}"], UNAUTHENTICATED),
    ("two headers, the first valid", [f"Bearer {TOKEN}", f"Bearer {UNKNOWN}"], UNAUTHENTICATED),
    ("two headers, the second valid", [f"Bearer {UNKNOWN}", f"Bearer {TOKEN}"], UNAUTHENTICATED),
    ("valid", [f"Bearer {TOKEN}"], OK),
    ("lower-case scheme", [f"bearer {TOKEN}"], OK),
    ("upper-case scheme", [f"BEARER {TOKEN}"], OK),
    ("more spaces", [f"Bearer   {TOKEN} "], OK),
    ("disabled agent", [f"Bearer {IDLE_TOKEN}"], DISABLED),
]
CASE_IDS = [case for case, _, _ in HEADER_CASES]
TABLE = pytest.mark.parametrize(
    ("authorization", "outcome"), [c[1:] for c in HEADER_CASES], ids=CASE_IDS
)


def _headers(authorization: list[str]) -> list[tuple[bytes, bytes]]:
    return [(b"host", b"localhost"), *((b"authorization", v.encode()) for v in authorization)]


# --- the rule itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("authorization", "token"),
    [
        ([], None),
        (["Bearer abc"], "abc"),
        (["bEaReR abc"], "abc"),
        ([" Bearer  abc "], "abc"),
        (["Bearer"], None),
        (["Bearer   "], None),
        (["Basic abc"], None),
        (["abc"], None),
        (["Bearer abc", "Bearer abc"], None),
        (["Bearer abc", ""], None),
    ],
)
def test_bearer_token_takes_exactly_one_bearer_header(
    authorization: list[str], token: str | None
) -> None:
    assert bearer_token(authorization) == token


def test_the_scope_keeps_repeated_headers_apart() -> None:
    headers = [(b"authorization", b"Bearer a"), (b"x", b"y"), (b"Authorization", b"b")]
    assert authorization_values(headers) == ["Bearer a", "b"]


def test_an_asgi_request_is_read_from_its_scope_not_from_the_joined_headers() -> None:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/v1/calls",
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")],
    }
    request = ASGIRequest(scope, body_file=None)  # type: ignore[arg-type]
    assert request.headers["Authorization"] == "Bearer a,Bearer b"  # what Django makes of it
    assert request_authorization(request) == ["Bearer a", "Bearer b"]


def test_a_wsgi_request_has_its_one_header() -> None:
    assert request_authorization(RequestFactory().get("/")) == []
    request = RequestFactory(HTTP_AUTHORIZATION="Bearer a").get("/")
    assert request_authorization(request) == ["Bearer a"]


# --- the table at every entry point ---------------------------------------------------------


def _world() -> Call:
    """A held call of the agent holding TOKEN, and a disabled agent holding IDLE_TOKEN."""
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent, _ = agent_with_token(token=TOKEN)
    agent_with_token(token=IDLE_TOKEN, name="idle", active=False)
    call = call_make(agent=agent, arguments=payment("600.00"))
    assert call.status == Call.Status.PENDING
    return call


@pytest.fixture
def call_id(transactional_db: None) -> uuid.UUID:
    return _world().pk


def _assert_http(response: dict[str, Any], outcome: str) -> None:
    headers = {bytes(name).lower(): value for name, value in response["headers"]}
    if outcome == OK:
        assert response["status"] == 200, response["body"]
        return
    status, code, message = {
        UNAUTHENTICATED: (401, "unauthenticated", errors.UNAUTHENTICATED),
        DISABLED: (403, "agent_disabled", errors.AGENT_DISABLED),
    }[outcome]
    assert response["status"] == status
    assert headers[b"content-type"] == b"application/json"
    assert json.loads(response["body"]) == {"error": {"code": code, "message": message}}
    assert (headers.get(b"www-authenticate") == b"Bearer") is (status == 401)


@pytest.mark.asyncio
@TABLE
async def test_the_api(call_id: uuid.UUID, authorization: list[str], outcome: str) -> None:
    path = f"/api/v1/calls/{call_id}"
    _assert_http(
        await asgi_response(application, "GET", path, headers=_headers(authorization)), outcome
    )


@pytest.mark.asyncio
@TABLE
async def test_the_long_poll(call_id: uuid.UUID, authorization: list[str], outcome: str) -> None:
    path = f"/api/v1/calls/{call_id}/wait?timeout=0"
    _assert_http(
        await asgi_response(application, "GET", path, headers=_headers(authorization)), outcome
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("socket", ["call", "agent"])
@TABLE
async def test_the_agent_sockets(
    call_id: uuid.UUID, socket: str, authorization: list[str], outcome: str
) -> None:
    path = f"/ws/v1/calls/{call_id}" if socket == "call" else "/ws/v1/agent"
    communicator = WebsocketCommunicator(application, path, headers=_headers(authorization))
    connected, _ = await communicator.connect(PROMPTLY)
    assert connected  # refusals are close codes after the accept, never a bare 403
    message = await communicator.receive_output(PROMPTLY)
    if outcome == OK:
        assert message["type"] == "websocket.send"
        assert json.loads(message["text"])["call"]["id"] == str(call_id)
    else:
        code = {UNAUTHENTICATED: 4401, DISABLED: 4403}[outcome]
        assert message == {"type": "websocket.close", "code": code}
    await communicator.disconnect()
