"""The agent surface's one error type and its answers (Django's, raw ASGI's, a socket's
close code), and the domain's refusals: one base, no HTTP, answered by kind at a surface."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import approvals.selectors
import approvals.services
from approvals.api.errors import (
    NOT_FOUND,
    RATE_LIMITED,
    REQUEST_FAILED,
    UNAUTHENTICATED,
    ApiError,
    Code,
    api_error_of,
    error_response,
    json_error_bytes,
    send_error,
)
from approvals.errors import (
    ApplicationError,
    Conflict,
    Invalid,
    NotFound,
    NotPermitted,
    Unavailable,
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


def _domain_modules() -> Iterator[ModuleType]:
    for package in (approvals.services, approvals.selectors):
        yield package
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            yield importlib.import_module(info.name)


DOMAIN = list(_domain_modules())
SURFACES = ("approvals.api", "approvals.web", "approvals.realtime.consumers", "django.http")
# An answer's status, as docs write it (``409``) or as Django's names carry it. A webhook's
# own ``status_code``, which notifications record, is not one.
HTTP_MENTION = re.compile(r"``[1-5][0-9][0-9]``|\bHTTPStatus\b|\bHttp[A-Z]\w*")


def _imported(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            yield node.module


@pytest.mark.parametrize("module", DOMAIN, ids=lambda module: module.__name__)
def test_the_domain_imports_no_surface_and_names_no_http_status(module: ModuleType) -> None:
    assert module.__file__ is not None
    source = Path(module.__file__).read_text(encoding="utf-8")
    surfaces = [
        name
        for name in _imported(ast.parse(source))
        if any(name == s or name.startswith(f"{s}.") for s in SURFACES)
    ]
    assert surfaces == []
    assert HTTP_MENTION.findall(source) == []


@pytest.mark.parametrize("module", DOMAIN, ids=lambda module: module.__name__)
def test_every_domain_exception_is_an_application_error_without_a_status(
    module: ModuleType,
) -> None:
    defined = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    ]
    for error in defined:
        assert issubclass(error, ApplicationError), error
        assert not {"status", "status_code", "close_code"} & set(dir(error)), error


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (NotFound(), 404, Code.NOT_FOUND),
        (NotPermitted(), 403, Code.ERROR),
        (Invalid(), 400, Code.BAD_REQUEST),
        (Conflict(), 409, Code.ERROR),
        (Unavailable(), 503, Code.UNAVAILABLE),
    ],
)
def test_the_agent_surface_answers_each_kind(
    error: ApplicationError, status: int, code: Code
) -> None:
    answer = api_error_of(error)
    assert (answer.status, answer.code, answer.message) == (status, code, REQUEST_FAILED)
    assert answer.retry_after == (1 if status == 503 else None)


def test_a_route_may_name_its_own_code_and_words() -> None:
    answer = api_error_of(Conflict("the call is final"), code=Code.ALREADY_FINAL)
    assert (answer.status, answer.code, answer.message) == (
        409,
        Code.ALREADY_FINAL,
        "the call is final",
    )
    worded = api_error_of(Conflict("ours"), message="The API's own.")
    assert worded.message == "The API's own."
