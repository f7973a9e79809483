"""The agent HTTP API (docs/api.md), served by django-ninja under ``/api/v1``: the routes.

Who is calling is ``agent_auth``'s to say, the submit body is read by
``services.submissions``, and the OpenAPI document's shapes are in ``openapi``. Every refusal
is an ``errors.ApiError``, answered as ``{"error": {"code", "message"}}`` — never in ninja's
own formats (a ``422``, a ``401`` without ``WWW-Authenticate``, an HTML ``404``).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.security.http import HttpAuthBase

import capcore
from approvals.api.audit import router as audit_router
from approvals.api.auth import bearer_agent, request_authorization
from approvals.api.errors import (
    ALREADY_FINAL,
    BAD_PARAMETERS,
    IDEMPOTENCY_CONFLICT,
    LIMITER_UNAVAILABLE,
    NO_SUCH_ENDPOINT,
    NOT_FOUND,
    QUERY_CHOICES,
    QUERY_RANGE,
    QUERY_TEXT,
    QUERY_TOO_MANY,
    RATE_LIMITED,
    REQUEST_FAILED,
    SIMULATE_RATE_LIMITED,
    ApiError,
    Code,
    api_error_of,
    error_response,
    query_refusal,
    query_repeated,
)
from approvals.api.openapi import (
    ERRORS,
    HELD,
    NO_NUL,
    CallListOut,
    CallStateOut,
    ErrorOut,
    SimulationOut,
    documented,
    submit_body,
    wait_operation,
)
from approvals.api.ratelimit import LimiterUnavailable, submission_limiter
from approvals.api.submissions import TEXT_LIMITS, submission_parse
from approvals.errors import ApplicationError
from approvals.models import Agent, Call
from approvals.ops.metrics import RATE_LIMIT_REFUSALS, RateLimitRefusal
from approvals.querydict import ParameterRepeated, query_value
from approvals.selectors.calls import call_for_agent, call_state, calls_for_agent
from approvals.services.calls import IdempotencyConflict, call_evaluate_only, call_submit
from approvals.services.lifecycle import AlreadyFinal, call_cancel

DEFAULT_LIMIT = 50
MAX_LIMIT = 100
MAX_OFFSET = 10**9
MAX_RUN_ID = TEXT_LIMITS["run_id"]  # a longer one was never stored


class AgentBearer(HttpAuthBase):
    """The agent of the request's bearer token (``agent_auth``); a refusal is raised as an
    ``ApiError``. Not ninja's ``HttpBearer``, which logs the header (the token) in DEBUG and
    reads the headers Django has joined."""

    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest) -> Agent:
        return bearer_agent(authorization=request_authorization(request))


class CountersignAPI(NinjaAPI):
    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        """The long-poll is served outside Django (``approvals.api.longpoll``); list it anyway."""
        schema = super().get_openapi_schema(*args, **kwargs)
        schema["paths"]["/api/v1/calls/{call_id}/wait"] = wait_operation()
        return schema


api = CountersignAPI(
    title="Countersign agent API",
    version="1",
    urls_namespace="api-v1",
    auth=AgentBearer(),
)


# The audit log's export and signed head, behind their own token (approvals/api/audit.py).
api.add_router("/audit", audit_router)


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, error: ApiError) -> HttpResponse:
    return error_response(error)


@api.exception_handler(ApplicationError)
def _refused(request: HttpRequest, error: ApplicationError) -> HttpResponse:
    # A route catches the refusals it has its own code for; any other is answered by kind.
    return error_response(api_error_of(error))


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, error: ValidationError) -> HttpResponse:
    return error_response(ApiError(400, Code.BAD_REQUEST, BAD_PARAMETERS))


@api.exception_handler(TooManyFieldsSent)
def _too_many_parameters(request: HttpRequest, error: TooManyFieldsSent) -> HttpResponse:
    # Raised by request.GET itself; unhandled, ninja would answer a traceback under DEBUG.
    message = QUERY_TOO_MANY.format(most=settings.DATA_UPLOAD_MAX_NUMBER_FIELDS)
    return error_response(ApiError(400, Code.BAD_REQUEST, message))


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    return error_response(ApiError(error.status_code, Code.ERROR, REQUEST_FAILED))


def _agent(request: HttpRequest) -> Agent:
    agent = request.auth  # type: ignore[attr-defined]
    assert isinstance(agent, Agent)
    return agent


def _own_call(request: HttpRequest, call_id: str) -> Call:
    try:
        parsed = uuid.UUID(call_id)
    except ValueError:
        raise ApiError(404, Code.NOT_FOUND, NOT_FOUND) from None
    call = call_for_agent(agent=_agent(request), call_id=parsed)
    if call is None:
        raise ApiError(404, Code.NOT_FOUND, NOT_FOUND)
    return call


def _one(request: HttpRequest, name: str) -> str | None:
    """The parameter's value; None when absent, a ``400`` when it is given more than once."""
    try:
        return query_value(request.GET, name)
    except ParameterRepeated:
        raise query_repeated(name=name) from None


