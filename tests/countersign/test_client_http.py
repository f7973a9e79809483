"""The clients' HTTP side against a simulated service: retries keep their Idempotency-Key,
errors are not retried, ``gated`` never runs the function without a go, the URL and token from
the environment, and what a deadline ends in (the cancel, and a decision made meanwhile); then
against the service's own code in this process: ``Decimal`` amounts and ``gated``'s context as
stored."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import Client as DjangoClient

from approvals.models import Call
from countersign import (
    AsyncClient,
    Client,
    Denied,
    NotApproved,
    ServiceUnavailable,
    TimedOut,
    Unauthorized,
    errors,
    protocol,
)
from tests.countersign.world import TOKEN as WORLD_TOKEN
from tests.countersign.world import world_create
from tests.live import free_port

URL = "http://countersign.test"
TOKEN = "cs_unit-token"
STATE: dict[str, Any] = {"id": "5f0c2d1e-0000-4000-8000-000000000000", "status": "allowed"}

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "BACKOFF_BASE", 0.001)


def recording(*answers: httpx.Response | Exception) -> tuple[list[httpx.Request], Handler]:
    """A service that gives these answers in turn (an exception is a network failure)."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers[min(len(seen), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return seen, handle


def sync_client(handler: Handler) -> Client:
    return Client(URL, TOKEN, http=httpx.Client(transport=httpx.MockTransport(handler)))


def test_a_submit_retried_after_a_503_carries_the_same_key_and_body() -> None:
    seen, handler = recording(httpx.Response(503), httpx.Response(201, json=STATE))
    assert sync_client(handler).submit("pay", {"amount": "1.00"}) == STATE
    assert len(seen) == 2
    first, retry = seen
    assert first.headers["Idempotency-Key"] == retry.headers["Idempotency-Key"]
    assert first.content == retry.content
    assert first.headers["Authorization"] == f"Bearer {TOKEN}"
    assert json.loads(first.content)["arguments"] == '{"amount": "1.00"}'


def test_a_network_error_is_retried_with_the_same_key() -> None:
    seen, handler = recording(httpx.ConnectError("refused"), httpx.Response(200, json=STATE))
    sync_client(handler).submit("pay", "{}", idempotency_key="run-7-step-3")
    assert [r.headers["Idempotency-Key"] for r in seen] == ["run-7-step-3"] * 2


def test_each_submit_has_its_own_key() -> None:
    seen, handler = recording(httpx.Response(201, json=STATE))
    client = sync_client(handler)
    client.submit("pay", "{}")
    client.submit("pay", "{}")
    assert seen[0].headers["Idempotency-Key"] != seen[1].headers["Idempotency-Key"]


def test_retries_run_out_into_service_unavailable() -> None:
    seen, handler = recording(httpx.Response(502))
    with pytest.raises(ServiceUnavailable, match="HTTP 502"):
        sync_client(handler).submit("pay", "{}")
    assert len(seen) == protocol.ATTEMPTS


def test_an_error_answer_is_not_retried() -> None:
    seen, handler = recording(
        httpx.Response(401, json={"error": {"code": "unauthenticated", "message": "No."}})
    )
    with pytest.raises(Unauthorized) as raised:
        sync_client(handler).submit("pay", "{}")
    assert raised.value.code == "unauthenticated"
    assert len(seen) == 1


def test_a_cancel_is_sent_once() -> None:
    seen, handler = recording(httpx.Response(503))
    with pytest.raises(ServiceUnavailable):
        sync_client(handler).cancel(STATE)
    assert [(r.method, r.url.path) for r in seen] == [
        ("POST", f"/api/v1/calls/{STATE['id']}/cancel")
    ]


def test_gated_submits_the_functions_arguments_and_runs_it_when_allowed() -> None:
    seen, handler = recording(httpx.Response(201, json=STATE))
    client = sync_client(handler)

    @client.gated("pay", run_id="run-7")
    def pay(amount: str, currency: str = "USD") -> str:
        return f"paid {amount} {currency}"

    assert pay("12.50") == "paid 12.50 USD"
    body = json.loads(seen[0].content)
    assert body == {
        "tool": "pay",
        "arguments": '{"amount": "12.50", "currency": "USD"}',
        "run_id": "run-7",
    }


