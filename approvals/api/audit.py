"""The audit log for a SIEM and for monitors (docs/receipts.md, "The audit chain"), under
``/api/v1/audit``: the entries a page at a time, and the chain's head signed with the receipts
key.

Both answer only ``Authorization: Bearer <COUNTERSIGN_AUDIT_TOKEN>``: without the setting
they are a ``404`` like any unknown path; with it, a missing or wrong token is a ``401``. An
agent's token is never an audit token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router, Schema
from ninja.security.http import HttpAuthBase

from approvals.api.auth import bearer_token, request_authorization
from approvals.api.errors import (
    NO_SUCH_ENDPOINT,
    QUERY_RANGE,
    ApiError,
    Code,
    query_refusal,
    query_repeated,
)
from approvals.api.openapi import ErrorOut, documented
from approvals.querydict import ParameterRepeated, query_value
from approvals.receipts.keys import AUDIT_HEAD_TYPE, sign_jws
from approvals.selectors.audit import AUDIT_PAGE_MOST, audit_head, audit_page

AUDIT_UNAUTHENTICATED = "The audit log answers its bearer token (COUNTERSIGN_AUDIT_TOKEN)."
DEFAULT_LIMIT = 100
MOST_AFTER = 2**63 - 1  # the largest seq the column holds
NO_STORE = "no-store"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class AuditBearer(HttpAuthBase):
    """The audit token, compared in constant time (digests of equal length, so not even the
    token's length shows)."""

    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest) -> bool:
        expected = settings.COUNTERSIGN_AUDIT_TOKEN
        if not expected:
            raise ApiError(404, Code.NOT_FOUND, NO_SUCH_ENDPOINT)
        presented = bearer_token(request_authorization(request))
        if presented is None or not hmac.compare_digest(_digest(presented), _digest(expected)):
            raise ApiError(401, Code.UNAUTHENTICATED, AUDIT_UNAUTHENTICATED)
        return True


router = Router(auth=AuditBearer(), tags=["audit"])


class AuditEntryOut(Schema):
    """One entry as exported and hashed (docs/receipts.md)."""

    seq: int
    at: str
    actor: dict[str, Any]
    action: str
    call: str | None
    details: dict[str, str]
    prev_hash: str
    hash: str


class AuditPageOut(Schema):
    items: list[AuditEntryOut]
    next_after: int


class AuditHeadOut(Schema):
    head: str


AUDIT_AUTH_ERRORS = {
    401: (ErrorOut, "No valid audit token"),
    404: (ErrorOut, "The audit API is off (no COUNTERSIGN_AUDIT_TOKEN)"),
}


def _bounded(request: HttpRequest, name: str, default: int, low: int, high: int) -> int:
    """A whole number in ``low``–``high``; a ``400`` naming the parameter otherwise."""
    try:
        raw = query_value(request.GET, name)
    except ParameterRepeated:
        raise query_repeated(name=name) from None
    if raw is None:
        return default
    if re.fullmatch(r"[0-9]{1,19}", raw, re.ASCII) is None or not low <= int(raw) <= high:
        raise query_refusal(name=name, expected=QUERY_RANGE.format(low=low, high=high))
    return int(raw)


def _query(name: str, low: int, high: int) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": low, "maximum": high}
    return {"name": name, "in": "query", "schema": schema}


@router.get(
    "",
    summary="Audit entries after a seq, oldest first",
    **documented(
        {
            200: (AuditPageOut, "A page of entries"),
            400: (ErrorOut, "after or limit malformed or out of range"),
            **AUDIT_AUTH_ERRORS,
        },
        parameters=[_query("after", 0, MOST_AFTER), _query("limit", 1, AUDIT_PAGE_MOST)],
    ),
)
def audit_list(request: HttpRequest) -> HttpResponse:
    after = _bounded(request, "after", 0, 0, MOST_AFTER)
    limit = _bounded(request, "limit", DEFAULT_LIMIT, 1, AUDIT_PAGE_MOST)
    items = audit_page(after=after, limit=limit)
    next_after = items[-1]["seq"] if items else after
    response = JsonResponse({"items": items, "next_after": next_after})
    response["Cache-Control"] = NO_STORE
    return response


@router.get(
    "/head",
    summary="The audit chain's head, signed",
    **documented(
        {200: (AuditHeadOut, "The latest entry's seq and hash, signed"), **AUDIT_AUTH_ERRORS}
    ),
)
def audit_head_signed(request: HttpRequest) -> HttpResponse:
    seq, hash_ = audit_head()
    claims = {"iss": settings.COUNTERSIGN_PUBLIC_URL, "seq": seq, "hash": hash_}
    head = sign_jws({**claims, "iat": int(time.time())}, typ=AUDIT_HEAD_TYPE)
    response = JsonResponse({"head": head})
    response["Cache-Control"] = NO_STORE
    return response