def _rate_limit(bucket: str, *, message: str, counted: bool) -> None:
    """Count one request in the agent's ``bucket`` of the rate limit: ``429`` when over it,
    ``503`` when it cannot be read. ``counted``: the refusal is a submission's, for the
    metric."""
    limiter = submission_limiter()
    try:
        retry_after = None if limiter is None else limiter.hit(bucket)
    except LimiterUnavailable as error:
        if counted:
            RATE_LIMIT_REFUSALS.labels(RateLimitRefusal.LIMITER_UNAVAILABLE).inc()
        # Fail-closed: an uncounted request could be one over the limit.
        raise api_error_of(error, message=LIMITER_UNAVAILABLE) from None
    if retry_after is not None:
        if counted:
            RATE_LIMIT_REFUSALS.labels(RateLimitRefusal.OVER_LIMIT).inc()
        raise ApiError(429, Code.RATE_LIMITED, message, retry_after=retry_after)


def _bounded_int(request: HttpRequest, name: str, default: int, low: int, high: int) -> int:
    raw = _one(request, name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]{1,10}", raw, re.ASCII) or not low <= int(raw) <= high:
        raise query_refusal(name=name, expected=QUERY_RANGE.format(low=low, high=high))
    return int(raw)


# The statuses are ints, as ninja keys its own: a "200" string beside ninja's 200 would be a
# duplicate key, which breaks Swagger UI's parser.
@api.post(
    "/calls",
    summary="Submit a tool call",
    **documented(
        {
            201: (CallStateOut, "A new call"),
            200: (CallStateOut, "An idempotent replay"),
            409: (ErrorOut, "Idempotency-Key reused with another body"),
            429: (ErrorOut, "Rate limited; see Retry-After"),
            503: (ErrorOut, "The rate limit cannot be checked; retry"),
            **ERRORS,
        },
        requestBody=submit_body(),
    ),
)
def calls_submit(request: HttpRequest) -> HttpResponse:
    agent = _agent(request)
    _rate_limit(f"agent:{agent.pk}", message=RATE_LIMITED, counted=True)
    submission = submission_parse(
        agent=agent, body=request.body, idempotency_key=request.headers.get("Idempotency-Key")
    )
    try:
        call, created = call_submit(agent=agent, submission=submission)
    except IdempotencyConflict as error:
        raise api_error_of(
            error, code=Code.IDEMPOTENCY_CONFLICT, message=IDEMPOTENCY_CONFLICT
        ) from None
    if created:
        # As committed, with no approvals yet; anything that happens to it later reaches the
        # agent as it waits.
        return JsonResponse(call_state(call, approvals=()), status=201)
    replayed = call_for_agent(agent=agent, call_id=call.pk)
    assert replayed is not None
    return JsonResponse(call_state(replayed), status=200)


