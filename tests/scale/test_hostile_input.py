"""Hostile input to ``POST /api/v1/calls`` (issue 6): oversized, deeply nested, wide, broken
or extreme bodies are each answered with the right 4xx or a refused or held call, in bounded
time and memory, and nothing is stored but the refusal. Then hypothesis fuzzes the body.

Through the real ASGI application (``config.asgi``), so the body limit in front of Django
is part of what is tested; the fuzzing goes through Django's test client, which is faster.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from approvals.models import AuditEntry, Call, LedgerEntry
from approvals.services.rules import cap_rule_save
from config.asgi import application
from tests.asgi import chunked_request, http_scope
from tests.scale.servers import agent_create

CALLS = "/api/v1/calls"
MIB = 1 << 20
# Seconds: only a guard against hangs, not a measure of speed (bench/ measures that). Most
# cases take milliseconds, but tracemalloc, which the memory bound needs, slows every
# allocation several times: the 100,000-member object took 4.5-6 s under it on 2 cores.
TIME_LIMIT = 30.0
MEMORY_LIMIT = 128 * MIB  # peak Python allocations while one request is answered
MILLION_DIGITS = "7" * 1_000_000


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    chunks_read: int
    seconds: float
    peak_bytes: int

    def json(self) -> Any:
        return json.loads(self.body)


async def _post(
    body: bytes, token: str, *, chunk: int | None = None, declare_length: bool = True
) -> Answer:
    """POST the body to the ASGI application in chunks of ``chunk`` bytes (one if None)."""
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {token}".encode()),
    ]
    if declare_length:
        headers.append((b"content-length", str(len(body)).encode()))
    scope = http_scope("POST", CALLS, headers)
    size = chunk or max(len(body), 1)
    pieces = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    tracemalloc.start()
    started = time.monotonic()
    try:
        sent, read = await chunked_request(application, scope, pieces, timeout=30)
        seconds = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    start = next(m for m in sent if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(start["status"], content, read, seconds, peak)


def _assert_error(answer: Answer, status: int, code: str) -> None:
    assert answer.status == status, answer.body[:300]
    assert answer.json() == {"error": {"code": code, "message": answer.json()["error"]["message"]}}
    assert isinstance(answer.json()["error"]["message"], str)


def _body(**fields: object) -> bytes:
    return json.dumps({"tool": "pay", "arguments": "{}", **fields}).encode()


def _members(count: int, *, upper: bool = False) -> bytes:
    """A JSON object of ``count`` distinct members, written compactly (base-36 names)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"

    def name(i: int) -> str:
        text = ""
        while True:
            i, rest = divmod(i, 36)
            text = digits[rest] + text
            if i == 0:
                break
        return text.upper() if upper else text

    return ("{" + ",".join(f'"{name(i)}":0' for i in range(count)) + "}").encode()


def _counts() -> tuple[int, int, int]:
    return Call.objects.count(), LedgerEntry.objects.count(), AuditEntry.objects.count()


@pytest.fixture
def token(transactional_db: None) -> str:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    cap_rule_save(line="total: pay arg=amount sum USD 100000.00 -> gate")
    return agent_create("hostile")[1]


# --- the body itself is refused: a 4xx, and no call --------------------------------------

