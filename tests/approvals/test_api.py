"""The agent HTTP API (docs/routes.md) through Django's test client, and its body limit
through the ASGI application."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from approvals.api import errors, openapi, routes, submissions
from approvals.models import (
    Agent,
    AgentToken,
    AuditEntry,
    Budget,
    Call,
    Gate,
    LedgerEntry,
    PermissionRule,
    RunCounter,
)
from approvals.services.decisions import DEFAULT_DENY_COMMENT, call_decide
from approvals.services.lifecycle import CANCELLED_COMMENT, EXPIRED_COMMENT, calls_expire_due
from approvals.services.rules import budget_save, cap_rule_save
from tests.asgi import asgi_response, chunked_request, http_scope
from tests.factories import agent_with_token, ledger_entries_move, token_make, user_make

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

TOKEN = "cs_api-test-token-bot"
OTHER_TOKEN = "cs_api-test-token-other"
CALLS = "/api/v1/calls"
SECRET = "ZQXJ"  # a distinctive argument value that must never come back in a reason
STATE_KEYS = {
    "id",
    "shadow",
    "status",
    "tool",
    "principal",
    "run_id",
    "arguments",
    "arguments_sha256",
    "edited",
    "original_arguments_sha256",
    "reasons",
    "gates",
    "approvals",
    "decision",
    "created_at",
    "expires_at",
    "receipt",
    "links",
}


# --- helpers ------------------------------------------------------------------------------


def make_agent(
    name: str = "bot",
    *,
    token: str = TOKEN,
    principal: str = "carol",
    mode: str = "allow",
    allowed_principals: str = "",
    active: bool = True,
) -> Agent:
    agent, _ = agent_with_token(
        token=token,
        name=name,
        principal=principal,
        mode=mode,
        allowed_principals=allowed_principals,
        active=active,
    )
    return agent


def bearer(token: str = TOKEN) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def body_bytes(body: object) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, ensure_ascii=False).encode()


def submit(body: object, *, client: Client | None = None, key: str | None = None) -> Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return (client or bearer()).post(
        CALLS, body_bytes(body), content_type="application/json", headers=headers
    )


def created(body: object, *, client: Client | None = None) -> dict[str, Any]:
    """Submit a call that must be created; its state."""
    response = submit(body, client=client)
    assert response.status_code == 201, response.content
    state: dict[str, Any] = response.json()
    return state


def call_of(tool: str = "read_file", arguments: object = "{}", **fields: object) -> dict[str, Any]:
    return {"tool": tool, "arguments": arguments, **fields}


def assert_error(response: Response, status: int, code: str | None = None) -> str:
    """The response is the API's error shape with this status; returns the message."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    return message


def assert_bad_request(body: object, message: str | None = None) -> None:
    """``400`` in the error shape, and no call created."""
    before = Call.objects.count()
    text = assert_error(submit(body), 400, "bad_request")
    if message is not None:
        assert text == message
    assert Call.objects.count() == before


def approver(name: str) -> User:
    return user_make(username=name)


def decide(state: dict[str, Any], user: User, *, approve: bool, comment: str = "") -> None:
    call_decide(
        call_id=uuid.UUID(state["id"]),
        user=user,
        approve=approve,
        comment=comment,
        arguments_sha256=state["arguments_sha256"],
    )


def fetch(state: dict[str, Any], client: Client | None = None) -> dict[str, Any]:
    response = (client or bearer()).get(f"{CALLS}/{state['id']}")
    assert response.status_code == 200
    fresh: dict[str, Any] = response.json()
    return fresh


def pay(amount: object, **arguments: object) -> dict[str, Any]:
    return call_of("pay", {"amount": amount, **arguments})


@pytest.fixture
def agent(db: None) -> Agent:
    return make_agent()


@pytest.fixture
def other(db: None) -> Agent:
    return make_agent("other", token=OTHER_TOKEN, principal="dave")


# --- authentication -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", "Bearer cs_unknown-token", f"Basic {TOKEN}", TOKEN],
)
def test_a_missing_or_unknown_token_is_401_with_www_authenticate(
    agent: Agent, authorization: str | None
) -> None:
    client = Client() if authorization is None else Client(HTTP_AUTHORIZATION=authorization)
    for response in (
        client.get(CALLS),
        client.post(CALLS, body_bytes(call_of()), content_type="application/json"),
        client.get(f"{CALLS}/{uuid.uuid4()}"),
        client.post(f"{CALLS}/{uuid.uuid4()}/cancel"),
    ):
        assert_error(response, 401, "unauthenticated")
        assert response["WWW-Authenticate"] == "Bearer"
    assert Call.objects.count() == 0


def test_the_bearer_scheme_is_case_insensitive(agent: Agent) -> None:
    assert Client(HTTP_AUTHORIZATION=f"bearer {TOKEN}").get(CALLS).status_code == 200


def test_a_revoked_token_is_401(agent: Agent) -> None:
    AgentToken.objects.filter(agent=agent).update(revoked_at=timezone.now())
    response = bearer().get(CALLS)
    assert_error(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"] == "Bearer"
    assert_error(submit(call_of()), 401)
    assert Call.objects.count() == 0


def test_another_unrevoked_token_of_the_same_agent_still_works(agent: Agent) -> None:
    AgentToken.objects.filter(agent=agent).update(revoked_at=timezone.now())
    second = "cs_api-test-token-second"
    token_make(agent=agent, token=second)
    assert created(call_of(), client=bearer(second))["status"] == "allowed"


def test_a_disabled_agent_is_403(agent: Agent) -> None:
    state = created(call_of())
    Agent.objects.filter(pk=agent.pk).update(active=False)
    assert assert_error(bearer().get(CALLS), 403, "agent_disabled") == errors.AGENT_DISABLED
    assert_error(submit(call_of()), 403, "agent_disabled")
    assert_error(bearer().get(f"{CALLS}/{state['id']}"), 403, "agent_disabled")
    assert_error(bearer().post(f"{CALLS}/{state['id']}/cancel"), 403, "agent_disabled")
    assert Call.objects.count() == 1


def test_another_agents_call_is_404_for_get_and_cancel(agent: Agent, other: Agent) -> None:
    Agent.objects.filter(pk=other.pk).update(mode="prompt")
    theirs = created(call_of("transfer_funds"), client=bearer(OTHER_TOKEN))
    assert theirs["status"] == "pending"
    missing = str(uuid.uuid4())
    for call_id in (theirs["id"], missing):
        get = bearer().get(f"{CALLS}/{call_id}")
        assert assert_error(get, 404, "not_found") == errors.NOT_FOUND
        cancel = bearer().post(f"{CALLS}/{call_id}/cancel")
        assert assert_error(cancel, 404, "not_found") == errors.NOT_FOUND
    # The refused cancel changed nothing; its owner still sees it pending.
    assert fetch(theirs, bearer(OTHER_TOKEN))["status"] == "pending"
    assert bearer().get(CALLS).json() == {"items": [], "count": 0}


@pytest.mark.parametrize("call_id", ["not-a-uuid", "1234", "5f0c", "%20", "'%3B--"])
def test_a_malformed_call_id_is_404(agent: Agent, call_id: str) -> None:
    assert_error(bearer().get(f"{CALLS}/{call_id}"), 404, "not_found")
    assert_error(bearer().post(f"{CALLS}/{call_id}/cancel"), 404, "not_found")


@pytest.mark.parametrize(
    "path",
    [
        "/api/",
        "/api/v1/",
        "/api/v2/calls",
        "/api/v1/nothing",
        "/api/v1/calls/",
        "/api/v1/currencies/",
        f"/api/v1/calls/{uuid.UUID(int=1)}/",
        f"/api/v1/calls/{uuid.UUID(int=1)}/cancel/",
        f"/api/v1/calls/{uuid.UUID(int=1)}/other",
    ],
)
def test_any_other_path_under_api_is_a_json_404(agent: Agent, path: str) -> None:
    for response in (bearer().get(path), bearer().post(path), Client().get(path)):
        assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("delete", CALLS),
        ("put", CALLS),
        ("patch", CALLS),
        ("post", f"{CALLS}/{uuid.UUID(int=1)}"),
        ("delete", f"{CALLS}/{uuid.UUID(int=1)}"),
        ("get", f"{CALLS}/{uuid.UUID(int=1)}/cancel"),
        ("post", "/api/v1/currencies"),
    ],
)
def test_a_wrong_method_is_a_json_405(agent: Agent, method: str, path: str) -> None:
    response = getattr(bearer(), method)(path)
    assert_error(response, 405, "method_not_allowed")
    assert "Allow" in response


