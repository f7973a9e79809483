"""GET /healthz, /readyz and /metrics: what a load balancer and a Prometheus scrape see, and
every series moving as calls are submitted, held, decided and pushed, sockets and long-polls
open and close, submissions are rate-limited and logins locked out."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator, WebsocketCommunicator
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from approvals.models import Call
from approvals.ops.views import METRICS_UNAUTHORIZED
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import call_cancel, calls_expire_due
from config.asgi import application
from tests.asgi import PROMPTLY, asgi_response, finished
from tests.factories import agent_with_token, call_make, payment, rule_make, user_make
from tests.live import free_port, live_server

METRICS_TOKEN = "scrape-token-for-tests"
AGENT_TOKEN = "cs_ops-test-token"
AUTH = [(b"authorization", f"Bearer {AGENT_TOKEN}".encode())]
SCRAPE = [(b"authorization", f"Bearer {METRICS_TOKEN}".encode()), (b"host", b"localhost")]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def scraped(settings: Any) -> None:
    settings.COUNTERSIGN_METRICS_TOKEN = METRICS_TOKEN


@pytest.fixture
def without_redis(settings: Any) -> None:
    settings.REDIS_URL = ""


# --- /healthz and /readyz ------------------------------------------------------------------


@pytest.mark.django_db
def test_healthz_answers_without_reading_anything(
    client: Client, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})
    assert "Set-Cookie" not in response


@pytest.mark.django_db
def test_readyz_checks_the_database(client: Client, without_redis: None) -> None:
    response = client.get("/readyz")
    assert (response.status_code, response.json()) == (
        200,
        {"status": "ready", "checked": ["database"]},
    )
    assert "Set-Cookie" not in response


@pytest.mark.django_db
def test_readyz_names_a_redis_that_does_not_answer(client: Client, settings: Any) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
    response = client.get("/readyz")
    assert (response.status_code, response.json()) == (
        503,
        {"status": "unavailable", "unavailable": ["redis"]},
    )


@pytest.mark.django_db(transaction=True)
def test_a_live_server_names_what_is_not_reachable(tmp_path: Path) -> None:
    """A server started on a database without its tables, with Redis on a closed port."""
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    with live_server(extra_env=env) as server:
        assert httpx.get(f"{server.url}/healthz", timeout=PROMPTLY).status_code == 200
        response = httpx.get(f"{server.url}/readyz", timeout=PROMPTLY)
    assert (response.status_code, response.json()) == (
        503,
        {"status": "unavailable", "unavailable": ["database", "redis"]},
    )


# --- /metrics: who may scrape ------------------------------------------------------------------


@pytest.mark.django_db
def test_without_a_token_configured_metrics_is_not_there(client: Client, settings: Any) -> None:
    settings.COUNTERSIGN_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {METRICS_TOKEN}", ""])
def test_a_missing_or_wrong_token_is_401(
    client: Client, scraped: None, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert response.content.decode() == METRICS_UNAUTHORIZED


@pytest.mark.django_db
def test_the_scrape_is_the_prometheus_text_format_with_every_series(
    client: Client, scraped: None
) -> None:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = _samples(response.content.decode())
    names = {name for name, _ in samples}
    for verdict in ("allowed", "refused", "pending"):
        assert ("countersign_calls_submitted_total", (("verdict", verdict),)) in samples
    for outcome in ("approved", "denied", "expired", "cancelled"):
        assert ("countersign_decisions_total", (("outcome", outcome),)) in samples
        assert ("countersign_hold_to_decision_seconds_count", (("outcome", outcome),)) in samples
    for via in ("call_socket", "agent_stream", "long_poll"):
        assert ("countersign_decision_push_seconds_count", (("via", via),)) in samples
    for kind in ("agent_call", "agent_stream", "queue", "call_page"):
        assert ("countersign_open_sockets", (("kind", kind),)) in samples
    for reason in ("over_limit", "limiter_unavailable"):
        assert ("countersign_rate_limit_refusals_total", (("reason", reason),)) in samples
    assert {
        "countersign_calls_pending",
        "countersign_open_long_polls",
        "countersign_login_lockouts_total",
        "process_cpu_seconds_total",
    } <= names


# --- /metrics: every series moves --------------------------------------------------------------


async def _scrape() -> Samples:
    response = await asgi_response(application, "GET", "/metrics", headers=SCRAPE)
    assert response["status"] == 200
    return _samples(response["body"].decode())


def _world() -> tuple[Call, Call, Call]:
    agent, _ = agent_with_token(token=AGENT_TOKEN, name="ops")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    allowed = call_make(agent=agent, arguments=payment("5.00"))
    held = [call_make(agent=agent, arguments=payment("600.00")) for _ in range(3)]
    assert allowed.status == "allowed"
    assert {call.status for call in held} == {"pending"}
    return held[0], held[1], held[2]


def _approve(call: Call) -> None:
    call_decide(
        call_id=call.pk,
        user=user_make(username="alice"),
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
    )


def _expire(call: Call) -> None:
    Call.objects.filter(pk=call.pk).update(expires_at=call.created_at)
    assert calls_expire_due() == 1


def _lock_out() -> None:
    user_make(username="ann")
    client = Client()
    for attempt in range(5):
        client.post("/accounts/login/", {"username": "ann", "password": f"wrong {attempt}"})


def _submit_twice(settings: Any) -> list[int]:
    settings.COUNTERSIGN_RATE_LIMIT = (1, 60)
    client = Client()
    return [
        client.post(
            "/api/v1/calls",
            {"tool": "search", "arguments": "{}"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {AGENT_TOKEN}",
        ).status_code
        for _ in range(2)
    ]


async def _until(predicate: Any, what: str) -> Samples:
    deadline = asyncio.get_running_loop().time() + PROMPTLY
    while True:
        samples = await _scrape()
        if predicate(samples):
            return samples
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_every_series_moves(scraped: None, settings: Any) -> None:
    before = await _scrape()
    approved, expired, cancelled = await sync_to_async(_world)()
    stream = WebsocketCommunicator(application, "/ws/v1/agent", headers=AUTH)
    connected, _ = await stream.connect(timeout=PROMPTLY)
    assert connected
    for _ in range(3):  # the three pending calls, as the stream starts
        await stream.receive_json_from(timeout=PROMPTLY)
    poll = HttpCommunicator(
        application, "GET", f"/api/v1/calls/{approved.pk}/wait?timeout=30", headers=AUTH
    )
    answer = asyncio.ensure_future(finished(poll, PROMPTLY))
    waiting = await _until(
        lambda s: _value(s, "countersign_open_long_polls") >= 1, "the long-poll to wait"
    )
    assert _value(waiting, "countersign_open_sockets", kind="agent_stream") == (
        _value(before, "countersign_open_sockets", kind="agent_stream") + 1
    )
    assert _value(waiting, "countersign_calls_pending") == 3
    submitted = "countersign_calls_submitted_total"
    for verdict, more in (("allowed", 1), ("pending", 3)):
        assert _value(waiting, submitted, verdict=verdict) == (
            _value(before, submitted, verdict=verdict) + more
        )

    await sync_to_async(_approve)(approved)
    response = await answer
    assert json.loads(response["body"])["status"] == "approved"
    assert (await stream.receive_json_from(timeout=PROMPTLY))["call"]["status"] == "approved"
    await sync_to_async(_expire)(expired)
    await sync_to_async(call_cancel)(agent=cancelled.agent, call_id=cancelled.pk)
    assert await sync_to_async(_submit_twice)(settings) == [201, 429]
    await sync_to_async(_lock_out)()
    await stream.disconnect()

    after = await _until(
        lambda s: (
            _value(s, "countersign_open_sockets", kind="agent_stream")
            == _value(before, "countersign_open_sockets", kind="agent_stream")
        ),
        "the socket's close to be counted",
    )

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert _value(after, "countersign_calls_pending") == 0
    assert _value(after, "countersign_open_long_polls") == 0
    for outcome in ("approved", "expired", "cancelled"):
        assert moved("countersign_decisions_total", outcome=outcome) == 1
        assert moved("countersign_hold_to_decision_seconds_count", outcome=outcome) == 1
    assert moved("countersign_decisions_total", outcome="denied") == 0
    assert moved("countersign_decision_push_seconds_count", via="long_poll") == 1
    # The stream is pushed the approval, the expiry and the cancellation as they happen.
    assert moved("countersign_decision_push_seconds_count", via="agent_stream") >= 1
    assert moved("countersign_calls_submitted_total", verdict="allowed") == 2
    assert moved("countersign_rate_limit_refusals_total", reason="over_limit") == 1
    assert moved("countersign_login_lockouts_total") == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_call_socket_counts_while_open_and_its_push_is_timed(scraped: None) -> None:
    approved, _, _ = await sync_to_async(_world)()
    before = await _scrape()
    socket = WebsocketCommunicator(application, f"/ws/v1/calls/{approved.pk}", headers=AUTH)
    connected, _ = await socket.connect(timeout=PROMPTLY)
    assert connected
    assert (await socket.receive_json_from(timeout=PROMPTLY))["call"]["status"] == "pending"
    opened = await _scrape()
    kind = {"kind": "agent_call"}
    assert _value(opened, "countersign_open_sockets", **kind) == (
        _value(before, "countersign_open_sockets", **kind) + 1
    )
    await sync_to_async(_approve)(approved)
    assert (await socket.receive_json_from(timeout=PROMPTLY))["call"]["status"] == "approved"
    closed = await _until(
        lambda s: (
            _value(s, "countersign_open_sockets", **kind)
            == _value(before, "countersign_open_sockets", **kind)
        ),
        "the socket, closed after the final state, to be counted out",
    )
    name, via = "countersign_decision_push_seconds_count", {"via": "call_socket"}
    assert _value(closed, name, **via) == _value(before, name, **via) + 1
    await socket.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_socket_refused_before_its_accept_is_not_counted(scraped: None) -> None:
    before = await _scrape()
    page = WebsocketCommunicator(
        application, "/ws/v1/queue", headers=[(b"origin", b"http://elsewhere.example")]
    )
    connected, _ = await page.connect(timeout=PROMPTLY)
    assert not connected
    after = await _scrape()
    assert _value(after, "countersign_open_sockets", kind="queue") == _value(
        before, "countersign_open_sockets", kind="queue"
    )
