"""What the OpenAPI document (``/api/v1/openapi.json``) says that ninja cannot read off the
routes: the shapes of the answers, the submit body, and the long-poll, which is served
outside Django. Each limit is taken from the code that enforces it.

The answers' ``Schema`` classes only describe: the views return their ``JsonResponse`` as
it is, which ninja passes through without validating or serialising it again.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from django.conf import settings
from ninja import Field, Schema

from approvals.api.longpoll import default_wait
from approvals.api.submissions import COST_FIELDS, TEXT_LIMITS, TOKEN_FIELDS, TOOL_NAME
from approvals.models import Call

# JSON Schema's pattern for a text that PostgreSQL can store (it refuses U+0000).
NO_NUL = "^[^\\u0000]*$"


class ErrorDetail(Schema):
    code: str
    message: str


class ErrorOut(Schema):
    """Every error's body."""

    error: ErrorDetail


class CallStateOut(Schema):
    """What every endpoint that returns a call returns."""

    id: uuid.UUID
    # The statuses inline: as Call.Status itself, the enum's docstring would describe them.
    status: Annotated[str, Field(json_schema_extra={"enum": Call.Status.values})]
    tool: str
    principal: str
    run_id: str
    # The text an approver edited the arguments to; null when the call was not edited.
    arguments: str | None
    arguments_sha256: str
    edited: bool
    original_arguments_sha256: str | None
    reasons: list[dict[str, Any]]
    # What shadow cap rules would have said (as reasons): never enforced.
    shadow: list[dict[str, Any]]
    gates: list[str]
    approvals: list[dict[str, Any]]
    decision: dict[str, Any] | None
    created_at: datetime
    expires_at: datetime | None
    # The compact JWS receipt of an allowed or approved call; null for every other status.
    receipt: str | None
    links: dict[str, str]


# A simulated call's statuses: a held one has no call, so it is not called pending here.
HELD = "held"
SIMULATED_STATUSES = [Call.Status.ALLOWED.value, HELD, Call.Status.REFUSED.value]


class SimulationOut(Schema):
    """What ``POST /calls/simulate`` answers: the verdict a submission would get now."""

    status: Annotated[str, Field(json_schema_extra={"enum": SIMULATED_STATUSES})]
    reasons: list[dict[str, Any]]
    gates: list[str]
    # What shadow cap rules would have said (as reasons): never enforced.
    shadow: list[dict[str, Any]]


class CallListOut(Schema):
    items: list[CallStateOut]
    count: int


# Per status: the answer's schema, and what it means.
Responses = dict[int, tuple[Any, str]]

ERRORS: Responses = {
    400: (ErrorOut, "Malformed"),
    401: (ErrorOut, "No valid token"),
    403: (ErrorOut, "Forbidden"),
    404: (ErrorOut, "No such call"),
}


def documented(responses: Responses, **extra: Any) -> dict[str, Any]:
    """A route's ``response`` and ``openapi_extra`` arguments: ninja's schema for each status,
    described in our words, and ``extra`` for the rest of its ``openapi_extra``."""
    descriptions = {status: {"description": text} for status, (_, text) in responses.items()}
    return {
        "response": {status: schema for status, (schema, _) in responses.items()},
        "openapi_extra": {"responses": descriptions, **extra},
    }


def _ref(schema: type[Schema]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{schema.__name__}"}


def _json(schema: type[Schema], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def submit_body() -> dict[str, Any]:
    """``POST /calls``' body, from the limits ``services.submissions`` checks."""
    text = {"type": "string", "pattern": NO_NUL}
    return {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["tool", "arguments"],
                    "properties": {
                        "tool": {"type": "string", "pattern": f"^{TOOL_NAME.pattern}$"},
                        "arguments": {"oneOf": [text, {"type": "object"}]},
                        **{
                            name: {"type": "string", "maxLength": limit, "pattern": NO_NUL}
                            for name, limit in TEXT_LIMITS.items()
                        },
                        "usage": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                **{
                                    name: {"type": "integer", "minimum": 0} for name in TOKEN_FIELDS
                                },
                                **{name: {"type": "string"} for name in COST_FIELDS},
                            },
                        },
                    },
                }
            }
        },
    }


def wait_operation() -> dict[str, Any]:
    """The long-poll's entry, with the longest wait this deployment allows."""
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
            "responses": {
                "200": _json(CallStateOut, "The call state"),
                **{str(status): _json(schema, text) for status, (schema, text) in ERRORS.items()},
            },
        }
    }