DEEP_ARRAYS = b'{"tool": "pay", "arguments": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
DEEP_OBJECTS = b'{"tool": "pay", "arguments": ' + b'{"a":' * 10_000 + b"0" + b"}" * 10_001
WIDE_BODY = _members(100_000)
WIDE_DUPLICATE = _members(100_000)[:-1] + b',"0":1}'
WIDE_CASE_VARIANT = (
    b'{"tool": "pay", "arguments": ' + _members(99_999, upper=True)[:-1] + b',"a":1}}'
)
REFUSED_BODIES = {
    "10,000-deep arrays": (DEEP_ARRAYS, 400, "bad_request"),
    "10,000-deep objects": (DEEP_OBJECTS, 400, "bad_request"),
    "100,000-member body": (WIDE_BODY, 400, "bad_request"),
    "100,000 members, one duplicate": (WIDE_DUPLICATE, 400, "bad_request"),
    "100,000 members, one case variant": (WIDE_CASE_VARIANT, 400, "bad_request"),
    "invalid UTF-8": (b'{"tool": "pay", "arguments": "\xff\xfe"}', 400, "bad_request"),
    "overlong UTF-8": (b'{"tool": "pay", "arguments": "\xc0\xaf"}', 400, "bad_request"),
    "truncated UTF-8": (b'{"tool": "pay", "arguments": "\xe2\x82"}', 400, "bad_request"),
    "raw lone surrogate": (b'{"tool": "pay", "arguments": "\xed\xa0\x80"}', 400, "bad_request"),
    "escaped lone surrogate in arguments": (
        b'{"tool": "pay", "arguments": "\\ud800"}',
        400,
        "bad_request",
    ),
    "escaped lone low surrogate in context": (
        _body(context="\udc00"),
        400,
        "bad_request",
    ),
    "escaped lone surrogate as a member name": (
        b'{"tool": "pay", "arguments": {"\\udfff": 1}}',
        400,
        "bad_request",
    ),
    "NaN": (b'{"tool": "pay", "arguments": {"amount": NaN}}', 400, "bad_request"),
    "Infinity": (b'{"tool": "pay", "arguments": {"amount": Infinity}}', 400, "bad_request"),
    "-Infinity": (b'{"tool": "pay", "arguments": {"amount": -Infinity}}', 400, "bad_request"),
    "a 1,000,000-digit body": (MILLION_DIGITS.encode(), 400, "bad_request"),
    "a 1,000,000-digit token count": (
        b'{"tool": "pay", "arguments": "{}", "usage": {"input_tokens": '
        + MILLION_DIGITS.encode()
        + b"}}",
        400,
        "bad_request",
    ),
    "a 1,000,000-digit cost": (
        _body(usage={"cost": MILLION_DIGITS, "cost_currency": "USD"}),
        400,
        "bad_request",
    ),
    "a 1,000,000-digit tool name": (_body(tool=MILLION_DIGITS), 400, "bad_request"),
    "1e999999 as the tool": (b'{"tool": 1e999999, "arguments": "{}"}', 400, "bad_request"),
    "a byte-order mark": ("\ufeff".encode() + _body(), 400, "bad_request"),
    "trailing data": (_body() + b" {}", 400, "bad_request"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.parametrize("case", list(REFUSED_BODIES))
async def test_a_hostile_body_is_a_4xx_in_bounded_time_and_stores_nothing(
    token: str, case: str
) -> None:
    body, status, code = REFUSED_BODIES[case]
    assert len(body) <= MIB, "the case must be within the body limit to reach the parser"
    before = await database_sync_to_async(_counts)()
    answer = await _post(body, token)
    _assert_error(answer, status, code)
    assert answer.seconds < TIME_LIMIT
    assert answer.peak_bytes < MEMORY_LIMIT
    assert await database_sync_to_async(_counts)() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.parametrize("declare_length", [True, False])
async def test_a_10_mib_body_is_413_before_it_is_buffered(token: str, declare_length: bool) -> None:
    body = b'{"tool": "pay", "arguments": "' + b"x" * (10 * MIB) + b'"}'
    before = await database_sync_to_async(_counts)()
    answer = await _post(body, token, chunk=64 * 1024, declare_length=declare_length)
    _assert_error(answer, 413, "body_too_large")
    assert answer.seconds < TIME_LIMIT
    # Declared: refused from the header alone. Chunked: at the chunk that passed 1 MiB.
    assert answer.chunks_read == (0 if declare_length else MIB // (64 * 1024) + 1)
    assert answer.peak_bytes < 4 * MIB
    assert await database_sync_to_async(_counts)() == before


# --- the body is fine, the arguments are not: a refused (or held) call, stored alone ------


def _arguments_body(arguments_text: str) -> bytes:
    return json.dumps({"tool": "pay", "arguments": arguments_text}).encode()


REFUSED_ARGUMENTS = {
    "10,000-deep arguments text": "[" * 10_000 + "]" * 10_000,
    "NaN in the arguments text": '{"amount": NaN}',
    "Infinity in the arguments text": '{"amount": Infinity}',
    "an escaped lone surrogate in the arguments text": '{"memo": "\\ud83d"}',
    "a duplicate member in the arguments text": '{"amount": "1", "amount": "600"}',
    "100,000 members and a case variant in the arguments text": (
        _members(99_999, upper=True)[:-1] + b',"a":1}'
    ).decode(),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.parametrize("case", list(REFUSED_ARGUMENTS))
async def test_hostile_arguments_text_is_one_refused_call(
    token: str, case: str, settings: Any
) -> None:
    # Escaped inside a string, 100,000 members take more than the default 1 MiB.
    settings.COUNTERSIGN_MAX_BODY = 4 * MIB
    before = await database_sync_to_async(_counts)()
    answer = await _post(_arguments_body(REFUSED_ARGUMENTS[case]), token)
    assert answer.status == 201, answer.body[:300]
    state = answer.json()
    assert state["status"] == "refused"
    assert [reason["policy"] for reason in state["reasons"]] == ["arguments"]
    assert answer.seconds < TIME_LIMIT
    assert answer.peak_bytes < MEMORY_LIMIT
    assert await database_sync_to_async(_counts)() == (before[0] + 1, before[1], before[2] + 1)


MILLION_DIGIT_AMOUNTS = {
    "a 1,000,000-digit number literal in the arguments text": _arguments_body(
        '{"amount": ' + MILLION_DIGITS + "}"
    ),
    "a 1,000,000-digit string in the arguments text": _arguments_body(
        '{"amount": "' + MILLION_DIGITS + '"}'
    ),
    "a 1,000,000-digit fraction in the arguments text": _arguments_body(
        '{"amount": "0.' + MILLION_DIGITS + '"}'
    ),
    "a 1,000,000-digit number literal in an arguments object": (
        b'{"tool": "pay", "arguments": {"amount": ' + MILLION_DIGITS.encode() + b"}}"
    ),
    "1e999999 in the arguments text": _arguments_body('{"amount": 1e999999}'),
    "-1e-999999 in an arguments object": b'{"tool": "pay", "arguments": {"amount": -1e-999999}}',
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.parametrize("case", list(MILLION_DIGIT_AMOUNTS))
async def test_an_amount_no_cap_can_read_holds_the_call_and_records_nothing(
    token: str, case: str
) -> None:
    body = MILLION_DIGIT_AMOUNTS[case]
    assert len(body) <= MIB
    before = await database_sync_to_async(_counts)()
    answer = await _post(body, token)
    assert answer.status == 201, answer.body[:300]
    state = answer.json()
    assert state["status"] == "pending"  # both caps say "-> gate": not assessable is held
    assert {reason["rule"] for reason in state["reasons"]} == {"big", "total"}
    for reason in state["reasons"]:
        assert "not assessable" in reason["message"]
        assert "777777" not in reason["message"]  # the amount is never echoed
    assert len(answer.body) < 5000
    assert answer.seconds < TIME_LIMIT
    assert answer.peak_bytes < MEMORY_LIMIT
    assert await database_sync_to_async(_counts)() == (before[0] + 1, before[1], before[2] + 1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_100000_member_arguments_object_is_stored_exactly_once(token: str) -> None:
    """Wide but valid: accepted (nothing in it is wrong), in bounded time and memory."""
    arguments = _members(100_000)
    body = b'{"tool": "pay", "arguments": ' + arguments + b"}"
    answer = await _post(body, token)
    assert answer.status == 201, answer.body[:300]
    assert answer.json()["status"] == "pending"  # no amount for the caps: not assessable
    assert answer.seconds < TIME_LIMIT
    assert answer.peak_bytes < MEMORY_LIMIT
    stored = await database_sync_to_async(Call.objects.get)()
    assert stored.arguments.encode() == arguments


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["run_id=%00", "run_id=a%00b"])
def test_a_nul_in_a_list_filter_is_not_a_server_error(query: str) -> None:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agent_create('lister')[1]}")
    response = client.get(f"{CALLS}?{query}")
    assert response.status_code in (200, 400), response.status_code
    if response.status_code == 200:
        assert response.json() == {"items": [], "count": 0}
    else:
        assert response.json()["error"]["code"] == "bad_request"


# --- hypothesis: whatever the body, never a 5xx and always the error shape ----------------

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    # Lone surrogates, controls (U+0000 too) and case variants of names.
    | st.text(st.characters(categories=["Cs", "Cc", "Lu", "Ll"]), max_size=5)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)
FIELD_NAMES = st.sampled_from(
    ["tool", "arguments", "principal", "run_id", "usage", "context", "Tool", "extra"]
)
TOOLS = st.sampled_from(["pay", "read_file", "", "a" * 129, "pay now", "x/y:z"]) | st.text(
    max_size=20
)
ARGUMENTS = (
    JSON_VALUES.map(lambda value: json.dumps(value, ensure_ascii=False))
    | st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=5)
    | st.sampled_from(['{"amount": "600.00"}', '{"amount": 12.5}', '{"amount": NaN}', ""])
    | JSON_VALUES
)
USAGE = st.dictionaries(
    st.sampled_from(["input_tokens", "output_tokens", "cost", "cost_currency", "other"]),
    JSON_VALUES | st.sampled_from(["0.0042", "USD", "XXX", 10**20, -1]),
    max_size=4,
)
SUBMISSIONS = st.fixed_dictionaries(
    {},
    optional={
        "tool": TOOLS | JSON_VALUES,
        "arguments": ARGUMENTS,
        "principal": st.text(max_size=20) | JSON_VALUES,
        "run_id": st.text(max_size=20) | JSON_VALUES,
        "usage": USAGE | JSON_VALUES,
        "context": st.text(max_size=50) | JSON_VALUES,
    },
) | st.dictionaries(FIELD_NAMES, JSON_VALUES, max_size=7)
AMOUNTS = (
    st.decimals(allow_nan=False, allow_infinity=False, places=2).map(str)
    | st.sampled_from(["600.00", "12.50", "1e3", "-5", "0.001", "", "12,50"])
    | st.integers()
)
VALID_SUBMISSIONS = st.fixed_dictionaries(
    {
        "tool": st.sampled_from(["pay", "read_file", "Pay", "delete_everything"]),
        "arguments": st.one_of(
            st.fixed_dictionaries({"amount": AMOUNTS}, optional={"memo": st.text(max_size=20)}),
            st.fixed_dictionaries({"amount": AMOUNTS}).map(json.dumps),
            st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=4).map(json.dumps),
        ),
    },
    optional={
        "principal": st.sampled_from(["carol", "mallory"]),
        "run_id": st.text(max_size=20),
        "context": st.text(max_size=50),
        "usage": st.fixed_dictionaries(
            {},
            optional={
                "input_tokens": st.integers(min_value=-1, max_value=2**64),
                "output_tokens": st.integers(min_value=0, max_value=10**6),
                "cost": st.sampled_from(["0.0042", "1", "0.0000000001", "-1", "x"]),
                "cost_currency": st.sampled_from(["USD", "EUR", "usd", "XXX"]),
            },
        ),
    },
)
FUZZ = settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples every run: fuzzing finds, CI repeats
)
STATE_KEYS = {"id", "status", "tool", "principal", "run_id", "arguments_sha256", "reasons"}


