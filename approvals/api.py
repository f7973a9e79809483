"""The agent HTTP API (``agent-api.md``), served by django-ninja under ``/api/v1``.

The body is read with ``capcore.strict_loads`` and its fields are checked by exact type here:
pydantic would take ``"tool": 123`` as ``"123"`` (``JSONNumber`` is a ``str``). Every error is
``{"error": {"code", "message"}}`` and no message repeats what the agent sent.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import uuid
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver, path
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

import capcore
from approvals import jsontext, selectors
from approvals.models import Agent, Call
from approvals.ratelimit import LimiterUnavailable, submission_limiter
from approvals.services.agents import agent_authenticate
from approvals.services.calls import IdempotencyConflict, Submission, call_submit
from approvals.services.lifecycle import AlreadyFinal, call_cancel

TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}", re.ASCII)
TOKEN_COUNT = re.compile(r"0|[1-9][0-9]{0,18}", re.ASCII)
BODY_FIELDS = frozenset({"tool", "arguments", "principal", "run_id", "usage", "context"})
USAGE_FIELDS = frozenset({"input_tokens", "output_tokens", "cost", "cost_currency"})
TEXT_LIMITS = {"principal": 200, "run_id": 200, "context": 4000}
LIST_STATUSES = frozenset(
    {"allowed", "refused", "pending", "approved", "denied", "expired", "cancelled"}
)
MAX_IDEMPOTENCY_KEY = 200
MAX_OFFSET = 10**9
DEFAULT_WAIT = 25  # seconds, when the long-poll names no timeout
# JSON Schema's pattern for a text that PostgreSQL can store (it refuses U+0000).
NO_NUL = "^[^\\u0000]*$"

BODY_NOT_STRICT = "The request body is not strict JSON: {category}."
BODY_NOT_OBJECT = "The request body must be a JSON object."
UNKNOWN_FIELD = "The request body has a member that is not part of the API."
BAD_TOOL = "tool must be a string matching [A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}."
BAD_ARGUMENTS = "arguments must be a JSON string or a JSON object."
BAD_TEXT = "{field} must be a string of at most {limit} characters."
NUL_CHARACTER = "Text fields and arguments must not contain U+0000."
BAD_USAGE = "usage must be an object with non-negative integer token counts, a cost as a "
BAD_USAGE += "decimal string with at most 9 fraction digits, and a known cost_currency."
PRINCIPAL_FORBIDDEN = "This agent may not act for that principal."
IDEMPOTENCY_CONFLICT = "This Idempotency-Key was used with a different request body."
BAD_IDEMPOTENCY_KEY = "Idempotency-Key must be at most 200 characters."
NOT_FOUND = "No such call."
ALREADY_FINAL = "The call is already final."
BAD_QUERY = "A query parameter is malformed or out of range."
UNAUTHENTICATED = "A valid bearer token is required."
AGENT_DISABLED = "This agent is disabled."
RATE_LIMITED = "Too many submissions from this agent; retry after the Retry-After seconds."
LIMITER_UNAVAILABLE = "The rate limit cannot be checked just now; nothing was stored. Retry."
UNAVAILABLE_RETRY_AFTER = 1  # seconds


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(code)
        self.status, self.code, self.message = status, code, message


def error_response(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


class AgentBearer(HttpBearer):
    def __call__(self, request: HttpRequest) -> Agent | None:
        # Parsed here rather than by HttpBearer, which logs the header (the token) in DEBUG.
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        return self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> Agent | None:
        agent = agent_authenticate(token=token)
        if agent is not None and not agent.active:
            raise ApiError(403, "agent_disabled", AGENT_DISABLED)
        return agent


class CountersignAPI(NinjaAPI):
    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        """The long-poll is served outside Django (``approvals.longpoll``); list it anyway."""
        schema = super().get_openapi_schema(*args, **kwargs)
        schema["paths"]["/api/v1/calls/{call_id}/wait"] = wait_operation()
        return schema

    def _get_urls(self) -> list[URLResolver | URLPattern]:
        """ninja's root view (kept by name: ninja reverses it) answers an HTML 404; under
        /api/ every unknown path is a JSON 404."""
        urls = [url for url in super()._get_urls() if getattr(url, "name", None) != "api-root"]
        return [*urls, path("", csrf_exempt(api_not_found), name="api-root")]


api = CountersignAPI(
    title="Countersign agent API",
    version="1",
    urls_namespace="api-v1",
    auth=AgentBearer(),
)

CALL_STATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "status", "tool", "principal", "run_id", "arguments_sha256", "reasons"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "status": {"type": "string", "enum": sorted(LIST_STATUSES)},
        "tool": {"type": "string"},
        "principal": {"type": "string"},
        "run_id": {"type": "string"},
        "arguments_sha256": {"type": "string"},
        "reasons": {"type": "array", "items": {"type": "object"}},
        "gates": {"type": "array", "items": {"type": "string"}},
        "approvals": {"type": "array", "items": {"type": "object"}},
        "decision": {"type": ["object", "null"]},
        "created_at": {"type": "string", "format": "date-time"},
        "expires_at": {"type": ["string", "null"], "format": "date-time"},
        "links": {"type": "object"},
    },
}
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    str(status): _json(ERROR_SCHEMA, text)
    for status, text in [
        (400, "Malformed"),
        (401, "No valid token"),
        (403, "Forbidden"),
        (404, "No such call"),
    ]
}


def wait_operation() -> dict[str, Any]:
    """The long-poll's entry, with the maximum wait this deployment allows."""
    timeout = {"type": "integer", "minimum": 0, "maximum": settings.COUNTERSIGN_MAX_WAIT}
    return {
        "get": {
            "operationId": "calls_wait",
            "summary": "Wait until the call is final, or for `timeout` seconds",
            "security": [{"AgentBearer": []}],
            "parameters": [
                {"name": "call_id", "in": "path", "required": True, "schema": {"type": "string"}},
                {
                    "name": "timeout",
                    "in": "query",
                    "required": False,
                    "schema": {**timeout, "default": default_wait()},
                },
            ],
            "responses": {"200": _json(CALL_STATE_SCHEMA, "The call state"), **ERRORS},
        }
    }


