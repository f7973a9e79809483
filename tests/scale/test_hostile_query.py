"""Hostile query strings against a real server running with ``DEBUG=1`` (issue 13, item 7):
``/history/?until=9999-12-31`` was a ``500`` with Django's traceback page. Now each malformed
or out-of-range parameter of a page, of the agent API and of the long-poll is a ``400`` naming
the parameter and not the value, and nothing is ever a ``5xx`` or a traceback — including
bytes that are not UTF-8 at all, which no test client can send.

The property tests over every route are in ``tests/approvals/test_query_params.py``; these
check the same on the wire, through the ASGI server's own decoding of the request line.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.api.errors import BAD_QUERY, QUERY_RANGE, QUERY_REPEATED, QUERY_TOO_MANY
from approvals.models import Call
from approvals.web.forms import HISTORY_EXPECTED
from approvals.web.querystring import QUERY_NUL, bad_parameter
from tests.factories import call_make, payment, rule_make
from tests.live import Approver, LiveServer, start_server
from tests.scale.servers import APPROVER, NO_RATE_LIMIT, PASSWORD, agent_create, bearer

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 10.0  # seconds for any one answer: a guard against hangs, not a measure
# What Django's technical pages carry and the site's never does.
TRACEBACK_MARKS = ("Traceback", "technical_500", "DJANGO_SETTINGS_MODULE", "Request Method:")


@pytest.fixture(scope="module")
def debug_server(django_db_setup: None) -> Iterator[LiveServer]:
    """One server for the module: it only reads, and each test's rows are committed (and
    flushed after it) in the database the server reads."""
    server = start_server(extra_env={**NO_RATE_LIMIT, "DEBUG": "1"})
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def person(debug_server: LiveServer, approver: User) -> Iterator[httpx.Client]:
    login = Approver(debug_server, APPROVER, PASSWORD)
    try:
        yield login.http
    finally:
        login.close()


def assert_no_traceback(text: str) -> None:
    for mark in TRACEBACK_MARKS:
        assert mark not in text


def test_history_until_9999_12_31_is_a_400_naming_until_without_a_traceback(
    person: httpx.Client,
) -> None:
    response = person.get("/history/?until=9999-12-31", timeout=TIMEOUT)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/html")
    assert bad_parameter("until", HISTORY_EXPECTED["until"]) in response.text
    assert "9999-12-31" not in response.text
    assert_no_traceback(response.text)


@pytest.mark.parametrize(
    ("query", "sentence"),
    [
        ("since=0000-01-01", bad_parameter("since", HISTORY_EXPECTED["since"])),
        (f"agent={10**30}", bad_parameter("agent", HISTORY_EXPECTED["agent"])),
        ("tool=%00", bad_parameter("tool", HISTORY_EXPECTED["tool"])),
        ("principal=%ff%fe", None),  # not UTF-8: read as U+FFFD, a principal like any other
        (f"page={10**30}", bad_parameter("page", QUERY_RANGE.format(low=1, high=1))),
        ("status=a&status=b", QUERY_REPEATED.format(name="status")),
        ("&".join(f"p{i}=" for i in range(1001)), QUERY_TOO_MANY.format(most=1000)),
    ],
)
def test_a_hostile_history_query_is_a_400_naming_the_parameter(
    person: httpx.Client, query: str, sentence: str | None
) -> None:
    response = person.get(f"/history/?{query}", timeout=TIMEOUT)
    assert response.status_code == (200 if sentence is None else 400)
    if sentence is not None:
        assert sentence in response.text
    assert_no_traceback(response.text)


def test_the_login_refuses_a_nul_in_next(debug_server: LiveServer) -> None:
    response = httpx.get(f"{debug_server.url}/accounts/login/?next=/%00", timeout=TIMEOUT)
    assert response.status_code == 400
    assert "The query parameter next is malformed" in response.text
    assert_no_traceback(response.text)
    nul = httpx.get(f"{debug_server.url}/accounts/login/?x%00=1", timeout=TIMEOUT)
    assert (nul.status_code, QUERY_NUL in nul.text) == (400, True)


def test_the_agent_api_and_the_long_poll_name_the_parameter(debug_server: LiveServer) -> None:
    _, token = agent_create("hostile-query")
    api = httpx.Client(base_url=debug_server.url, headers=bearer(token), timeout=TIMEOUT)
    with api:
        submitted = api.post("/api/v1/calls", json={"tool": "read", "arguments": {}})
        assert submitted.status_code == 201
        call_id = submitted.json()["id"]
        longest = QUERY_RANGE.format(low=0, high=django_settings.COUNTERSIGN_MAX_WAIT)
        cases = [
            (f"/api/v1/calls?limit={10**30}", BAD_QUERY.format(name="limit", expected="1 to 100")),
            ("/api/v1/calls?offset=1&offset=2", QUERY_REPEATED.format(name="offset")),
            (
                "/api/v1/calls?" + "&".join(f"p{i}=" for i in range(1001)),
                QUERY_TOO_MANY.format(most=1000),
            ),
            (
                f"/api/v1/calls/{call_id}/wait?timeout={10**30}",
                BAD_QUERY.format(name="timeout", expected=longest),
            ),
            (
                f"/api/v1/calls/{call_id}/wait?timeout=&timeout=1",
                QUERY_REPEATED.format(name="timeout"),
            ),
        ]
        for url, message in cases:
            response = api.get(url)
            assert response.status_code == 400, url
            assert response.json() == {"error": {"code": "bad_request", "message": message}}


def _raw_get(server: LiveServer, target: bytes, headers: bytes = b"") -> tuple[int, bytes]:
    """A GET whose request line holds ``target`` exactly, bytes no client library sends."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as raw:
        raw.sendall(
            b"GET "
            + target
            + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            + headers
            + b"\r\n"
        )
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0]
    return int(status_line.split()[1]), answer