# --- POST /calls: the arguments -----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"amount": 12.50, "memo": "caf\u00e9"}',
        '{ "b" :1,\n\t"a": [1E+5, -0.0, true, null] }',
        '{"escaped": "\\u00e9\\u0000\\n", "slash": "a\\/b"}',
        "{}",
        "   ",
        "",
    ],
)
def test_string_arguments_are_stored_exactly_and_hashed_as_utf8(agent: Agent, text: str) -> None:
    state = created(call_of("read_file", text))
    call = Call.objects.get(pk=state["id"])
    assert call.arguments == text
    assert state["arguments_sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert call.arguments_sha256 == state["arguments_sha256"]
    assert state["status"] == "allowed"  # blank text means {}: strict JSON, nothing refused


def test_object_arguments_are_stored_as_their_compact_reserialisation(agent: Agent) -> None:
    raw = (
        '{"tool": "read_file", "arguments": {"zeta": 12.50, "alpha": "caf\\u00e9 \u2713",'
        ' "n": [1E+5, -0.0, 0, true, false, null], "q": "say \\"hi\\"\\n", "e": {}, "l": []}}'
    )
    state = created(raw.encode())
    expected = (
        '{"zeta":12.50,"alpha":"caf\u00e9 \u2713","n":[1E+5,-0.0,0,true,false,null],'
        '"q":"say \\"hi\\"\\n","e":{},"l":[]}'
    )
    call = Call.objects.get(pk=state["id"])
    assert call.arguments == expected
    assert state["arguments_sha256"] == hashlib.sha256(expected.encode("utf-8")).hexdigest()


def test_an_amount_in_object_arguments_keeps_its_literal_for_caps(agent: Agent) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 12.50 -> refuse")
    at_limit = created(b'{"tool": "pay", "arguments": {"amount": 12.50}}')
    over = created(b'{"tool": "pay", "arguments": {"amount": 12.51}}')
    assert Call.objects.get(pk=at_limit["id"]).arguments == '{"amount":12.50}'
    assert (at_limit["status"], over["status"]) == ("allowed", "refused")


def test_empty_string_arguments_mean_an_empty_object(agent: Agent) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 10 -> gate")
    state = created(call_of("pay", ""))
    # Read as {}: no amount, so the cap cannot assess it (not an "arguments" refusal).
    assert state["status"] == "pending"
    assert [r["policy"] for r in state["reasons"]] == ["cap"]
    assert state["reasons"][0]["message"] == "not assessable: the amount argument is missing"


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ('{"a": 1, "a": 2}', "a duplicate member name"),
        ('{"amount": 1, "Amount": 2}', "member names that differ only in case"),
        ('{"a": NaN}', "NaN or Infinity"),
        ('{"a": "\\ud800"}', "a lone surrogate"),
        ('{"a": 1} x', "data after the value"),
        ("[1, 2]", "not a JSON object"),
        ("{'a': 1}", "not JSON"),
        ("[" * 100 + "]" * 100, "nested deeper than 64 levels"),
    ],
)
def test_arguments_text_that_is_not_strict_json_is_a_refused_call(
    agent: Agent, text: str, category: str
) -> None:
    response = submit(call_of("read_file", text))
    assert response.status_code == 201
    state = response.json()
    assert state["status"] == "refused"
    assert state["reasons"] == [
        {
            "policy": "arguments",
            "rule": None,
            "action": "refuse",
            "gate": "",
            "message": f"arguments are not strict JSON: {category}",
        }
    ]
    call = Call.objects.get(pk=state["id"])
    assert call.arguments == text
    assert state["arguments_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert state["gates"] == []
    assert state["decision"] is None


# --- POST /calls: malformed bodies are 400 and create nothing ------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"arguments": "{}"},
        {"tool": "read_file"},
        {},
        {"tool": None, "arguments": "{}"},
        {"tool": "", "arguments": "{}"},
    ],
)
def test_a_missing_tool_or_arguments_is_400(agent: Agent, body: dict[str, object]) -> None:
    assert_bad_request(body)


@pytest.mark.parametrize(
    "tool",
    [
        "pay ",
        " pay",
        "\u0440\u0430y",  # Cyrillic er and a, then Latin y: looks like "pay"
        "p\u0430y",
        "pay\u200b",
        "x" * 129,
        "-pay",
        ".pay",
        "pay tool",
        "pay\n",
        "pay\x00",
        "caf\u00e9",
    ],
)
def test_a_tool_name_outside_the_pattern_is_400(agent: Agent, tool: str) -> None:
    assert_bad_request(call_of(tool), submissions.BAD_TOOL)


@pytest.mark.parametrize("tool", ["Pay", "pay", "x" * 128, "_t", "fs.read_file", "a:b/c-d.e_f"])
def test_a_tool_name_matching_the_pattern_is_accepted(agent: Agent, tool: str) -> None:
    assert created(call_of(tool))["tool"] == tool


def test_a_tool_name_given_as_a_number_is_400(agent: Agent) -> None:
    assert_bad_request(b'{"tool": 123, "arguments": "{}"}', submissions.BAD_TOOL)


@pytest.mark.parametrize("arguments", ["12", "12.5", "[]", '["a"]', "null", "true", "false"])
def test_arguments_that_are_neither_string_nor_object_are_400(agent: Agent, arguments: str) -> None:
    assert_bad_request(
        f'{{"tool": "read_file", "arguments": {arguments}}}'.encode(), submissions.BAD_ARGUMENTS
    )


@pytest.mark.parametrize(
    "raw",
    [
        b'{"tool": "read_file", "arguments": "{}", "extra": 1}',
        b'{"tool": "read_file", "arguments": "{}", "Principal": "carol"}',
        b'{"tool": "read_file", "arguments": "{}", "usage": {"tokens": 1}}',
    ],
)
def test_an_unknown_member_is_400(agent: Agent, raw: bytes) -> None:
    assert_bad_request(raw)


@pytest.mark.parametrize(
    ("raw", "category"),
    [
        (b'{"tool": "read_file", "tool": "pay", "arguments": "{}"}', "a duplicate member name"),
        (
            b'{"tool": "read_file", "Tool": "pay", "arguments": "{}"}',
            "member names that differ only in case",
        ),
        (
            b'{"tool": "pay", "arguments": {"amount": "1", "amount": "900"}}',
            "a duplicate member name",
        ),
        (
            b'{"tool": "pay", "arguments": {"amount": "1", "AMOUNT": "900"}}',
            "member names that differ only in case",
        ),
        (
            b'{"tool": "pay", "arguments": {"to": {"iban": "1", "IBAN": "2"}}}',
            "member names that differ only in case",
        ),
        (b'{"tool": "pay", "arguments": {"a": NaN}}', "NaN or Infinity"),
        (b'{"tool": "pay", "arguments": {"a": Infinity}}', "NaN or Infinity"),
        (b'{"tool": "pay", "arguments": {"a": -Infinity}}', "NaN or Infinity"),
        (b'{"tool": "pay", "arguments": "\\udc00"}', "a lone surrogate"),
        (b'{"tool": "pay", "arguments": {"\\ud800": 1}}', "a lone surrogate"),
        (b'{"tool": "pay", "arguments": "{}", "context": "\\ud83d"}', "a lone surrogate"),
        (b'{"tool": "pay", "arguments": "\xff"}', "not valid UTF-8"),
        (b'{"tool": "pay", "arguments": "\xed\xa0\x80"}', "not valid UTF-8"),
        (b"\xef\xbb\xbf" + b'{"tool": "pay", "arguments": "{}"}', "a byte-order mark"),
        (b'{"tool": "pay", "arguments": "{}"} {}', "data after the value"),
        (b"tool=pay&arguments=%7B%7D", "not JSON"),
        (b"", "not JSON"),
        (b"{'tool': 'pay'}", "not JSON"),
        (b'{"tool": "pay", "arguments": {"a": 1,}}', "not JSON"),
    ],
)
def test_a_body_that_is_not_strict_json_is_400(agent: Agent, raw: bytes, category: str) -> None:
    assert_bad_request(raw, submissions.BODY_NOT_STRICT.format(category=category))


