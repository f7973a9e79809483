"""The one error type and its answers: Django's, raw ASGI's, and a socket's close code."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from approvals.api.errors import (
    NOT_FOUND,
    RATE_LIMITED,
    UNAUTHENTICATED,
    ApiError,
    Code,
    error_response,
    json_error_bytes,
    send_error,
)


def test_the_body_is_the_error_shape() -> None:
    body = json_error_bytes(Code.NOT_FOUND, NOT_FOUND)
    assert json.loads(body) == {"error": {"code": "not_found", "message": NOT_FOUND}}


@pytest.mark.parametrize(
    ("error", "headers"),
    [
        (ApiError(401, Code.UNAUTHENTICATED, UNAUTHENTICATED), {"WWW-Authenticate": "Bearer"}),
        (ApiError(429, Code.RATE_LIMITED, RATE_LIMITED, retry_after=7), {"Retry-After": "7"}),
        (ApiError(404, Code.NOT_FOUND, NOT_FOUND), {}),
    ],
)
def test_django_and_raw_asgi_answer_alike(error: ApiError, headers: dict[str, str]) -> None:
    assert error.headers == headers
    response = error_response(error)
    assert response.status_code == error.status
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == json.loads(json_error_bytes(error.code, error.message))
    for name, value in headers.items():
        assert response[name] == value


@pytest.mark.asyncio
async def test_the_raw_asgi_answer() -> None:
    sent: list[Mapping[str, Any]] = []

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    await send_error(send, ApiError(401, Code.UNAUTHENTICATED, UNAUTHENTICATED))
    start, body = sent
    expected = json_error_bytes(Code.UNAUTHENTICATED, UNAUTHENTICATED)
    assert start["status"] == 401
    # The length stated: an HTTP/1.0 client cannot read a chunked answer.
    assert start["headers"] == [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(expected)).encode()),
        (b"www-authenticate", b"Bearer"),
    ]
    assert body["body"] == expected


@pytest.mark.parametrize(("status", "close_code"), [(400, 4400), (401, 4401), (403, 4403)])
def test_a_socket_closes_with_4000_plus_the_status(status: int, close_code: int) -> None:
    assert ApiError(status, Code.ERROR, "x").close_code == close_code