def default_wait() -> int:
    return min(DEFAULT_WAIT, settings.COUNTERSIGN_MAX_WAIT)


SUBMIT_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["tool", "arguments"],
                "properties": {
                    "tool": {"type": "string", "pattern": f"^{TOOL_NAME.pattern}$"},
                    "arguments": {
                        "oneOf": [{"type": "string", "pattern": NO_NUL}, {"type": "object"}]
                    },
                    "principal": {"type": "string", "maxLength": 200, "pattern": NO_NUL},
                    "run_id": {"type": "string", "maxLength": 200, "pattern": NO_NUL},
                    "context": {"type": "string", "maxLength": 4000, "pattern": NO_NUL},
                    "usage": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "input_tokens": {"type": "integer", "minimum": 0},
                            "output_tokens": {"type": "integer", "minimum": 0},
                            "cost": {"type": "string"},
                            "cost_currency": {"type": "string"},
                        },
                    },
                },
            }
        }
    },
}


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, error: ApiError) -> HttpResponse:
    return error_response(error.status, error.code, error.message)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
    response = error_response(401, "unauthenticated", UNAUTHENTICATED)
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, error: ValidationError) -> HttpResponse:
    return error_response(400, "bad_request", BAD_QUERY)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    return error_response(error.status_code, "error", "The request failed.")


# --- reading the submit body --------------------------------------------------------------


def _text_field(body: dict[str, object], field: str, default: str) -> str:
    value = body.get(field, default)
    limit = TEXT_LIMITS[field]
    if type(value) is not str or len(value) > limit:
        raise ApiError(400, "bad_request", BAD_TEXT.format(field=field, limit=limit))
    return value


def _usage(body: dict[str, object]) -> capcore.Usage:
    raw = body.get("usage", {})
    if type(raw) is not dict or not USAGE_FIELDS.issuperset(raw):
        raise ApiError(400, "bad_request", BAD_USAGE)
    tokens = 0
    for field in ("input_tokens", "output_tokens"):
        count = raw.get(field, capcore.JSONNumber("0"))
        if type(count) is not capcore.JSONNumber or not TOKEN_COUNT.fullmatch(count):
            raise ApiError(400, "bad_request", BAD_USAGE)
        tokens += int(count)
    if tokens > capcore.INT64_MAX:  # the run counter is a 64-bit column
        raise ApiError(400, "bad_request", BAD_USAGE)
    cost, currency = raw.get("cost"), raw.get("cost_currency")
    if cost is None and currency is None:
        return capcore.Usage(tokens=tokens)
    try:
        if type(cost) is not str or type(currency) is not str:
            raise capcore.AmountType("cost needs cost_currency")
        capcore.exponent(currency)
        return capcore.Usage(tokens=tokens, cost=capcore.cost_parse(cost), cost_currency=currency)
    except capcore.CapcoreError:
        raise ApiError(400, "bad_request", BAD_USAGE) from None