def test_a_nesting_of_100_levels_is_400(agent: Agent) -> None:
    deep = "[" * 100 + "]" * 100
    raw = f'{{"tool": "pay", "arguments": {{"a": {deep}}}}}'.encode()
    message = submissions.BODY_NOT_STRICT.format(category="nested deeper than 64 levels")
    assert_bad_request(raw, message)


def test_an_escaped_surrogate_pair_is_fine(agent: Agent) -> None:
    state = created(b'{"tool": "read_file", "arguments": {"emoji": "\\ud83d\\ude00"}}')
    assert Call.objects.get(pk=state["id"]).arguments == '{"emoji":"\U0001f600"}'


def test_a_form_encoded_body_is_400(agent: Agent) -> None:
    for response in (
        bearer().post(CALLS, {"tool": "read_file", "arguments": "{}"}),
        bearer().post(
            CALLS,
            "tool=read_file&arguments=%7B%7D",
            content_type="application/x-www-form-urlencoded",
        ),
    ):
        assert_error(response, 400, "bad_request")
    assert Call.objects.count() == 0


@pytest.mark.parametrize("raw", [b"[]", b'[{"tool": "pay", "arguments": "{}"}]', b'"x"', b"1"])
def test_a_body_that_is_not_an_object_is_400(agent: Agent, raw: bytes) -> None:
    assert_bad_request(raw, submissions.BODY_NOT_OBJECT)


@pytest.mark.parametrize("field", ["principal", "run_id", "context"])
def test_u0000_in_a_text_field_is_400(agent: Agent, field: str) -> None:
    Agent.objects.filter(pk=agent.pk).update(allowed_principals="*")
    assert_bad_request(call_of(**{field: "a\x00b"}), submissions.NUL_CHARACTER)


def test_u0000_in_the_arguments_text_is_400(agent: Agent) -> None:
    # The body's escape \u0000 puts a raw U+0000 into the arguments text.
    assert_bad_request(
        b'{"tool": "read_file", "arguments": "{\\"a\\": \\"\\u0000\\"}"}', submissions.NUL_CHARACTER
    )


def test_the_escape_u0000_inside_the_arguments_json_is_fine(agent: Agent) -> None:
    state = created(b'{"tool": "read_file", "arguments": "{\\"a\\": \\"x\\\\u0000\\"}"}')
    assert Call.objects.get(pk=state["id"]).arguments == '{"a": "x\\u0000"}'
    assert state["status"] == "allowed"


def test_u0000_inside_an_arguments_object_is_stored_as_its_escape(agent: Agent) -> None:
    state = created(b'{"tool": "read_file", "arguments": {"a": "x\\u0000"}}')
    stored = Call.objects.get(pk=state["id"]).arguments
    assert stored == '{"a":"x\\u0000"}'
    assert "\x00" not in stored


@pytest.mark.parametrize(
    ("field", "limit"), [("principal", 200), ("run_id", 200), ("context", 4000)]
)
def test_text_fields_have_length_limits(agent: Agent, field: str, limit: int) -> None:
    Agent.objects.filter(pk=agent.pk).update(allowed_principals="*")
    at_limit = created(call_of(**{field: "\u00e9" * limit}))
    call = Call.objects.get(pk=at_limit["id"])
    assert getattr(call, field) == "\u00e9" * limit
    assert_bad_request(
        call_of(**{field: "\u00e9" * (limit + 1)}),
        submissions.BAD_TEXT.format(field=field, limit=limit),
    )


@pytest.mark.parametrize("field", ["principal", "run_id", "context"])
@pytest.mark.parametrize("value", ["12", "null", "[]", "{}", "true"])
def test_text_fields_must_be_strings(agent: Agent, field: str, value: str) -> None:
    raw = f'{{"tool": "read_file", "arguments": "{{}}", "{field}": {value}}}'.encode()
    assert_bad_request(raw)


def test_the_principal_defaults_to_the_agents_and_run_id_to_empty(agent: Agent) -> None:
    state = created(call_of(context="because"))
    assert (state["principal"], state["run_id"]) == ("carol", "")
    assert Call.objects.get(pk=state["id"]).context == "because"


# --- POST /calls: principals --------------------------------------------------------------


def test_a_principal_the_agent_may_not_act_for_is_403_and_creates_no_call(agent: Agent) -> None:
    response = submit(call_of(principal="mallory"))
    assert assert_error(response, 403, "principal_forbidden") == submissions.PRINCIPAL_FORBIDDEN
    assert "mallory" not in response.content.decode()
    assert Call.objects.count() == 0
    assert RunCounter.objects.count() == 0


def test_allowed_principals_are_case_sensitive_globs(agent: Agent) -> None:
    Agent.objects.filter(pk=agent.pk).update(allowed_principals="team-*, bob")
    for principal in ("carol", "team-7", "team-", "bob"):
        assert created(call_of(principal=principal))["principal"] == principal
    for principal in ("Team-7", "bobby", "Bob", "x-team-7", "Carol"):
        assert_error(submit(call_of(principal=principal)), 403, "principal_forbidden")
    assert Call.objects.count() == 4


def test_a_star_allows_any_principal(agent: Agent) -> None:
    Agent.objects.filter(pk=agent.pk).update(allowed_principals="*")
    assert created(call_of(principal="anyone at all"))["principal"] == "anyone at all"


# --- POST /calls: usage -------------------------------------------------------------------


def test_valid_usage_is_accepted_and_counted(agent: Agent) -> None:
    usage = {"input_tokens": 10, "output_tokens": 5, "cost": "0.0042", "cost_currency": "USD"}
    created(call_of(run_id="r1", usage=usage))
    created(call_of(run_id="r1", usage={"input_tokens": 1}))
    created(call_of(run_id="r1", usage={}))
    counter = RunCounter.objects.get(agent=agent, key="r1")
    assert (counter.calls, counter.tokens) == (3, 16)
    assert counter.costs.get().amount == 4_200_000  # 10⁻⁹ units
    assert counter.costs.get().currency == "USD"


def test_reported_tokens_trip_a_token_budget(agent: Agent) -> None:
    Budget.objects.create(agent=agent, max_tokens=100)
    first = created(call_of(usage={"input_tokens": 60, "output_tokens": 40}))
    second = created(call_of(usage={"output_tokens": 1}))
    assert first["status"] == "allowed"
    assert second["status"] == "refused"
    assert second["reasons"] == [
        {
            "policy": "budget",
            "rule": "budget:tokens",
            "action": "refuse",
            "gate": "",
            "message": "101 tokens would pass the ceiling of 100 in this run",
        }
    ]


def test_reported_cost_trips_a_cost_budget(agent: Agent) -> None:
    Budget.objects.create(agent=agent, max_cost=1_000_000_000, cost_currency="USD")
    first = created(call_of(usage={"cost": "0.6", "cost_currency": "USD"}))
    second = created(call_of(usage={"cost": "0.400000001", "cost_currency": "USD"}))
    other_currency = created(call_of(usage={"cost": "0", "cost_currency": "EUR"}))
    assert first["status"] == "allowed"
    assert second["status"] == "refused"
    assert second["reasons"][0]["rule"] == "budget:cost"
    assert second["reasons"][0]["message"] == (
        "a cost of USD 1.000000001 would pass the ceiling of USD 1.000000000 in this run"
    )
    assert other_currency["status"] == "refused"
    assert other_currency["reasons"][0]["message"] == (
        "not assessable: the cost is not reported in USD"
    )


