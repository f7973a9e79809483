"""The client's pure parts: request bodies and headers, answers to errors, go or Denied."""

from __future__ import annotations

import inspect
import json
import math
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from countersign import errors, protocol
from tests.live import ROOT

STATE: dict[str, Any] = {"id": "5f0c2d1e-0000-4000-8000-000000000000", "status": "pending"}


def error_response(status: int, code: str = "some_code", message: str = "The detail.") -> Any:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})


@pytest.mark.parametrize(
    ("status", "kind", "advice"),
    [
        (400, errors.BadRequest, errors.BAD_REQUEST),
        (401, errors.Unauthorized, errors.UNAUTHORIZED),
        (403, errors.Forbidden, errors.FORBIDDEN),
        (404, errors.NotFound, errors.NOT_FOUND),
        (409, errors.Conflict, errors.CONFLICT),
        (413, errors.TooLarge, errors.TOO_LARGE),
    ],
)
def test_each_error_status_has_its_exception_and_advice(
    status: int, kind: type[errors.CountersignError], advice: str
) -> None:
    error = protocol.error_for(error_response(status, "the_code", "What is wrong."))
    assert type(error) is kind
    assert str(error) == advice + errors.SERVICE_SAYS.format(detail="What is wrong.")
    assert error.code == "the_code"


def test_rate_limited_carries_retry_after_in_seconds() -> None:
    response = httpx.Response(429, headers={"Retry-After": "7"}, json={})
    error = protocol.error_for(response)
    assert isinstance(error, errors.RateLimited)
    assert error.retry_after == 7.0
    assert str(error) == errors.RATE_LIMITED.format(wait="7 seconds")


def test_retry_after_as_an_http_date() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    error = protocol.error_for(httpx.Response(429, headers={"Retry-After": later}))
    assert isinstance(error, errors.RateLimited)
    assert error.retry_after is not None
    assert 25 <= error.retry_after <= 30


@pytest.mark.parametrize("header", [None, "soon", ""])
def test_retry_after_absent_or_unreadable_is_none(header: str | None) -> None:
    headers = {} if header is None else {"Retry-After": header}
    error = protocol.error_for(httpx.Response(429, headers=headers))
    assert isinstance(error, errors.RateLimited)
    assert error.retry_after is None
    assert str(error) == errors.RATE_LIMITED.format(wait="a moment")


def test_a_server_error_is_service_unavailable_and_an_odd_status_the_base_error() -> None:
    assert type(protocol.error_for(httpx.Response(500))) is errors.ServiceUnavailable
    odd = protocol.error_for(httpx.Response(418))
    assert type(odd) is errors.CountersignError
    assert str(odd) == errors.UNEXPECTED_STATUS.format(status=418)


def test_an_error_page_that_is_not_json_gets_the_advice_alone() -> None:
    error = protocol.error_for(httpx.Response(403, text="<html>Forbidden by proxy</html>"))
    assert str(error) == errors.FORBIDDEN
    assert error.code == ""


def test_a_success_that_is_not_a_call_state_is_service_unavailable() -> None:
    with pytest.raises(errors.ServiceUnavailable):
        protocol.state_from(httpx.Response(200, text="<html>login</html>"))
    with pytest.raises(errors.ServiceUnavailable):
        protocol.state_from(httpx.Response(200, json={"items": []}))
    assert protocol.state_from(httpx.Response(201, json=STATE)) == STATE


def test_arguments_text_is_sent_as_given_and_anything_else_as_json() -> None:
    assert protocol.arguments_text('{"amount":"1.0", "b" : 2}') == '{"amount":"1.0", "b" : 2}'
    assert protocol.arguments_text({"payee": "Zoë", "n": 2}) == '{"payee": "Zoë", "n": 2}'
    with pytest.raises(ValueError, match="JSON"):
        protocol.arguments_text({"amount": math.nan})