def _check(client: Client, body: bytes) -> None:
    started = time.monotonic()
    response = client.post(CALLS, body, content_type="application/json")
    assert time.monotonic() - started < TIME_LIMIT
    assert response.status_code < 500, (response.status_code, body[:300])
    assert response["Content-Type"] == "application/json", response.status_code
    answer = response.json()
    event(f"HTTP {response.status_code}")
    if response.status_code >= 400:
        assert response.status_code in (400, 403, 409), (response.status_code, body[:300])
        assert set(answer) == {"error"}
        assert set(answer["error"]) == {"code", "message"}
        assert all(type(value) is str for value in answer["error"].values())
    else:
        assert response.status_code == 201
        assert set(answer) >= STATE_KEYS


@pytest.fixture
def fuzz_client(db: None) -> Client:
    """Made once per test: the database rolls back after each test, not after each example."""
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    return Client(HTTP_AUTHORIZATION=f"Bearer {agent_create('fuzzer')[1]}")


@FUZZ
@given(body=st.binary(max_size=2000))
def test_fuzzed_bytes_are_never_a_server_error(fuzz_client: Client, body: bytes) -> None:
    _check(fuzz_client, body)


@FUZZ
@given(value=JSON_VALUES | SUBMISSIONS | VALID_SUBMISSIONS)
def test_fuzzed_json_bodies_are_never_a_server_error(fuzz_client: Client, value: object) -> None:
    _check(fuzz_client, json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    _check(fuzz_client, json.dumps(value).encode())  # the same, non-ASCII as \u escapes


@FUZZ
@given(value=VALID_SUBMISSIONS, data=st.data())
def test_valid_bodies_with_bytes_changed_are_never_a_server_error(
    fuzz_client: Client, value: object, data: st.DataObject
) -> None:
    body = json.dumps(value, ensure_ascii=False).encode()
    start = data.draw(st.integers(0, len(body)), label="start")
    end = data.draw(st.integers(start, min(len(body), start + 8)), label="end")
    _check(fuzz_client, body[:start] + data.draw(st.binary(max_size=8), label="bytes") + body[end:])