def test_gated_does_not_run_the_function_on_a_refusal() -> None:
    refusal = {**STATE, "status": "refused", "reasons": [{"message": "over the limit"}]}
    _, handler = recording(httpx.Response(201, json=refusal))
    ran: list[str] = []

    @sync_client(handler).gated("pay")
    def pay(amount: str) -> None:
        ran.append(amount)

    with pytest.raises(Denied) as raised:
        pay("9000")
    assert (raised.value.status, raised.value.comment) == ("refused", "over the limit")
    assert ran == []


def test_gated_does_not_run_the_function_when_the_service_is_unreachable() -> None:
    client = Client(f"http://127.0.0.1:{free_port()}", TOKEN, timeout=2)
    ran: list[str] = []

    @client.gated("pay")
    def pay(amount: str) -> None:
        ran.append(amount)

    with pytest.raises(ServiceUnavailable, match="ConnectError"):
        pay("1.00")
    assert ran == []
    client.close()


@pytest.mark.asyncio
async def test_the_async_client_retries_with_the_same_key_too() -> None:
    seen, handler = recording(httpx.ReadTimeout("slow"), httpx.Response(201, json=STATE))
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with AsyncClient(URL, TOKEN, http=http) as client:
        assert await client.submit("pay", {"amount": "1.00"}) == STATE
    await http.aclose()
    assert seen[0].headers["Idempotency-Key"] == seen[1].headers["Idempotency-Key"]


@pytest.mark.asyncio
async def test_async_gated_does_not_run_the_function_when_the_service_is_unreachable() -> None:
    ran: list[str] = []
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", TOKEN, timeout=2) as client:

        @client.gated("pay")
        async def pay(amount: str) -> None:
            ran.append(amount)

        with pytest.raises(ServiceUnavailable):
            await pay("1.00")
    assert ran == []


# --- the URL and the token from the environment ----------------------------------------------


def test_the_url_and_the_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(protocol.URL_VARIABLE, "http://from-env.test/")
    monkeypatch.setenv(protocol.TOKEN_VARIABLE, "cs_from-env")
    seen, handler = recording(httpx.Response(201, json=STATE))
    with Client(http=httpx.Client(transport=httpx.MockTransport(handler))) as client:
        client.submit("pay", "{}")
    assert (str(seen[0].url), seen[0].headers["Authorization"]) == (
        "http://from-env.test/api/v1/calls",
        "Bearer cs_from-env",
    )
    assert AsyncClient().base_url == "http://from-env.test"
    assert Client("http://argument.test", TOKEN).base_url == "http://argument.test"  # arguments win


@pytest.mark.parametrize("missing", [protocol.URL_VARIABLE, protocol.TOKEN_VARIABLE])
def test_a_missing_url_or_token_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    monkeypatch.setenv(protocol.URL_VARIABLE, URL)
    monkeypatch.setenv(protocol.TOKEN_VARIABLE, TOKEN)
    monkeypatch.setenv(missing, "")  # set but empty is not set
    for make in (Client, AsyncClient):
        with pytest.raises(ValueError, match=missing) as raised:
            make()
        assert "=..." in str(raised.value)  # and the argument that would do instead


# --- a deadline: the call is cancelled, unless it was decided meanwhile ------------------------

PENDING: dict[str, Any] = {**STATE, "status": "pending"}
DEADLINE = 0.3


def deadline_service(
    cancel: tuple[int, dict[str, Any]] | Exception, *, then: dict[str, Any] | None = None
) -> tuple[list[str], Handler]:
    """A service that holds every call: the long-poll answers pending, the cancel answers
    ``cancel`` (status and body), and a read of the call answers ``then``. What was asked, as
    "METHOD /path"."""
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        asked.append(f"{request.method} {path}")
        if path == protocol.CALLS_PATH:
            return httpx.Response(201, json=PENDING)
        if path.endswith("/wait"):
            return httpx.Response(200, json=PENDING)
        if path.endswith("/cancel"):
            if isinstance(cancel, Exception):
                raise cancel
            return httpx.Response(cancel[0], json=cancel[1])
        return httpx.Response(200, json=then)

    return asked, handle