def test_a_decimal_goes_as_a_string_of_its_exact_decimal_text_never_through_float() -> None:
    arguments = {
        "amount": Decimal("12.34"),
        "fee": Decimal("0.10"),
        "big": Decimal("12345678901234567890.123456789"),
        "tiny": Decimal("1E-7"),
        "lines": [Decimal("-0"), {"n": 2}, ("Zoë", None, True)],
    }
    text = protocol.arguments_text(arguments)
    assert text == (
        '{"amount": "12.34", "fee": "0.10", "big": "12345678901234567890.123456789", '
        '"tiny": "0.0000001", "lines": ["-0", {"n": 2}, ["Zoë", null, true]]}'
    )
    assert [Decimal(json.loads(text)[name]) for name in ("amount", "big", "tiny")] == [
        arguments["amount"],
        arguments["big"],
        arguments["tiny"],
    ]


def test_json_as_written_keeps_a_decimal_the_number_literal_it_spells() -> None:
    # What the Claude Code hook sends: the tool input's numbers as the model wrote them.
    value = {"amount": Decimal("12.30"), "lines": [Decimal("-0"), ("Zoë", None, True)], 1: 2}
    assert protocol.json_as_written(value) == (
        '{"amount": 12.30, "lines": [-0, ["Zoë", null, true]], "1": 2}'
    )
    with pytest.raises(TypeError, match="not tuple"):
        protocol.json_as_written({("a", "b"): 1})


@pytest.mark.parametrize(
    "arguments",
    [{"payee": "Zoë", "n": 2, "x": 1.5}, {1: "a", 2.5: "b", False: "c", None: "d"}, [], {}],
)
def test_without_decimals_the_text_is_what_json_dumps_writes(arguments: object) -> None:
    assert protocol.arguments_text(arguments) == json.dumps(arguments, ensure_ascii=False)


@pytest.mark.parametrize("value", ["NaN", "-Infinity", "sNaN"])
def test_a_decimal_that_is_not_a_number_is_refused_before_sending(value: str) -> None:
    with pytest.raises(ValueError, match="NaN or infinite") as raised:
        protocol.submit_body("pay", {"amount": Decimal(value)})
    assert str(raised.value) == errors.DECIMAL_NOT_FINITE
    with pytest.raises(ValueError, match="NaN or infinite"):
        protocol.submit_body("pay", {}, usage={"cost": Decimal(value), "cost_currency": "USD"})


def test_what_json_dumps_refuses_is_still_refused() -> None:
    with pytest.raises(TypeError, match="not tuple"):
        protocol.arguments_text({("a", "b"): 1})
    with pytest.raises(TypeError, match="not JSON serializable"):
        protocol.arguments_text({"when": datetime.now(UTC)})


def test_a_decimal_cost_goes_as_a_decimal_string() -> None:
    usage = {"cost": Decimal("1E-7"), "cost_currency": "USD", "input_tokens": 3}
    body = json.loads(protocol.submit_body("pay", "{}", usage=usage))
    assert body["usage"] == {"cost": "0.0000001", "cost_currency": "USD", "input_tokens": 3}


def test_a_gated_context_is_the_text_or_what_the_function_returns_for_the_arguments() -> None:
    arguments = {"amount": "12.50", "payee": "ACME"}
    assert protocol.gated_context(None, arguments) is None
    assert protocol.gated_context("Paying the invoice", arguments) == "Paying the invoice"
    assert protocol.gated_context(lambda a: f"Paying {a['payee']}", arguments) == "Paying ACME"
    with pytest.raises(TypeError) as raised:
        protocol.gated_context(lambda a: 42, arguments)  # type: ignore[arg-type, return-value]
    assert str(raised.value) == errors.BAD_CONTEXT

    def meddling(given: Any) -> str:
        given["amount"] = "0.00"
        return "Paying nothing"

    with pytest.raises(TypeError):  # it reads the arguments; it cannot change what is sent
        protocol.gated_context(meddling, arguments)
    assert arguments == {"amount": "12.50", "payee": "ACME"}


def test_the_body_has_arguments_as_text_and_only_the_fields_given() -> None:
    body = json.loads(protocol.submit_body("pay", {"amount": "1"}))
    assert body == {"tool": "pay", "arguments": '{"amount": "1"}'}
    full = json.loads(
        protocol.submit_body(
            "pay",
            "{}",
            principal="user-42",
            run_id="run-7",
            context="Paying the invoice",
            usage={"input_tokens": 10},
        )
    )
    assert full == {
        "tool": "pay",
        "arguments": "{}",
        "principal": "user-42",
        "run_id": "run-7",
        "context": "Paying the invoice",
        "usage": {"input_tokens": 10},
    }


