"""Reading a submit body into a ``Submission``, and whom an agent may act for, without HTTP
(tests/approvals/test_api.py has the same rules through the API)."""

from __future__ import annotations

import hashlib

import pytest

import capcore
from approvals.api.errors import ApiError, Code
from approvals.api.submissions import (
    BAD_IDEMPOTENCY_KEY,
    BAD_TEXT,
    BAD_TOOL,
    BAD_USAGE,
    BODY_NOT_OBJECT,
    NUL_CHARACTER,
    PRINCIPAL_FORBIDDEN,
    TEXT_LIMITS,
    UNKNOWN_FIELD,
    principal_allowed,
    submission_parse,
)
from approvals.models import Agent
from approvals.services.calls import Submission

BODY = b'{"tool": "pay", "arguments": "{\\"amount\\": \\"1\\"}"}'


def _agent(principal: str = "carol", allowed_principals: str = "") -> Agent:
    # Unsaved: reading a body needs no database.
    return Agent(name="bot", principal=principal, allowed_principals=allowed_principals)


def _refusal(body: bytes, key: str | None = None, agent: Agent | None = None) -> ApiError:
    with pytest.raises(ApiError) as raised:
        submission_parse(agent=agent or _agent(), body=body, idempotency_key=key)
    return raised.value


def test_a_body_with_defaults() -> None:
    submission = submission_parse(agent=_agent(), body=BODY, idempotency_key="k-1")
    assert submission == Submission(
        tool="pay",
        arguments='{"amount": "1"}',
        principal="carol",
        idempotency_key="k-1",
        request_sha256=hashlib.sha256(BODY).hexdigest(),
    )


def test_every_field() -> None:
    body = (
        b'{"tool": "pay", "arguments": {"amount": 1.50}, "principal": "carol", "run_id": "r",'
        b' "context": "why", "usage": {"input_tokens": 2, "output_tokens": 3, "cost": "0.1",'
        b' "cost_currency": "USD"}}'
    )
    submission = submission_parse(agent=_agent(), body=body, idempotency_key=None)
    assert submission.arguments == '{"amount":1.50}'
    assert (submission.run_id, submission.context) == ("r", "why")
    assert submission.usage == capcore.Usage(tokens=5, cost=100_000_000, cost_currency="USD")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[]", BODY_NOT_OBJECT),
        (b'{"tool": "pay", "arguments": "{}", "extra": 1}', UNKNOWN_FIELD),
        (b'{"tool": 1, "arguments": "{}"}', BAD_TOOL),
        (
            b'{"tool": "pay", "arguments": "{}", "run_id": 7}',
            BAD_TEXT.format(field="run_id", limit=200),
        ),
        (b'{"tool": "pay", "arguments": "{}", "context": "a\\u0000"}', NUL_CHARACTER),
        (b'{"tool": "pay", "arguments": "{}", "usage": {"input_tokens": -1}}', BAD_USAGE),
        (b'{"tool": "pay", "arguments": "{}", "usage": {"cost": "1"}}', BAD_USAGE),
    ],
)
def test_a_body_that_breaks_a_rule_is_400(body: bytes, message: str) -> None:
    refusal = _refusal(body)
    assert (refusal.status, refusal.code, refusal.message) == (400, Code.BAD_REQUEST, message)


def test_the_text_limits_are_the_documented_ones() -> None:
    assert TEXT_LIMITS == {"principal": 200, "run_id": 200, "context": 4000}


@pytest.mark.parametrize("key", ["k" * 201, "a\x00b"])
def test_a_bad_idempotency_key_is_400(key: str) -> None:
    refusal = _refusal(BODY, key)
    assert (refusal.status, refusal.message) == (400, BAD_IDEMPOTENCY_KEY)


def test_a_forbidden_principal_is_403_and_checked_before_the_key() -> None:
    body = b'{"tool": "pay", "arguments": "{}", "principal": "mallory"}'
    refusal = _refusal(body, "k" * 201)
    assert (refusal.status, refusal.code, refusal.message) == (
        403,
        Code.PRINCIPAL_FORBIDDEN,
        PRINCIPAL_FORBIDDEN,
    )


@pytest.mark.parametrize(
    ("allowed", "principal", "expected"),
    [
        ("", "carol", True),
        ("", "dave", False),
        ("team-*", "team-a", True),
        ("team-*", "Team-a", False),
        (" dave , erin ", "erin", True),
        ("*", "anyone", True),
        (",,", "dave", False),
    ],
)
def test_principal_allowed(allowed: str, principal: str, expected: bool) -> None:
    agent = _agent(allowed_principals=allowed)
    assert principal_allowed(agent=agent, principal=principal) is expected