@pytest.mark.parametrize(
    "usage",
    [
        '{"input_tokens": -1}',
        '{"output_tokens": -0}',
        '{"input_tokens": 1.5}',
        '{"input_tokens": 1.0}',
        '{"input_tokens": 1e3}',
        '{"input_tokens": "10"}',
        '{"input_tokens": null}',
        '{"input_tokens": true}',
        '{"cost": "0.0000000001", "cost_currency": "USD"}',
        '{"cost": 0.5, "cost_currency": "USD"}',
        '{"cost": 1, "cost_currency": "USD"}',
        '{"cost": "0.5"}',
        '{"cost": "0.5", "cost_currency": "ZZZ"}',
        '{"cost": "0.5", "cost_currency": "usd"}',
        '{"cost": "0.5", "cost_currency": 840}',
        '{"cost": "-0.5", "cost_currency": "USD"}',
        '{"cost": "1e3", "cost_currency": "USD"}',
        '{"cost": " 1", "cost_currency": "USD"}',
        '{"cost": "", "cost_currency": "USD"}',
        '{"cost_currency": "USD"}',
        '{"input_tokens": 9223372036854775808}',
        '{"input_tokens": 9999999999999999999}',
        '{"input_tokens": 99999999999999999999}',
        '{"input_tokens": 9223372036854775807, "output_tokens": 1}',
        '{"tokens": 1}',
        "[]",
        '"10"',
        "null",
    ],
)
def test_malformed_usage_is_400(agent: Agent, usage: str) -> None:
    raw = f'{{"tool": "read_file", "arguments": "{{}}", "usage": {usage}}}'.encode()
    assert_bad_request(raw, submissions.BAD_USAGE)
    assert RunCounter.objects.count() == 0


def test_the_largest_64_bit_token_count_is_accepted(agent: Agent) -> None:
    created(call_of(usage={"input_tokens": 2**63 - 1}))
    assert RunCounter.objects.get(agent=agent).tokens == 2**63 - 1


def test_usage_with_nine_fraction_digits_is_accepted(agent: Agent) -> None:
    created(call_of(usage={"cost": "0.000000001", "cost_currency": "JPY"}))
    assert RunCounter.objects.get(agent=agent).costs.get().amount == 1


# --- verdicts through the API -------------------------------------------------------------

MODE_TABLE = {
    # mode: (read_file, update_catalog, transfer_funds)
    "default": ("allowed", "allowed", "pending"),
    "read_only": ("allowed", "refused", "refused"),
    "workspace_write": ("allowed", "allowed", "refused"),
    "danger_full_access": ("allowed", "allowed", "allowed"),
    "allow": ("allowed", "allowed", "allowed"),
    "prompt": ("pending", "pending", "pending"),
}
TOOLS = ("read_file", "update_catalog", "transfer_funds")


@pytest.mark.parametrize("mode", sorted(MODE_TABLE))
@pytest.mark.parametrize("column", range(3))
def test_permission_modes_by_tool_class(db: None, mode: str, column: int) -> None:
    make_agent(mode=mode)
    tool = TOOLS[column]
    expected = MODE_TABLE[mode][column]
    state = created(call_of(tool))
    assert state["status"] == expected
    if expected == "allowed":
        assert state["reasons"] == []
        assert state["gates"] == []
        return
    assert len(state["reasons"]) == 1
    reason = state["reasons"][0]
    assert reason["policy"] == "permission"
    assert reason["rule"] == f"mode:{mode}"
    if expected == "pending":
        assert (reason["action"], reason["gate"]) == ("gate", "")
        assert state["gates"] == [""]
        assert state["expires_at"] is not None
    else:
        assert (reason["action"], reason["gate"]) == ("refuse", "")
        assert state["gates"] == []
        assert state["expires_at"] is None


def test_an_unknown_mode_in_the_database_is_treated_as_prompt(db: None) -> None:
    make_agent(mode="yolo")
    assert created(call_of("read_file"))["status"] == "pending"


def _permission_rule(agent: Agent | None, pattern: str, decision: str) -> PermissionRule:
    return PermissionRule.objects.create(agent=agent, pattern=pattern, decision=decision)


def test_a_deny_rule_beats_ask_and_allow(db: None) -> None:
    agent = make_agent(mode="allow")
    allow = _permission_rule(agent, "transfer_*", "allow")
    ask = _permission_rule(None, "transfer_funds", "ask")
    deny = _permission_rule(agent, "transfer_funds", "deny")
    state = created(call_of("transfer_funds"))
    assert state["status"] == "refused"
    assert state["reasons"] == [
        {
            "policy": "permission",
            "rule": f"permission-rule:{deny.pk}",
            "action": "refuse",
            "gate": "",
            "message": "denied by a permission rule for this tool",
        }
    ]
    deny.delete()
    state = created(call_of("transfer_funds"))
    assert state["status"] == "pending"
    assert [r["rule"] for r in state["reasons"]] == [f"permission-rule:{ask.pk}"]
    assert state["reasons"][0]["action"] == "gate"
    assert state["gates"] == [""]
    ask.delete()
    assert created(call_of("transfer_funds"))["status"] == "allowed"
    allow.delete()
    assert created(call_of("transfer_funds"))["status"] == "allowed"  # the mode decides


def test_an_allow_rule_lets_a_tool_past_the_mode(db: None) -> None:
    agent = make_agent(mode="prompt")
    rule = _permission_rule(agent, "read_*", "allow")
    assert created(call_of("read_file"))["status"] == "allowed"
    state = created(call_of("Read_file"))  # patterns match case-sensitively
    assert state["status"] == "pending"
    assert state["reasons"][0]["rule"] == "mode:prompt"
    rule.delete()
    assert created(call_of("read_file"))["status"] == "pending"


def test_every_matching_deny_rule_is_listed(db: None) -> None:
    agent = make_agent(mode="allow")
    first = _permission_rule(None, "read_*", "deny")
    second = _permission_rule(agent, "read_file", "deny")
    _permission_rule(make_agent("x", token="cs_x-token-x"), "read_file", "allow")
    state = created(call_of("read_file"))
    assert [r["rule"] for r in state["reasons"]] == [
        f"permission-rule:{first.pk}",
        f"permission-rule:{second.pk}",
    ]


def test_another_agents_permission_rule_does_not_apply(db: None) -> None:
    make_agent(mode="allow")
    _permission_rule(make_agent("x", token="cs_x-token-x"), "read_file", "deny")
    assert created(call_of("read_file"))["status"] == "allowed"


def test_a_call_ceiling_refuses_the_fourth_call(agent: Agent) -> None:
    Budget.objects.create(agent=agent, max_calls=3)
    states = [created(call_of(run_id="r")) for _ in range(4)]
    assert [s["status"] for s in states] == ["allowed", "allowed", "allowed", "refused"]
    assert states[3]["reasons"] == [
        {
            "policy": "budget",
            "rule": "budget:calls",
            "action": "refuse",
            "gate": "",
            "message": "call 4 would pass the ceiling of 3 calls in this run",
        }
    ]
    assert created(call_of(run_id="r"))["status"] == "refused"
    # Another run has its own counter.
    assert created(call_of(run_id="r2"))["status"] == "allowed"


def test_every_created_call_counts_against_the_budget_whatever_its_verdict(agent: Agent) -> None:
    Budget.objects.create(agent=agent, max_calls=2)
    assert created(call_of(arguments="not json"))["status"] == "refused"
    assert created(call_of())["status"] == "allowed"
    assert created(call_of())["reasons"][0]["rule"] == "budget:calls"
    # Requests that created no call count nothing.
    assert_error(submit(call_of(principal="mallory")), 403)
    assert_error(submit({"tool": "read_file"}), 400)
    assert RunCounter.objects.get(agent=agent).calls == 3


def test_a_default_budget_applies_unless_the_agent_has_its_own(agent: Agent, other: Agent) -> None:
    Budget.objects.create(agent=None, max_calls=1)
    Budget.objects.create(agent=other, max_calls=2)
    assert [created(call_of())["status"] for _ in range(2)] == ["allowed", "refused"]
    mine = [created(call_of(), client=bearer(OTHER_TOKEN))["status"] for _ in range(3)]
    assert mine == ["allowed", "allowed", "refused"]