def test_each_submit_gets_a_fresh_idempotency_key_unless_one_is_given() -> None:
    auth = protocol.auth_headers("cs_token")
    first = protocol.submit_headers(auth, None)["Idempotency-Key"]
    second = protocol.submit_headers(auth, None)["Idempotency-Key"]
    assert first != second
    assert uuid.UUID(first).version == 4
    headers = protocol.submit_headers(auth, "run-7-step-3")
    assert headers["Idempotency-Key"] == "run-7-step-3"
    assert headers["Authorization"] == "Bearer cs_token"


@pytest.mark.parametrize("token", ["", "two words", "tökén", "line\nbreak"])
def test_a_token_that_cannot_be_a_header_is_refused_without_repeating_it(token: str) -> None:
    with pytest.raises(ValueError, match="check the token") as raised:
        protocol.auth_headers(token)
    assert str(raised.value) == errors.BAD_TOKEN


def test_paths_and_socket_urls() -> None:
    assert protocol.call_path(STATE, "/wait") == f"/api/v1/calls/{STATE['id']}/wait"
    assert protocol.call_path("a/../b") == "/api/v1/calls/a%2F..%2Fb"
    assert protocol.base_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    assert protocol.socket_url("http://h:8000", "x") == "ws://h:8000/ws/v1/calls/x"
    assert protocol.socket_url("https://h/cs", "x") == "wss://h/cs/ws/v1/calls/x"
    with pytest.raises(ValueError, match="http"):
        protocol.base_url("ftp://h")


def test_only_allowed_and_approved_go() -> None:
    for status in ("allowed", "approved"):
        assert protocol.raise_unless_go({**STATE, "status": status})["status"] == status
    for status in ("refused", "denied", "expired", "cancelled"):
        with pytest.raises(errors.Denied) as raised:
            protocol.raise_unless_go({**STATE, "status": status, "reasons": []})
        assert raised.value.status == status


def test_denied_carries_the_reviewers_comment_and_says_what_to_do() -> None:
    state = {
        **STATE,
        "status": "denied",
        "reasons": [{"policy": "cap", "message": "over the limit"}],
        "decision": {"by": "alice", "comment": "Pay from the other account.", "at": "…"},
    }
    denied = errors.Denied(state)
    assert (denied.status, denied.comment, denied.state) == (
        "denied",
        "Pay from the other account.",
        state,
    )
    assert denied.reasons == state["reasons"]
    assert str(denied) == errors.DENIED.format(
        status="denied", advice=errors.DENIED_ADVICE["denied"]
    ) + errors.DENIED_COMMENT.format(comment="Pay from the other account.")


def test_a_refusal_has_the_policys_reasons_as_its_comment() -> None:
    state = {
        **STATE,
        "status": "refused",
        "decision": None,
        "reasons": [{"message": "over A"}, {"message": "over B"}],
    }
    assert errors.Denied(state).comment == "over A; over B"


def test_a_gated_functions_arguments_by_parameter_name() -> None:
    def pay(amount: str, currency: str = "USD", *, memo: str = "", **extra: Any) -> None: ...

    signature = inspect.signature(pay)
    assert protocol.bound_arguments(signature, ("1.00",), {"note": "x"}) == {
        "amount": "1.00",
        "currency": "USD",
        "memo": "",
        "note": "x",
    }
    with pytest.raises(TypeError):
        protocol.bound_arguments(signature, (), {})


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    for failures in range(1, 12):
        ceiling = min(protocol.BACKOFF_CAP, protocol.BACKOFF_BASE * 2 ** (failures - 1))
        assert ceiling / 2 <= protocol.backoff(failures) <= ceiling


def test_the_client_imports_nothing_of_the_service() -> None:
    probe = (
        "import sys, countersign, countersign.__main__; "
        "print(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'django', 'approvals', 'capcore', 'config', 'channels', 'ninja'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=10
    )
    assert result.stdout.strip() == "[]", result.stderr