# Registered before "/calls/{call_id}", whose pattern would take "simulate" for an id.
@api.post(
    "/calls/simulate",
    summary="The verdict a call would get now, recording nothing",
    **documented(
        {
            200: (SimulationOut, "The verdict"),
            429: (ErrorOut, "Rate limited; see Retry-After"),
            503: (ErrorOut, "The rate limit cannot be checked; retry"),
            **{status: answer for status, answer in ERRORS.items() if status != 404},
        },
        requestBody=submit_body(),
    ),
)
def calls_simulate(request: HttpRequest) -> HttpResponse:
    agent = _agent(request)
    # A bucket of its own: simulating never spends the agent's submissions, and a loop of
    # simulations (each a full evaluation) is limited as submissions are.
    _rate_limit(f"simulate:{agent.pk}", message=SIMULATE_RATE_LIMITED, counted=False)
    # Read and refused exactly as a submission; its Idempotency-Key is checked, then unused.
    submission = submission_parse(
        agent=agent, body=request.body, idempotency_key=request.headers.get("Idempotency-Key")
    )
    evaluation = call_evaluate_only(agent=agent, submission=submission)
    verdict = evaluation.verdict
    return JsonResponse(
        {
            "status": HELD if verdict.status is capcore.Status.PENDING else verdict.status.value,
            "reasons": [finding.as_reason() for finding in verdict.reasons],
            "gates": list(verdict.gates),
            "shadow": [finding.as_reason() for finding in evaluation.shadow],
        }
    )


@api.get(
    "/calls/{call_id}",
    summary="The call state",
    **documented({200: (CallStateOut, "The call state"), **ERRORS}),
)
def calls_get(request: HttpRequest, call_id: str) -> HttpResponse:
    return JsonResponse(call_state(_own_call(request, call_id)))


@api.post(
    "/calls/{call_id}/cancel",
    summary="Withdraw a pending call",
    **documented(
        {
            200: (CallStateOut, "The cancelled call"),
            409: (ErrorOut, "Already final"),
            **ERRORS,
        }
    ),
)
def calls_cancel(request: HttpRequest, call_id: str) -> HttpResponse:
    call = _own_call(request, call_id)
    try:
        call_cancel(agent=_agent(request), call_id=call.pk)
    except AlreadyFinal as error:
        raise api_error_of(error, code=Code.ALREADY_FINAL, message=ALREADY_FINAL) from None
    return JsonResponse(call_state(_own_call(request, call_id)))


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema}


@api.get(
    "/calls",
    summary="This agent's calls, newest first",
    **documented(
        {200: (CallListOut, "A page of calls"), **ERRORS},
        # Read from request.GET below rather than by ninja, whose int parsing is laxer.
        parameters=[
            _query("status", {"type": "string", "enum": Call.Status.values}),
            _query("run_id", {"type": "string", "maxLength": MAX_RUN_ID, "pattern": NO_NUL}),
            _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
            _query("offset", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET}),
        ],
    ),
)
def calls_list(request: HttpRequest) -> HttpResponse:
    status = _one(request, "status")
    if status is not None and status not in Call.Status.values:
        choices = QUERY_CHOICES.format(choices=", ".join(Call.Status.values))
        raise query_refusal(name="status", expected=choices)
    limit = _bounded_int(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _bounded_int(request, "offset", 0, 0, MAX_OFFSET)
    run_id = _one(request, "run_id")
    if run_id is not None and ("\x00" in run_id or len(run_id) > MAX_RUN_ID):
        raise query_refusal(name="run_id", expected=QUERY_TEXT.format(most=MAX_RUN_ID))
    calls, count = calls_for_agent(
        agent=_agent(request),
        status=status,
        run_id=run_id,
        limit=limit,
        offset=offset,
    )
    return JsonResponse({"items": [call_state(c) for c in calls], "count": count})


@api.get(
    "/currencies",
    auth=None,
    summary="The ISO 4217 exponent table",
    **documented({200: (dict[str, int], "Exponents")}),
)
def currencies(request: HttpRequest) -> HttpResponse:
    # Sorted by code, as docs/api.md shows it: the table's own order is the iso4217 package's.
    return JsonResponse(dict(sorted(capcore.exponents().items())))


def api_not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other path under /api/ is a JSON 404."""
    return error_response(ApiError(404, Code.NOT_FOUND, NO_SUCH_ENDPOINT))