def test_a_budget_that_gates_holds_at_its_gate(agent: Agent) -> None:
    budget_save(budget=Budget(agent=agent, max_calls=1, action="gate", gate="ops"))
    created(call_of())
    state = created(call_of())
    assert state["status"] == "pending"
    assert state["gates"] == ["ops"]
    assert state["reasons"][0]["rule"] == "budget:calls"
    assert (state["reasons"][0]["action"], state["reasons"][0]["gate"]) == ("gate", "ops")


def test_a_max_cap_allows_at_the_limit_and_holds_above_it(agent: Agent) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 1000.00 -> gate finance")
    assert created(pay("1000.00"))["status"] == "allowed"
    assert created(pay(1000))["status"] == "allowed"
    state = created(pay("1234.5"))
    assert state["status"] == "pending"
    assert state["gates"] == ["finance"]
    assert state["reasons"] == [
        {
            "policy": "cap",
            "rule": "big",
            "action": "gate",
            "gate": "finance",
            "message": "USD 1,234.50 is over the limit of USD 1,000.00 per call",
        }
    ]
    assert created(call_of("Pay", {"amount": "5000"}))["status"] == "allowed"  # another tool


def test_a_sum_cap_without_window_counts_all_time(agent: Agent) -> None:
    cap_rule_save(line="total: pay arg=amount sum USD 100 -> gate")
    assert created(pay("60"))["status"] == "allowed"
    assert created(pay("40.00"))["status"] == "allowed"  # exactly at the limit
    held = created(pay("0.01"))
    assert held["status"] == "pending"
    assert held["reasons"][0]["message"] == (
        "USD 100.01 would exceed the limit of USD 100.00 in total (spent USD 100.00)"
    )
    # Only allowed calls are recorded; an entry a year old still counts.
    assert LedgerEntry.objects.count() == 2
    ledger_entries_move(recorded_at=timezone.now() - timedelta(days=365))
    assert created(pay("0.01"))["status"] == "pending"


def test_a_rolling_sum_window_forgets_entries_older_than_the_window(agent: Agent) -> None:
    cap_rule_save(line="hourly: pay arg=amount sum USD 100 per 1h -> gate")
    assert created(pay("100"))["status"] == "allowed"
    held = created(pay("1"))
    assert held["status"] == "pending"
    assert held["reasons"][0]["message"] == (
        "USD 101.00 would exceed the limit of USD 100.00 per 1h (spent USD 100.00)"
    )
    ledger_entries_move(recorded_at=timezone.now() - timedelta(minutes=59))
    assert created(pay("1"))["status"] == "pending"
    ledger_entries_move(recorded_at=timezone.now() - timedelta(minutes=61))
    # The entry has left the window; the two held calls of 1.00 still reserve theirs.
    assert created(pay("98"))["status"] == "allowed"


def test_a_calendar_day_window_starts_at_utc_midnight(agent: Agent) -> None:
    cap_rule_save(line="daily: pay arg=amount sum USD 100 per day -> refuse")
    assert created(pay("100"))["status"] == "allowed"
    refused = created(pay("1"))
    assert refused["status"] == "refused"
    assert refused["reasons"][0]["message"] == (
        "USD 101.00 would exceed the limit of USD 100.00 per day (spent USD 100.00)"
    )
    midnight = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    ledger_entries_move(recorded_at=midnight)
    assert created(pay("1"))["status"] == "refused"  # midnight itself is today
    ledger_entries_move(recorded_at=midnight - timedelta(microseconds=1))
    assert created(pay("100"))["status"] == "allowed"


def test_a_sum_cap_keyed_by_principal_keeps_one_ledger_each(agent: Agent) -> None:
    Agent.objects.filter(pk=agent.pk).update(allowed_principals="*")
    cap_rule_save(line="each: pay arg=amount sum USD 100 by principal -> gate")
    assert created(pay("100"))["status"] == "allowed"
    assert created({**pay("100"), "principal": "erin"})["status"] == "allowed"
    assert created(pay("1"))["status"] == "pending"
    assert created({**pay("1"), "principal": "erin"})["status"] == "pending"
    assert created({**pay("100"), "principal": "Erin"})["status"] == "allowed"


def test_a_sum_cap_keyed_by_an_argument_normalises_and_never_echoes_it(agent: Agent) -> None:
    cap_rule_save(line="payee: pay arg=amount sum USD 100 by arg=payee lower trim -> gate")
    assert created(pay("60", payee=f"  {SECRET}@example.com "))["status"] == "allowed"
    assert created(pay("40", payee=f"{SECRET.lower()}@EXAMPLE.com"))["status"] == "allowed"
    held = submit(pay("1", payee=f"\t{SECRET}@example.COM\n"))
    assert held.json()["status"] == "pending"
    assert SECRET not in held.content.decode()
    assert SECRET.lower() not in held.content.decode()
    assert created(pay("100", payee="someone@example.com"))["status"] == "allowed"
    for payee in (None, 12, {"x": SECRET}):
        arguments: dict[str, object] = {"amount": "1"}
        if payee is not None:
            arguments["payee"] = payee
        response = submit(call_of("pay", arguments))
        state = response.json()
        assert state["status"] == "pending"
        assert state["reasons"][0]["message"].startswith("not assessable: the key argument")
        assert SECRET not in response.content.decode()


def test_a_sum_cap_with_the_currency_from_an_argument(agent: Agent) -> None:
    cap_rule_save(line="fx: pay arg=amount currency=currency sum USD 100, JPY 9000 -> gate")
    assert created(pay("100", currency="USD"))["status"] == "allowed"
    assert created(pay("9000", currency="JPY"))["status"] == "allowed"  # its own ledger
    held = created(pay("1", currency="JPY"))
    assert held["status"] == "pending"
    assert held["reasons"][0]["message"] == (
        "JPY 9,001 would exceed the limit of JPY 9,000 in total (spent JPY 9,000)"
    )
    too_precise = created(pay("1.5", currency="JPY"))
    assert too_precise["reasons"][0]["message"] == (
        "not assessable: the amount has more fraction digits than its currency allows"
    )
    for currency in ("usd", "EUR", 840, None):
        arguments: dict[str, object] = {"amount": "1"}
        if currency is not None:
            arguments["currency"] = currency
        state = created(call_of("pay", arguments))
        assert state["status"] == "pending"
        expected = (
            "not assessable: the currency argument is missing"
            if currency is None
            else "not assessable: the currency is not one this rule has a limit in"
        )
        assert state["reasons"] == [
            {"policy": "cap", "rule": "fx", "action": "gate", "gate": "", "message": expected}
        ]
    assert LedgerEntry.objects.count() == 2


@pytest.mark.parametrize(
    ("action", "status"), [("gate", "pending"), ("gate review", "pending"), ("refuse", "refused")]
)
def test_a_call_that_is_not_assessable_gets_the_rules_action(
    agent: Agent, action: str, status: str
) -> None:
    cap_rule_save(line=f"big: pay arg=amount max USD 500 -> {action}")
    for amount in (SECRET, f"{SECRET}1", "-1", "1e3", None, True, [1], "5" * 30):
        response = submit(pay(amount))
        state = response.json()
        assert response.status_code == 201
        assert state["status"] == status
        assert state["reasons"][0]["message"].startswith("not assessable: ")
        assert SECRET not in response.content.decode()
    missing = created(call_of("pay", {"sum": SECRET}))
    assert missing["reasons"][0]["message"] == "not assessable: the amount argument is missing"
    if action.startswith("gate"):
        assert Gate.objects.filter(name=action.removeprefix("gate").strip()).exists()


def test_a_refusal_beats_a_hold_and_every_finding_is_listed(agent: Agent) -> None:
    cap_rule_save(line="hold: pay arg=amount max USD 10 -> gate finance")
    cap_rule_save(line="stop: pay arg=amount sum USD 50 per day -> refuse")
    cap_rule_save(line="fine: pay arg=amount max USD 10000 -> refuse")
    state = created(pay("60"))
    assert state["status"] == "refused"
    assert [(r["rule"], r["action"]) for r in state["reasons"]] == [
        ("hold", "gate"),
        ("stop", "refuse"),
    ]
    assert state["gates"] == []
    assert state["expires_at"] is None
    assert LedgerEntry.objects.count() == 0