def _principal_allowed(agent: Agent, principal: str) -> bool:
    if principal == agent.principal:
        return True
    patterns = [p.strip() for p in agent.allowed_principals.split(",") if p.strip()]
    return any(fnmatch.fnmatchcase(principal, pattern) for pattern in patterns)


def _submission(request: HttpRequest, agent: Agent) -> Submission:
    try:
        body = capcore.strict_loads(request.body)
    except capcore.ArgsNotStrict as error:
        raise ApiError(
            400, "bad_request", BODY_NOT_STRICT.format(category=error.category)
        ) from None
    if type(body) is not dict:
        raise ApiError(400, "bad_request", BODY_NOT_OBJECT)
    if not BODY_FIELDS.issuperset(body):
        raise ApiError(400, "bad_request", UNKNOWN_FIELD)
    tool = body.get("tool")
    if type(tool) is not str or not TOOL_NAME.fullmatch(tool):
        raise ApiError(400, "bad_request", BAD_TOOL)
    raw_arguments = body.get("arguments")
    if type(raw_arguments) is str:
        arguments = raw_arguments
    elif type(raw_arguments) is dict:
        arguments = jsontext.compact(raw_arguments)
    else:
        raise ApiError(400, "bad_request", BAD_ARGUMENTS)
    principal = _text_field(body, "principal", agent.principal)
    run_id = _text_field(body, "run_id", "")
    context = _text_field(body, "context", "")
    # PostgreSQL cannot store U+0000; the escape \u0000 inside the arguments' JSON is fine.
    if any("\x00" in text for text in (tool, arguments, principal, run_id, context)):
        raise ApiError(400, "bad_request", NUL_CHARACTER)
    usage = _usage(body)
    if not _principal_allowed(agent, principal):
        raise ApiError(403, "principal_forbidden", PRINCIPAL_FORBIDDEN)
    key = request.headers.get("Idempotency-Key")
    if key is not None and (len(key) > MAX_IDEMPOTENCY_KEY or "\x00" in key):
        raise ApiError(400, "bad_request", BAD_IDEMPOTENCY_KEY)
    return Submission(
        tool=tool,
        arguments=arguments,
        principal=principal,
        run_id=run_id,
        context=context,
        usage=usage,
        idempotency_key=key,
        request_sha256=hashlib.sha256(request.body).hexdigest(),
    )


# --- endpoints ----------------------------------------------------------------------------


def _agent(request: HttpRequest) -> Agent:
    agent = request.auth  # type: ignore[attr-defined]
    assert isinstance(agent, Agent)
    return agent


def _own_call(request: HttpRequest, call_id: str) -> Call:
    try:
        parsed = uuid.UUID(call_id)
    except ValueError:
        raise ApiError(404, "not_found", NOT_FOUND) from None
    call = selectors.call_for_agent(agent=_agent(request), call_id=parsed)
    if call is None:
        raise ApiError(404, "not_found", NOT_FOUND)
    return call


