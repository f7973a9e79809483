"""What the agent entry points answer when they refuse: one error type, its codes and
messages, and its JSON body ``{"error": {"code", "message"}}`` (docs/api.md, "Errors").

The API, the long-poll and the agent sockets all raise ``ApiError``; HTTP answers it with
the body and its status, a socket closes with ``4000 + status`` (``4401``, ``4403``, ...).
A domain refusal (``approvals.errors``) becomes one in ``api_error_of``, by its kind.
No message repeats what the agent sent.
"""

from __future__ import annotations

import json
from enum import StrEnum

from django.http import JsonResponse

from approvals.errors import (
    ApplicationError,
    Conflict,
    Invalid,
    NotFound,
    NotPermitted,
    Unavailable,
)
from config.runtime.asgi_types import Send


class Code(StrEnum):
    """The error body's machine codes."""

    BAD_REQUEST = "bad_request"
    UNAUTHENTICATED = "unauthenticated"
    AGENT_DISABLED = "agent_disabled"
    PRINCIPAL_FORBIDDEN = "principal_forbidden"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    ALREADY_FINAL = "already_final"
    BODY_TOO_LARGE = "body_too_large"
    BODY_TIMEOUT = "body_timeout"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    ERROR = "error"


UNAUTHENTICATED = "A valid bearer token is required."
AGENT_DISABLED = "This agent is disabled."
NOT_FOUND = "No such call."
SERVER_STOPPING = "The server is stopping; wait again."
NO_SUCH_ENDPOINT = "No such endpoint."
METHOD_NOT_ALLOWED = "This method is not allowed here."
# The parameter's name and what it may be, both ours: never the value that was sent. The
# approver's pages say the same of their query strings (approvals/web/querystring.py).
BAD_QUERY = "The query parameter {name} is malformed or out of range ({expected})."
QUERY_REPEATED = "The query parameter {name} is given more than once."
QUERY_TOO_MANY = "The query string has more than {most} parameters."
QUERY_RANGE = "{low} to {high}"
QUERY_CHOICES = "one of {choices}"
QUERY_TEXT = "text of at most {most} characters without U+0000"
BAD_PARAMETERS = "A parameter of the request is malformed."
ALREADY_FINAL = "The call is already final."
IDEMPOTENCY_CONFLICT = "This Idempotency-Key was used with a different request body."
RATE_LIMITED = "Too many submissions from this agent; retry after the Retry-After seconds."
SIMULATE_RATE_LIMITED = (
    "Too many simulated calls from this agent; retry after the Retry-After seconds."
)
LIMITER_UNAVAILABLE = "The rate limit cannot be checked just now; nothing was stored. Retry."
REQUEST_FAILED = "The request failed."

# A WebSocket refusal is this plus the HTTP status it stands for.
CLOSE_CODE_BASE = 4000
# Seconds an agent is told to wait before it retries what was refused as unavailable.
UNAVAILABLE_RETRY_AFTER = 1


class ApiError(Exception):
    """A refusal: the HTTP status, the body's code and message, and for ``429``/``503`` the
    seconds after which to retry."""

    def __init__(
        self, status: int, code: Code, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(code)
        self.status, self.code, self.message = status, code, message
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        """The headers the answer carries besides its content type."""
        headers = {}
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        return headers

    @property
    def close_code(self) -> int:
        return CLOSE_CODE_BASE + self.status


# The status and code of each kind of domain refusal, the first that matches.
_KINDS: tuple[tuple[type[ApplicationError], int, Code], ...] = (
    (NotFound, 404, Code.NOT_FOUND),
    (NotPermitted, 403, Code.ERROR),
    (Invalid, 400, Code.BAD_REQUEST),
    (Conflict, 409, Code.ERROR),
    (Unavailable, 503, Code.UNAVAILABLE),
)


def api_error_of(
    error: ApplicationError, *, code: Code | None = None, message: str | None = None
) -> ApiError:
    """The agent's answer to a domain refusal: the status of its kind, with ``code`` and
    ``message`` when the route has its own words for it (else the kind's code and the
    error's message); an unavailable one says when to retry."""
    status, kind_code = next(
        ((status, kind_code) for kind, status, kind_code in _KINDS if isinstance(error, kind)),
        (400, Code.BAD_REQUEST),
    )
    retry_after = UNAVAILABLE_RETRY_AFTER if isinstance(error, Unavailable) else None
    return ApiError(
        status,
        code or kind_code,
        message or error.message or REQUEST_FAILED,
        retry_after=retry_after,
    )


def query_refusal(*, name: str, expected: str) -> ApiError:
    """The ``400`` for a query parameter, naming it and what it may be."""
    return ApiError(400, Code.BAD_REQUEST, BAD_QUERY.format(name=name, expected=expected))


def query_repeated(*, name: str) -> ApiError:
    """The ``400`` for a query parameter given more than once: which of them counts would be
    a guess."""
    return ApiError(400, Code.BAD_REQUEST, QUERY_REPEATED.format(name=name))


def json_error_bytes(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def error_response(error: ApiError) -> JsonResponse:
    """The error as Django's answer."""
    response = JsonResponse(
        {"error": {"code": error.code, "message": error.message}}, status=error.status
    )
    for name, value in error.headers.items():
        response[name] = value
    return response


async def send_json(
    send: Send, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """A whole JSON answer on a raw ASGI ``send``, its length stated (without it the server
    would send it chunked, which an HTTP/1.0 client cannot read)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: ApiError) -> None:
    """The error as a raw ASGI answer."""
    headers = tuple(
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in error.headers.items()
    )
    await send_json(send, error.status, json_error_bytes(error.code, error.message), headers)