def test_holds_at_several_gates_are_unioned(db: None) -> None:
    make_agent(mode="prompt")
    cap_rule_save(line="a: pay arg=amount max USD 10 -> gate finance")
    cap_rule_save(line="b: pay arg=amount max USD 20 -> gate legal")
    state = created(pay("30"))
    assert state["status"] == "pending"
    assert sorted(state["gates"]) == ["", "finance", "legal"]
    assert len(state["reasons"]) == 3


def test_a_stored_rule_that_no_longer_parses_refuses_with_policy_error(agent: Agent) -> None:
    row = cap_rule_save(line="big: pay arg=amount max USD 500 -> gate")
    type(row).objects.filter(pk=row.pk).update(line="big: pay arg=amount max ZZZ 500 -> gate")
    state = created(call_of("read_file"))
    assert state["status"] == "refused"
    assert state["reasons"] == [
        {"policy": "error", "rule": None, "action": "refuse", "gate": "", "message": "policy error"}
    ]


# --- Idempotency-Key ----------------------------------------------------------------------


def test_a_replay_with_the_same_key_and_body_returns_the_first_call(agent: Agent) -> None:
    cap_rule_save(line="total: pay arg=amount sum USD 100 -> gate")
    body = body_bytes(pay("60"))
    first = submit(body, key="k-1")
    assert first.status_code == 201
    entries, counter = LedgerEntry.objects.count(), RunCounter.objects.get().calls
    audit = AuditEntry.objects.count()
    replay = submit(body, key="k-1")
    assert replay.status_code == 200
    assert replay.json() == first.json()
    assert Call.objects.count() == 1
    assert (LedgerEntry.objects.count(), RunCounter.objects.get().calls) == (entries, counter)
    assert AuditEntry.objects.count() == audit


def test_a_replay_returns_the_calls_current_state(db: None) -> None:
    make_agent(mode="prompt")
    body = body_bytes(call_of("read_file"))
    first = submit(body, key="k")
    assert first.json()["status"] == "pending"
    assert bearer().post(f"{CALLS}/{first.json()['id']}/cancel").status_code == 200
    replay = submit(body, key="k")
    assert replay.status_code == 200
    assert replay.json()["id"] == first.json()["id"]
    assert replay.json()["status"] == "cancelled"
    assert Call.objects.count() == 1


def test_a_replay_is_compared_byte_for_byte(agent: Agent) -> None:
    assert submit(b'{"tool": "read_file", "arguments": "{}"}', key="k").status_code == 201
    for body in (
        b'{"tool":"read_file","arguments":"{}"}',  # same JSON, other bytes
        b'{"arguments": "{}", "tool": "read_file"}',
        b'{"tool": "read_file", "arguments": "{}"}\n',
        b'{"tool": "list_files", "arguments": "{}"}',
    ):
        response = submit(body, key="k")
        assert assert_error(response, 409, "idempotency_conflict") == errors.IDEMPOTENCY_CONFLICT
    assert Call.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_create_one_call() -> None:
    make_agent()
    body = body_bytes(call_of())

    def post(_: int) -> tuple[int, str]:
        try:
            response = submit(body, key="race")
            return response.status_code, response.json()["id"]
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(post, range(6)))
    assert sorted(status for status, _ in results) == [200] * 5 + [201]
    assert len({call_id for _, call_id in results}) == 1
    assert Call.objects.count() == 1
    assert RunCounter.objects.get().calls == 1


def test_an_idempotency_key_over_200_characters_is_400(agent: Agent) -> None:
    response = submit(call_of(), key="k" * 201)
    assert assert_error(response, 400, "bad_request") == submissions.BAD_IDEMPOTENCY_KEY
    assert Call.objects.count() == 0
    assert submit(call_of(), key="k" * 200).status_code == 201
    assert submit(call_of(), key="k" * 200).status_code == 200


def test_without_a_key_two_identical_requests_create_two_calls(agent: Agent) -> None:
    first, second = created(call_of()), created(call_of())
    assert first["id"] != second["id"]
    assert Call.objects.count() == 2
    assert RunCounter.objects.get().calls == 2


def test_keys_are_per_agent(agent: Agent, other: Agent) -> None:
    body = body_bytes(call_of())
    mine = submit(body, key="shared")
    theirs = submit(body, key="shared", client=bearer(OTHER_TOKEN))
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]


def test_only_requests_that_created_a_call_are_remembered(agent: Agent) -> None:
    assert_error(submit(call_of(principal="mallory"), key="k"), 403)
    assert_error(submit({"tool": "read_file"}, key="k"), 400)
    response = submit(call_of(), key="k")
    assert response.status_code == 201


def test_a_key_is_kept_24_hours(agent: Agent) -> None:
    body = body_bytes(call_of())
    first = submit(body, key="k").json()
    Call.objects.filter(pk=first["id"]).update(
        created_at=timezone.now() - timedelta(hours=23, minutes=59)
    )
    assert submit(body, key="k").status_code == 200
    Call.objects.filter(pk=first["id"]).update(created_at=timezone.now() - timedelta(hours=25))
    again = submit(body, key="k")
    assert again.status_code == 201
    assert again.json()["id"] != first["id"]
    assert submit(body, key="k").json()["id"] == again.json()["id"]
    assert Call.objects.count() == 2


# --- GET /calls/{id}, cancel, the list ----------------------------------------------------


def test_get_returns_the_call_state(agent: Agent) -> None:
    state = created(call_of("read_file", '{"path": "/etc/hosts"}', run_id="run-7"))
    assert fetch(state) == state


def test_cancel_ends_a_pending_call_and_a_final_one_is_409(db: None) -> None:
    make_agent(mode="prompt")
    state = created(call_of("read_file"))
    assert state["status"] == "pending"
    response = bearer().post(f"{CALLS}/{state['id']}/cancel")
    assert response.status_code == 200
    cancelled = response.json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["decision"]["by"] is None
    assert cancelled["decision"]["comment"] == CANCELLED_COMMENT
    assert cancelled["decision"]["at"].endswith("Z")
    assert cancelled["gates"] == []
    assert cancelled["expires_at"] is None
    assert fetch(state) == cancelled
    again = bearer().post(f"{CALLS}/{state['id']}/cancel")
    assert assert_error(again, 409, "already_final") == errors.ALREADY_FINAL
    assert fetch(state) == cancelled


@pytest.mark.parametrize("mode", ["allow", "read_only"])
def test_cancelling_an_allowed_or_refused_call_is_409(db: None, mode: str) -> None:
    make_agent(mode=mode)
    state = created(call_of("transfer_funds"))
    assert state["status"] in {"allowed", "refused"}
    assert_error(bearer().post(f"{CALLS}/{state['id']}/cancel"), 409, "already_final")
    assert fetch(state)["status"] == state["status"]


