"""Reading a ``POST /api/v1/calls`` body into a ``Submission``, and which principals an agent
may act for (docs/api.md, "POST /calls").

The body is read with ``capcore.strict_loads`` and its fields are checked by exact type:
pydantic would take ``"tool": 123`` as ``"123"`` (``JSONNumber`` is a ``str``). The limits
here are the ones the OpenAPI document states (``approvals.api.openapi``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re

import capcore
from approvals import jsontext
from approvals.api.errors import ApiError, Code
from approvals.models import Agent
from approvals.services.calls import Submission
from capcore.budgets import parse_cost

TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}", re.ASCII)
TOKEN_COUNT = re.compile(r"0|[1-9][0-9]{0,18}", re.ASCII)
TEXT_LIMITS = {"principal": 200, "run_id": 200, "context": 4000}
BODY_FIELDS = frozenset({"tool", "arguments", *TEXT_LIMITS, "usage"})
TOKEN_FIELDS = ("input_tokens", "output_tokens")
COST_FIELDS = ("cost", "cost_currency")
USAGE_FIELDS = frozenset({*TOKEN_FIELDS, *COST_FIELDS})
MAX_IDEMPOTENCY_KEY = 200

BODY_NOT_STRICT = "The request body is not strict JSON: {category}."
BODY_NOT_OBJECT = "The request body must be a JSON object."
UNKNOWN_FIELD = "The request body has a member that is not part of the API."
BAD_TOOL = f"tool must be a string matching {TOOL_NAME.pattern}."
BAD_ARGUMENTS = "arguments must be a JSON string or a JSON object."
BAD_TEXT = "{field} must be a string of at most {limit} characters."
NUL_CHARACTER = "Text fields and arguments must not contain U+0000."
BAD_USAGE = "usage must be an object with non-negative integer token counts, a cost as a "
BAD_USAGE += "decimal string with at most 9 fraction digits, and a known cost_currency."
PRINCIPAL_FORBIDDEN = "This agent may not act for that principal."
BAD_IDEMPOTENCY_KEY = f"Idempotency-Key must be at most {MAX_IDEMPOTENCY_KEY} characters."


def _bad_request(message: str) -> ApiError:
    return ApiError(400, Code.BAD_REQUEST, message)


def _text_field(body: dict[str, object], name: str, default: str) -> str:
    value = body.get(name, default)
    limit = TEXT_LIMITS[name]
    if type(value) is not str or len(value) > limit:
        raise _bad_request(BAD_TEXT.format(field=name, limit=limit))
    return value


def _usage(body: dict[str, object]) -> capcore.Usage:
    raw = body.get("usage", {})
    if type(raw) is not dict or not USAGE_FIELDS.issuperset(raw):
        raise _bad_request(BAD_USAGE)
    tokens = 0
    for name in TOKEN_FIELDS:
        count = raw.get(name, capcore.JSONNumber("0"))
        if type(count) is not capcore.JSONNumber or not TOKEN_COUNT.fullmatch(count):
            raise _bad_request(BAD_USAGE)
        tokens += int(count)
    if tokens > capcore.INT64_MAX:  # the run counter is a 64-bit column
        raise _bad_request(BAD_USAGE)
    cost, currency = raw.get("cost"), raw.get("cost_currency")
    if cost is None and currency is None:
        return capcore.Usage(tokens=tokens)
    try:
        if type(cost) is not str or type(currency) is not str:
            raise capcore.AmountType("cost needs cost_currency")
        capcore.exponent(currency)
        return capcore.Usage(tokens=tokens, cost=parse_cost(cost), cost_currency=currency)
    except capcore.CapcoreError:
        raise _bad_request(BAD_USAGE) from None


def principal_allowed(*, agent: Agent, principal: str) -> bool:
    """Whether the agent may act for ``principal``: its own, or one matching a glob of its
    comma-separated ``allowed_principals`` (case-sensitive)."""
    if principal == agent.principal:
        return True
    patterns = [p.strip() for p in agent.allowed_principals.split(",") if p.strip()]
    return any(fnmatch.fnmatchcase(principal, pattern) for pattern in patterns)


def submission_parse(*, agent: Agent, body: bytes, idempotency_key: str | None) -> Submission:
    """The submission in a raw request body, for this agent. Raises ``ApiError``: ``400``
    for a body or key that breaks the rules, ``403`` for a principal the agent may not act
    for."""
    try:
        parsed = capcore.strict_loads(body)
    except capcore.ArgsNotStrict as error:
        raise _bad_request(BODY_NOT_STRICT.format(category=error.category)) from None
    if type(parsed) is not dict:
        raise _bad_request(BODY_NOT_OBJECT)
    if not BODY_FIELDS.issuperset(parsed):
        raise _bad_request(UNKNOWN_FIELD)
    tool = parsed.get("tool")
    if type(tool) is not str or not TOOL_NAME.fullmatch(tool):
        raise _bad_request(BAD_TOOL)
    raw_arguments = parsed.get("arguments")
    if type(raw_arguments) is str:
        arguments = raw_arguments
    elif type(raw_arguments) is dict:
        arguments = jsontext.compact(raw_arguments)
    else:
        raise _bad_request(BAD_ARGUMENTS)
    principal = _text_field(parsed, "principal", agent.principal)
    run_id = _text_field(parsed, "run_id", "")
    context = _text_field(parsed, "context", "")
    # PostgreSQL cannot store U+0000; the escape \u0000 inside the arguments' JSON is fine.
    if any("\x00" in text for text in (tool, arguments, principal, run_id, context)):
        raise _bad_request(NUL_CHARACTER)
    usage = _usage(parsed)
    if not principal_allowed(agent=agent, principal=principal):
        raise ApiError(403, Code.PRINCIPAL_FORBIDDEN, PRINCIPAL_FORBIDDEN)
    if idempotency_key is not None and (
        len(idempotency_key) > MAX_IDEMPOTENCY_KEY or "\x00" in idempotency_key
    ):
        raise _bad_request(BAD_IDEMPOTENCY_KEY)
    return Submission(
        tool=tool,
        arguments=arguments,
        principal=principal,
        run_id=run_id,
        context=context,
        usage=usage,
        idempotency_key=idempotency_key,
        request_sha256=hashlib.sha256(body).hexdigest(),
    )