def test_bytes_that_are_not_utf8_are_a_4xx_never_a_server_error(
    debug_server: LiveServer,
) -> None:
    _, token = agent_create("raw-bytes")
    authorization = f"Authorization: Bearer {token}\r\n".encode()
    for target in [b"/history/?until=\xff\xfe", b"/accounts/login/?next=\xc3"]:
        status, answer = _raw_get(debug_server, target)
        assert 400 <= status < 500, target
        assert_no_traceback(answer.decode("latin-1"))
    for target in [b"/api/v1/calls?status=\xff", b"/api/v1/calls/x/wait?timeout=\xff"]:
        status, answer = _raw_get(debug_server, target, authorization)
        assert 400 <= status < 500, target
        assert_no_traceback(answer.decode("latin-1"))


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pairs=st.lists(
        st.tuples(
            st.sampled_from([*HISTORY_EXPECTED, "page", "x"]),
            st.one_of(st.text(max_size=20), st.binary(max_size=12)),
        ),
        max_size=4,
    )
)
def test_fuzzed_history_queries_on_the_wire_are_200_or_400(
    person: httpx.Client, pairs: list[tuple[str, str | bytes]]
) -> None:
    query = "&".join(f"{name}={quote(value, safe='')}" for name, value in pairs)
    response = person.get(f"/history/?{query}", timeout=TIMEOUT)
    assert response.status_code in {200, 400}
    assert_no_traceback(response.text)


def test_the_held_call_page_ignores_any_query(person: httpx.Client) -> None:
    agent, _ = agent_create("page-query")
    rule_make(line="big: pay arg=amount max USD 100.00 -> gate")
    held = call_make(agent=agent, arguments=payment("500.00"))
    assert held.status == Call.Status.PENDING
    response = person.get(f"/calls/{held.pk}/?page={10**30}&until=9999-12-31", timeout=TIMEOUT)
    assert response.status_code == 200