def test_cancelling_a_call_past_its_deadline_is_409(db: None) -> None:
    make_agent(mode="prompt")
    state = created(call_of())
    Call.objects.filter(pk=state["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert_error(bearer().post(f"{CALLS}/{state['id']}/cancel"), 409, "already_final")


def test_the_list_is_newest_first_with_filters_and_a_count(agent: Agent, other: Agent) -> None:
    ids = [created(call_of(run_id="a" if i % 2 else "b"))["id"] for i in range(5)]
    Agent.objects.filter(pk=agent.pk).update(mode="prompt")
    pending = created(call_of(run_id="a"))["id"]
    created(call_of(), client=bearer(OTHER_TOKEN))
    everything = bearer().get(CALLS).json()
    assert everything["count"] == 6
    assert [item["id"] for item in everything["items"]] == [pending, *reversed(ids)]
    assert all(set(item) == STATE_KEYS for item in everything["items"])

    page = bearer().get(CALLS, {"limit": 2, "offset": 1}).json()
    assert page["count"] == 6
    assert [item["id"] for item in page["items"]] == [ids[4], ids[3]]
    assert bearer().get(CALLS, {"offset": 6}).json() == {"items": [], "count": 6}
    assert len(bearer().get(CALLS, {"limit": 100}).json()["items"]) == 6
    assert len(bearer().get(CALLS, {"limit": 1}).json()["items"]) == 1

    runs = bearer().get(CALLS, {"run_id": "a"}).json()
    assert [item["id"] for item in runs["items"]] == [pending, ids[3], ids[1]]
    assert runs["count"] == 3
    assert bearer().get(CALLS, {"run_id": ""}).json()["count"] == 0
    held = bearer().get(CALLS, {"status": "pending"}).json()
    assert [item["id"] for item in held["items"]] == [pending]
    both = bearer().get(CALLS, {"status": "allowed", "run_id": "b"}).json()
    assert [item["id"] for item in both["items"]] == [ids[4], ids[2], ids[0]]
    assert bearer().get(CALLS, {"status": "denied"}).json() == {"items": [], "count": 0}


def test_an_empty_run_id_filter_lists_the_default_run(agent: Agent) -> None:
    default_run = created(call_of())["id"]
    created(call_of(run_id="r"))
    listed = bearer().get(CALLS, {"run_id": ""}).json()
    assert ([item["id"] for item in listed["items"]], listed["count"]) == ([default_run], 1)


LIMIT_REFUSED = "The query parameter limit is malformed or out of range (1 to 100)."
OFFSET_REFUSED = "The query parameter offset is malformed or out of range (0 to 1000000000)."
STATUS_REFUSED = (
    "The query parameter status is malformed or out of range "
    "(one of allowed, refused, pending, approved, denied, expired, cancelled)."
)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"limit": "0"}, LIMIT_REFUSED),
        ({"limit": "101"}, LIMIT_REFUSED),
        ({"limit": "-1"}, LIMIT_REFUSED),
        ({"limit": "abc"}, LIMIT_REFUSED),
        ({"limit": ""}, LIMIT_REFUSED),
        ({"limit": "1.5"}, LIMIT_REFUSED),
        ({"limit": " 5"}, LIMIT_REFUSED),
        ({"offset": "-1"}, OFFSET_REFUSED),
        ({"offset": "x"}, OFFSET_REFUSED),
        ({"status": "bogus"}, STATUS_REFUSED),
        ({"status": "Pending"}, STATUS_REFUSED),
        ({"status": ""}, STATUS_REFUSED),
        ({"status": "pending", "limit": "7", "offset": "-7"}, OFFSET_REFUSED),
    ],
)
def test_a_malformed_list_query_is_400_naming_the_parameter(
    agent: Agent, query: dict[str, str], message: str
) -> None:
    assert assert_error(bearer().get(CALLS, query), 400, "bad_request") == message


def test_a_run_id_with_nul_is_400_naming_the_parameter(agent: Agent) -> None:
    refused = assert_error(bearer().get(CALLS, {"run_id": f"{SECRET}\x00"}), 400, "bad_request")
    expected = errors.QUERY_TEXT.format(most=routes.MAX_RUN_ID)
    assert refused == errors.BAD_QUERY.format(name="run_id", expected=expected)
    assert SECRET not in refused


def test_the_refusal_names_the_parameter_never_the_value(agent: Agent) -> None:
    refused = assert_error(bearer().get(CALLS, {"limit": SECRET}), 400, "bad_request")
    assert refused == LIMIT_REFUSED
    assert SECRET not in assert_error(bearer().get(CALLS, {"status": SECRET}), 400)


def test_the_currency_table_needs_no_token(db: None) -> None:
    response = Client().get("/api/v1/currencies")
    assert response.status_code == 200
    table = response.json()
    assert (table["JPY"], table["BHD"], table["USD"], table["EUR"]) == (0, 3, 2, 2)
    assert all(isinstance(value, int) for value in table.values())
    assert list(table) == sorted(table)  # the text's own order (dicts keep it), as documented


def test_the_openapi_document_lists_every_operation(db: None) -> None:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    operations = {(path, method) for path, item in paths.items() for method in item}
    assert {
        ("/api/v1/calls", "post"),
        ("/api/v1/calls", "get"),
        ("/api/v1/calls/{call_id}", "get"),
        ("/api/v1/calls/{call_id}/cancel", "post"),
        ("/api/v1/calls/{call_id}/wait", "get"),
        ("/api/v1/currencies", "get"),
    } <= operations
    submit_body = paths["/api/v1/calls"]["post"]["requestBody"]["content"]["application/json"]
    assert set(submit_body["schema"]["properties"]) == set(submissions.BODY_FIELDS)
    assert "422" not in json.dumps(paths)


def _parameter(paths: dict[str, Any], path: str, method: str, name: str) -> dict[str, Any]:
    (parameter,) = [p for p in paths[path][method]["parameters"] if p["name"] == name]
    return dict(parameter["schema"])


def test_the_openapi_document_states_the_limits_the_server_enforces(
    db: None, settings: Any
) -> None:
    settings.COUNTERSIGN_MAX_WAIT = 40
    paths = Client().get("/api/v1/openapi.json").json()["paths"]
    timeout = _parameter(paths, "/api/v1/calls/{call_id}/wait", "get", "timeout")
    assert (timeout["minimum"], timeout["maximum"], timeout["default"]) == (0, 40, 25)
    offset = _parameter(paths, "/api/v1/calls", "get", "offset")
    assert (offset["minimum"], offset["maximum"]) == (0, 10**9)
    assert _parameter(paths, "/api/v1/calls", "get", "run_id")["pattern"] == openapi.NO_NUL
    make_agent()
    # The documented maximum is served, and just past it is refused.
    assert bearer().get("/api/v1/calls?offset=1000000000").status_code == 200
    refused = bearer().get("/api/v1/calls?offset=1000000001")
    assert refused.json()["error"]["message"] == OFFSET_REFUSED


def test_the_documented_call_state_is_what_the_api_sends(db: None) -> None:
    document = Client().get("/api/v1/openapi.json").json()
    schemas = document["components"]["schemas"]
    state = schemas["CallStateOut"]
    assert set(state["properties"]) == set(state["required"]) == STATE_KEYS
    assert state["properties"]["status"]["enum"] == Call.Status.values
    assert set(schemas["ErrorOut"]["properties"]) == {"error"}
    # The long-poll's entry, written outside ninja, points at the same schemas.
    wait = document["paths"]["/api/v1/calls/{call_id}/wait"]["get"]["responses"]
    for answer in wait.values():
        ref = answer["content"]["application/json"]["schema"]["$ref"]
        assert ref.removeprefix("#/components/schemas/") in schemas


def test_the_interactive_docs_render(db: None) -> None:
    response = Client().get("/api/v1/docs")
    assert response.status_code == 200
    assert b"openapi.json" in response.content


# --- the call state -----------------------------------------------------------------------


def test_an_allowed_calls_receipt_comes_with_its_answer_and_a_held_ones_is_null(
    db: None,
) -> None:
    """docs/receipts.md: the submission's answer, GET and the list carry the receipt of an
    allowed call as stored; a held call's is null until it is approved."""
    agent = make_agent()
    allowed = created(call_of("read_file", '{"path": "a.txt"}'))
    stored = Call.objects.get(pk=allowed["id"])
    assert allowed["receipt"] == stored.receipt != ""
    assert bearer().get(f"{CALLS}/{allowed['id']}").json()["receipt"] == stored.receipt
    Agent.objects.filter(pk=agent.pk).update(mode="prompt")
    held = created(call_of("read_file", "{}"))
    assert held["receipt"] is None
    listed = {item["id"]: item["receipt"] for item in bearer().get(CALLS).json()["items"]}
    assert listed == {allowed["id"]: stored.receipt, held["id"]: None}