# The 200 responses below are keyed by the int 200, as ninja keys its own default response:
# a "200" string would sit next to it, and the duplicate key breaks Swagger UI's parser.
@api.post(
    "/calls",
    summary="Submit a tool call",
    openapi_extra={
        "requestBody": SUBMIT_BODY,
        "responses": {
            "201": _json(CALL_STATE_SCHEMA, "A new call"),
            200: _json(CALL_STATE_SCHEMA, "An idempotent replay"),
            "409": _json(ERROR_SCHEMA, "Idempotency-Key reused with another body"),
            "429": _json(ERROR_SCHEMA, "Rate limited; see Retry-After"),
            "503": _json(ERROR_SCHEMA, "The rate limit cannot be checked; retry"),
            **ERRORS,
        },
    },
)
def calls_submit(request: HttpRequest) -> HttpResponse:
    agent = _agent(request)
    limiter = submission_limiter()
    try:
        retry_after = None if limiter is None else limiter.hit(f"agent:{agent.pk}")
    except LimiterUnavailable:
        # Fail-closed: an uncounted submission could be one over the limit.
        response = error_response(503, "unavailable", LIMITER_UNAVAILABLE)
        response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER)
        return response
    if retry_after is not None:
        response = error_response(429, "rate_limited", RATE_LIMITED)
        response["Retry-After"] = str(retry_after)
        return response
    try:
        call, created = call_submit(agent=agent, submission=_submission(request, agent))
    except IdempotencyConflict:
        raise ApiError(409, "idempotency_conflict", IDEMPOTENCY_CONFLICT) from None
    if created:
        # As committed; anything that happens to it later reaches the agent as it waits.
        return JsonResponse(selectors.call_state(call), status=201)
    replayed = selectors.call_for_agent(agent=agent, call_id=call.pk)
    assert replayed is not None
    return JsonResponse(selectors.call_state(replayed), status=200)


@api.get(
    "/calls/{call_id}",
    summary="The call state",
    openapi_extra={"responses": {200: _json(CALL_STATE_SCHEMA, "The call state"), **ERRORS}},
)
def calls_get(request: HttpRequest, call_id: str) -> HttpResponse:
    return JsonResponse(selectors.call_state(_own_call(request, call_id)))


@api.post(
    "/calls/{call_id}/cancel",
    summary="Withdraw a pending call",
    openapi_extra={
        "responses": {
            200: _json(CALL_STATE_SCHEMA, "The cancelled call"),
            "409": _json(ERROR_SCHEMA, "Already final"),
            **ERRORS,
        }
    },
)
def calls_cancel(request: HttpRequest, call_id: str) -> HttpResponse:
    call = _own_call(request, call_id)
    try:
        call_cancel(agent=_agent(request), call_id=call.pk)
    except AlreadyFinal:
        raise ApiError(409, "already_final", ALREADY_FINAL) from None
    return JsonResponse(selectors.call_state(_own_call(request, call_id)))


def _bounded_int(raw: str | None, default: int, low: int, high: int) -> int:
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]{1,10}", raw, re.ASCII) or not low <= int(raw) <= high:
        raise ApiError(400, "bad_request", BAD_QUERY)
    return int(raw)


@api.get(
    "/calls",
    summary="This agent's calls, newest first",
    openapi_extra={
        "parameters": [
            {
                "name": "status",
                "in": "query",
                "schema": {"type": "string", "enum": sorted(LIST_STATUSES)},
            },
            {"name": "run_id", "in": "query", "schema": {"type": "string", "pattern": NO_NUL}},
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            {
                "name": "offset",
                "in": "query",
                "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
            },
        ],
        "responses": {
            200: _json(
                {
                    "type": "object",
                    "properties": {
                        "items": {"type": "array", "items": CALL_STATE_SCHEMA},
                        "count": {"type": "integer"},
                    },
                },
                "A page of calls",
            ),
            **ERRORS,
        },
    },
)
def calls_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status")
    if status is not None and status not in LIST_STATUSES:
        raise ApiError(400, "bad_request", BAD_QUERY)
    limit = _bounded_int(request.GET.get("limit"), 50, 1, 100)
    offset = _bounded_int(request.GET.get("offset"), 0, 0, MAX_OFFSET)
    run_id = request.GET.get("run_id")
    if run_id is not None and "\x00" in run_id:
        raise ApiError(400, "bad_request", BAD_QUERY)
    calls, count = selectors.calls_for_agent(
        agent=_agent(request),
        status=status,
        run_id=run_id,
        limit=limit,
        offset=offset,
    )
    return JsonResponse({"items": [selectors.call_state(c) for c in calls], "count": count})


@api.get(
    "/currencies",
    auth=None,
    summary="The ISO 4217 exponent table",
    openapi_extra={
        "responses": {
            200: _json({"type": "object", "additionalProperties": {"type": "integer"}}, "Exponents")
        }
    },
)
def currencies(request: HttpRequest) -> HttpResponse:
    return JsonResponse(capcore.exponents())


def api_not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other path under /api/ is a JSON 404."""
    return error_response(404, "not_found", "No such endpoint.")