@pytest.fixture
def no_websocket(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's sockets go where nothing listens: it long-polls the simulated service."""
    nowhere = f"ws://127.0.0.1:{free_port()}"
    monkeypatch.setattr(
        protocol, "socket_url", lambda _, call: f"{nowhere}/ws/v1/calls/{protocol.call_id(call)}"
    )


CANCEL = f"POST {protocol.CALLS_PATH}/{STATE['id']}/cancel"
CANCELLED = (200, {**STATE, "status": "cancelled"})
ALREADY_FINAL = (409, {"error": {"code": "already_final", "message": "Final."}})


@pytest.mark.usefixtures("no_websocket")
def test_a_gated_call_past_its_deadline_is_cancelled_and_does_not_run() -> None:
    asked, handler = deadline_service(CANCELLED)
    ran: list[str] = []

    @sync_client(handler).gated("pay", deadline=DEADLINE)
    def pay(amount: str) -> None:
        ran.append(amount)

    with pytest.raises(TimedOut) as raised:
        pay("600.00")
    assert isinstance(raised.value, NotApproved)
    assert (raised.value.call_id, raised.value.cancelled) == (STATE["id"], True)
    assert str(raised.value) == errors.DEADLINE_CANCELLED.format(seconds=DEADLINE)
    assert asked[-1] == CANCEL
    assert ran == []


@pytest.mark.usefixtures("no_websocket")
def test_a_call_approved_as_it_was_being_cancelled_runs() -> None:
    _, handler = deadline_service(ALREADY_FINAL, then={**STATE, "status": "approved"})

    @sync_client(handler).gated("pay", deadline=DEADLINE)
    def pay(amount: str) -> str:
        return f"paid {amount}"

    assert pay("600.00") == "paid 600.00"  # its ledgers were charged: it may run


@pytest.mark.usefixtures("no_websocket")
def test_a_call_denied_as_it_was_being_cancelled_ends_in_the_denial() -> None:
    denial = {**STATE, "status": "denied", "decision": {"by": "alice", "comment": "No."}}
    _, handler = deadline_service(ALREADY_FINAL, then=denial)
    assert sync_client(handler).call("pay", "{}", deadline=DEADLINE) == denial


@pytest.mark.usefixtures("no_websocket")
def test_a_cancel_that_cannot_reach_the_service_says_the_call_may_still_be_decided() -> None:
    _, handler = deadline_service(httpx.ConnectError("refused"))
    with pytest.raises(TimedOut) as raised:
        sync_client(handler).call("pay", "{}", deadline=DEADLINE)
    assert raised.value.cancelled is False
    assert str(raised.value) == errors.DEADLINE_NOT_CANCELLED.format(
        seconds=DEADLINE, detail="ServiceUnavailable"
    )


@pytest.mark.usefixtures("no_websocket")
def test_a_wait_told_not_to_cancel_leaves_the_call_pending() -> None:
    asked, handler = deadline_service(CANCELLED)
    with pytest.raises(TimedOut) as raised:
        sync_client(handler).wait(PENDING, deadline=DEADLINE, cancel=False)
    assert (str(raised.value), raised.value.cancelled) == (errors.DEADLINE_PASSED, False)
    assert CANCEL not in asked


@pytest.mark.usefixtures("no_websocket")
@pytest.mark.asyncio
async def test_an_async_gated_call_past_its_deadline_is_cancelled_and_does_not_run() -> None:
    asked, handler = deadline_service(CANCELLED)
    ran: list[str] = []
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with AsyncClient(URL, TOKEN, http=http) as client:

        @client.gated("pay", deadline=DEADLINE)
        async def pay(amount: str) -> None:
            ran.append(amount)

        with pytest.raises(TimedOut) as raised:
            await pay("600.00")
    await http.aclose()
    assert raised.value.cancelled is True
    assert (asked[-1], ran) == (CANCEL, [])


def test_async_gated_wants_an_async_function() -> None:
    client = AsyncClient(URL, TOKEN)
    with pytest.raises(TypeError, match="async def"):
        client.gated("pay")(lambda: None)  # type: ignore[arg-type, return-value]


# --- against the service itself, in this process ------------------------------------------


# Django's test client sets these itself (the host it allows, the body's type and length).
PER_HOP = frozenset({"host", "content-type", "content-length"})


def django_handler(request: httpx.Request) -> httpx.Response:
    """The request answered by the service's own code through Django's test client, on the
    test database: what reaches ``Call`` is what the client sent."""
    sent = {name: value for name, value in request.headers.items() if name not in PER_HOP}
    answer = DjangoClient().generic(
        request.method,
        request.url.raw_path.decode("ascii"),
        data=request.content,
        content_type=request.headers.get("content-type", ""),
        headers=sent,
    )
    return httpx.Response(answer.status_code, headers=dict(answer.items()), content=answer.content)


@pytest.fixture
def service(db: None) -> Iterator[Client]:
    world_create()
    http = httpx.Client(transport=httpx.MockTransport(django_handler))
    with Client(URL, WORLD_TOKEN, http=http) as client:
        yield client
    http.close()


def test_a_decimal_amount_is_stored_and_capped_exactly_as_its_decimal_text(
    service: Client,
) -> None:
    state = service.submit("pay", {"amount": Decimal("12.34"), "currency": "USD"})
    assert state["status"] == "allowed"
    call = Call.objects.get(pk=state["id"])
    assert call.arguments == '{"amount": "12.34", "currency": "USD"}'
    # The cap reads the string as the amount it spells, to the last digit: the limit itself
    # passes, a hundredth over it is held.
    at_limit = service.submit("pay", {"amount": Decimal("500.00")})
    assert at_limit["status"] == "allowed"
    held = service.submit("pay", {"amount": Decimal("500.01")})
    assert held["status"] == "pending"
    assert Call.objects.get(pk=held["id"]).arguments == '{"amount": "500.01"}'
    assert [reason["message"] for reason in held["reasons"]] == [
        "USD 500.01 is over the limit of USD 500.00 per call"
    ]


def test_a_nan_decimal_is_refused_before_anything_is_sent(service: Client) -> None:
    with pytest.raises(ValueError, match="NaN or infinite"):
        service.submit("pay", {"amount": Decimal("NaN")})
    assert not Call.objects.exists()


def test_gated_sends_decimals_and_its_context_text(service: Client) -> None:
    @service.gated("pay", context="Paying the November invoice")
    def pay(amount: Decimal, currency: str = "USD") -> str:
        return f"paid {amount} {currency}"

    assert pay(Decimal("12.50")) == "paid 12.50 USD"
    call = Call.objects.get()
    assert (call.arguments, call.context) == (
        '{"amount": "12.50", "currency": "USD"}',
        "Paying the November invoice",
    )


def test_gated_context_from_a_function_of_the_arguments(service: Client) -> None:
    @service.gated("pay", context=lambda args: f"Paying {args['payee']} {args['amount']}")
    def pay(amount: Decimal, payee: str) -> None: ...

    pay(Decimal("7.25"), payee="ACME")
    pay(Decimal("8.00"), payee="Initech")
    stored = Call.objects.order_by("created_at").values_list("arguments", "context")
    assert list(stored) == [
        ('{"amount": "7.25", "payee": "ACME"}', "Paying ACME 7.25"),
        ('{"amount": "8.00", "payee": "Initech"}', "Paying Initech 8.00"),
    ]


def test_a_context_function_that_fails_stops_the_call_and_the_function(service: Client) -> None:
    ran: list[object] = []

    @service.gated("pay", context=lambda args: args["no such argument"])
    def pay(amount: Decimal) -> None:
        ran.append(amount)

    with pytest.raises(KeyError):
        pay(Decimal("1.00"))
    assert (ran, Call.objects.exists()) == ([], False)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_async_client_through_the_asgi_application() -> None:
    from config.asgi import application

    await sync_to_async(world_create)()
    # Channels types its scopes and events more narrowly than httpx's plain ASGI callable.
    transport = httpx.ASGITransport(app=application)  # type: ignore[arg-type]
    http = httpx.AsyncClient(transport=transport)
    async with AsyncClient("http://testserver", WORLD_TOKEN, http=http) as client:

        @client.gated("pay", context=lambda args: f"Refund of {args['amount']}")
        async def pay(amount: Decimal) -> Decimal:
            return amount

        assert await pay(Decimal("3.10")) == Decimal("3.10")
    await http.aclose()
    call = await sync_to_async(Call.objects.get)()
    assert (call.arguments, call.context) == ('{"amount": "3.10"}', "Refund of 3.10")