def test_a_pending_call_state_has_every_key(db: None) -> None:
    make_agent(mode="prompt")
    before = timezone.now()
    state = created(call_of("read_file", "{}", run_id="run-7"))
    assert set(state) == STATE_KEYS
    call_id = state["id"]
    assert str(uuid.UUID(call_id)) == call_id
    assert state["status"] == "pending"
    assert (state["tool"], state["principal"], state["run_id"]) == ("read_file", "carol", "run-7")
    assert state["arguments_sha256"] == hashlib.sha256(b"{}").hexdigest()
    assert state["gates"] == [""]
    assert state["approvals"] == []
    assert state["decision"] is None
    assert state["created_at"].endswith("Z")
    assert state["expires_at"].endswith("Z")
    call = Call.objects.get(pk=call_id)
    assert call.created_at >= before
    assert call.expires_at == call.created_at + timedelta(seconds=3600)
    assert state["links"] == {
        "self": f"/api/v1/calls/{call_id}",
        "wait": f"/api/v1/calls/{call_id}/wait",
        "ws": f"/ws/v1/calls/{call_id}",
    }
    assert bearer().get(state["links"]["self"]).status_code == 200


def test_the_approval_completing_the_quorum_decides_the_call(db: None) -> None:
    make_agent(mode="danger_full_access")
    cap_rule_save(line="big: pay arg=amount max USD 10 -> gate finance")
    Gate.objects.filter(name="finance").update(required_approvals=2)
    state = created(pay("11"))
    assert state["gates"] == ["finance"]
    alice, bob = approver("alice"), approver("bob")
    decide(state, alice, approve=True, comment="first")
    halfway = fetch(state)
    assert halfway["status"] == "pending"
    assert halfway["decision"] is None
    assert [a["by"] for a in halfway["approvals"]] == ["alice"]
    assert halfway["approvals"][0]["at"].endswith("Z")
    decide(state, bob, approve=True, comment="paid, ok")
    final = fetch(state)
    assert final["status"] == "approved"
    assert final["decision"]["by"] == "bob"
    assert final["decision"]["comment"] == "paid, ok"
    assert final["decision"]["at"].endswith("Z")
    assert [a["by"] for a in final["approvals"]] == ["alice", "bob"]
    assert final["gates"] == []
    assert final["expires_at"] is None
    assert final["reasons"] == state["reasons"]  # the reasons it was held for stay


def test_an_approval_with_no_comment_has_an_empty_comment(db: None) -> None:
    make_agent(mode="prompt")
    state = created(call_of())
    decide(state, approver("alice"), approve=True)
    assert fetch(state)["decision"]["comment"] == ""


@pytest.mark.parametrize(
    ("comment", "expected"),
    [("", DEFAULT_DENY_COMMENT), ("Use the sandbox account.", "Use the sandbox account.")],
)
def test_a_denial_returns_the_comment_or_the_default_advice(
    db: None, comment: str, expected: str
) -> None:
    make_agent(mode="prompt")
    state = created(call_of())
    alice, bob = approver("alice"), approver("bob")
    Gate.objects.filter(name="").update(required_approvals=3)
    decide(state, alice, approve=True)  # one approval toward a quorum of 3
    assert fetch(state)["status"] == "pending"
    decide(state, bob, approve=False, comment=comment)
    final = fetch(state)
    assert final["status"] == "denied"
    assert final["decision"]["by"] == "bob"
    assert final["decision"]["comment"] == expected
    assert [a["by"] for a in final["approvals"]] == ["alice"]  # denials are not approvals
    assert final["gates"] == []
    assert final["expires_at"] is None


def test_an_expired_call_is_decided_by_no_one(db: None) -> None:
    make_agent(mode="prompt")
    state = created(call_of())
    Call.objects.filter(pk=state["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert calls_expire_due() == 1
    final = fetch(state)
    assert final["status"] == "expired"
    assert final["decision"]["by"] is None
    assert final["decision"]["comment"] == EXPIRED_COMMENT
    assert (final["gates"], final["expires_at"]) == ([], None)


def test_an_allowed_or_refused_call_has_no_decision(db: None) -> None:
    make_agent(mode="read_only")
    for tool, status in (("read_file", "allowed"), ("transfer_funds", "refused")):
        state = created(call_of(tool))
        assert state["status"] == status
        assert (state["decision"], state["approvals"], state["gates"]) == (None, [], [])
        assert state["expires_at"] is None


# --- 413: the body limit, through the ASGI application -----------------------------------

ASGI_TOKEN = "cs_api-test-token-asgi"


def _asgi_agent() -> None:
    make_agent("asgi-bot", token=ASGI_TOKEN)


def _asgi_headers(length: int | None) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {ASGI_TOKEN}".encode()),
        (b"content-type", b"application/json"),
    ]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return headers


def _padded_body(size: int) -> bytes:
    """A valid submission of exactly ``size`` bytes."""
    head = b'{"tool": "read_file", "arguments": "{}", "context": "'
    tail = b'"}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


async def _count_calls() -> int:
    return await sync_to_async(Call.objects.count)()


def _assert_413(response: Mapping[str, Any]) -> None:
    """The 413 of these tests' 1024-byte limit, which it states."""
    assert response["status"] == 413
    headers = dict(response["headers"])
    assert headers[b"content-type"] == b"application/json"
    assert json.loads(response["body"]) == {
        "error": {
            "code": "body_too_large",
            "message": "The request body is larger than this server accepts (1024 bytes).",
        }
    }


async def _drive(
    application: Any, headers: list[tuple[bytes, bytes]], chunks: list[bytes]
) -> dict[str, Any]:
    """POST /calls to the ASGI app with a hand-written ``receive`` that yields the body in
    these ``http.request`` messages (``more_body`` on all but the last), then waits for ever
    (the client stays connected). The response, and how many body messages were read."""
    scope = http_scope("POST", CALLS, headers)
    sent, read = await chunked_request(application, scope, chunks)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return {"status": start["status"], "headers": start["headers"], "body": body, "read": read}


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_body_over_the_limit_is_413_and_creates_no_call(settings: Any) -> None:
    from config.asgi import application

    settings.COUNTERSIGN_MAX_BODY = 1024
    await sync_to_async(_asgi_agent)()
    at_limit = _padded_body(1024)
    ok = await asgi_response(
        application, "POST", CALLS, body=at_limit, headers=_asgi_headers(len(at_limit))
    )
    assert ok["status"] == 201, ok["body"]
    over = _padded_body(1025)
    response = await asgi_response(
        application, "POST", CALLS, body=over, headers=_asgi_headers(len(over))
    )
    _assert_413(response)
    # A content-length that lies low does not help: the bytes are counted too.
    response = await asgi_response(application, "POST", CALLS, body=over, headers=_asgi_headers(10))
    _assert_413(response)
    assert await _count_calls() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_declared_length_over_the_limit_is_413_before_the_body(settings: Any) -> None:
    from config.asgi import application

    settings.COUNTERSIGN_MAX_BODY = 1024
    await sync_to_async(_asgi_agent)()
    for declared in (b"1025", b"1000000000", b"-1", b"12x"):
        headers = [*_asgi_headers(None), (b"content-length", declared)]
        response = await _drive(application, headers, [_padded_body(3000)])
        _assert_413(response)
        assert response["read"] == 0  # answered from the header alone
    assert await _count_calls() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_chunked_body_over_the_limit_is_413(settings: Any) -> None:
    from config.asgi import application

    settings.COUNTERSIGN_MAX_BODY = 1024
    await sync_to_async(_asgi_agent)()
    body = _padded_body(3000)
    chunks = [body[i : i + 400] for i in range(0, len(body), 400)]
    response = await _drive(application, _asgi_headers(None), chunks)
    _assert_413(response)
    assert response["read"] == 3  # refused at the chunk that passed the limit
    # One chunk without content-length, as HttpCommunicator sends it.
    single = await asgi_response(application, "POST", CALLS, body=body, headers=_asgi_headers(None))
    _assert_413(single)
    assert await _count_calls() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_chunked_body_within_the_limit_is_reassembled(settings: Any) -> None:
    from config.asgi import application

    settings.COUNTERSIGN_MAX_BODY = 1024
    await sync_to_async(_asgi_agent)()
    body = _padded_body(1024)
    chunks = [body[i : i + 100] for i in range(0, len(body), 100)]
    response = await _drive(application, _asgi_headers(None), chunks)
    assert response["status"] == 201, response["body"]
    assert response["read"] == len(chunks)
    state = json.loads(response["body"])
    call = await sync_to_async(Call.objects.get)(pk=state["id"])
    assert call.context == "x" * (1024 - len(_padded_body(0)))
