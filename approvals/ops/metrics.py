"""The Prometheus series that ``GET /metrics`` shows (approvals/ops/views.py), kept in
prometheus-client's default registry beside its own process and Python series.

Each server process counts what it serves: scrape every process (each listens on a port of its
own). ``countersign_calls_pending`` is read from the database at each scrape, so every process
shows the same figure. The notifications' series are theirs (notifications/metrics.py).

Counts change after the transaction that makes the change commits, and the callers add one
line each: ``call_submitted``, ``call_decided``, ``decision_pushed``, ``counted_sockets``
around a WebSocket route, ``LONG_POLLS``, ``RATE_LIMIT_REFUSALS``, ``login_locked_out``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from approvals.models import Call
from approvals.selectors.ops import calls_pending_count
from config.runtime.asgi_types import ASGIApp, Receive, Scope, Send


class SocketKind:
    """The ``kind`` of ``countersign_open_sockets``: which route a socket is open on."""

    AGENT_CALL = "agent_call"  # /ws/v1/calls/<id>
    AGENT_STREAM = "agent_stream"  # /ws/v1/agent
    QUEUE = "queue"  # /ws/v1/queue
    CALL_PAGE = "call_page"  # /ws/v1/queue/calls/<id>
    ALL = (AGENT_CALL, AGENT_STREAM, QUEUE, CALL_PAGE)


class PushedVia:
    """The ``via`` of ``countersign_decision_push_seconds``: how the agent was waiting."""

    CALL_SOCKET = "call_socket"
    AGENT_STREAM = "agent_stream"
    LONG_POLL = "long_poll"
    ALL = (CALL_SOCKET, AGENT_STREAM, LONG_POLL)


class RateLimitRefusal:
    """The ``reason`` of ``countersign_rate_limit_refusals_total``."""

    OVER_LIMIT = "over_limit"  # 429
    LIMITER_UNAVAILABLE = "limiter_unavailable"  # 503: the count could not be read
    ALL = (OVER_LIMIT, LIMITER_UNAVAILABLE)


# A held call waits for people: seconds to a day.
HOLD_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 86400.0)
# A push to a waiting agent: milliseconds (the delivery targets of the agent API) to seconds.
PUSH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

CALLS_SUBMITTED = Counter(
    "countersign_calls_submitted",
    "Calls submitted, by the verdict at submission (allowed, refused, pending: held).",
    ["verdict"],
)
DECISIONS = Counter(
    "countersign_decisions",
    "Held calls ended, by outcome (approved, denied, expired, cancelled).",
    ["outcome"],
)
HOLD_TO_DECISION = Histogram(
    "countersign_hold_to_decision_seconds",
    "From a call's hold (its submission) to its end, by outcome.",
    ["outcome"],
    buckets=HOLD_BUCKETS,
)
DECISION_PUSH = Histogram(
    "countersign_decision_push_seconds",
    "From a held call's end to its final state reaching an agent waiting on it, by how the "
    "agent waited (the deciding process's clock against this one's).",
    ["via"],
    buckets=PUSH_BUCKETS,
)
OPEN_SOCKETS = Gauge("countersign_open_sockets", "Open WebSockets, by route.", ["kind"])
LONG_POLLS = Gauge("countersign_open_long_polls", "Long-polls waiting for a call to end.")
RATE_LIMIT_REFUSALS = Counter(
    "countersign_rate_limit_refusals",
    "Submissions refused by the per-agent rate limit (COUNTERSIGN_RATE_LIMIT), by reason.",
    ["reason"],
)
LOGIN_LOCKOUTS = Counter(
    "countersign_login_lockouts",
    "Lockouts begun: a username and client address past COUNTERSIGN_LOGIN_FAILURES.",
)

# Every label value shows from the start, at zero, rather than once it first happens.
for _verdict in (Call.Status.ALLOWED, Call.Status.REFUSED, Call.Status.PENDING):
    CALLS_SUBMITTED.labels(_verdict)
for _outcome in sorted(Call.Status.DECIDED):
    DECISIONS.labels(_outcome)
    HOLD_TO_DECISION.labels(_outcome)
for _via in PushedVia.ALL:
    DECISION_PUSH.labels(_via)
for _kind in SocketKind.ALL:
    OPEN_SOCKETS.labels(_kind)
for _reason in RateLimitRefusal.ALL:
    RATE_LIMIT_REFUSALS.labels(_reason)

PENDING_NAME = "countersign_calls_pending"
PENDING_HELP = "Calls held for a decision now (read from the database at the scrape)."


class PendingCalls(Collector):
    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Described without a value, so that registering it reads nothing.
        yield GaugeMetricFamily(PENDING_NAME, PENDING_HELP)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(PENDING_NAME, PENDING_HELP, value=calls_pending_count())


REGISTRY.register(PendingCalls())


def call_submitted(call: Call) -> None:
    """Count a new call by its verdict, once its transaction commits."""
    counter = CALLS_SUBMITTED.labels(call.status)
    transaction.on_commit(counter.inc)


def call_decided(call: Call) -> None:
    """Count a held call's end and how long it was held, once its transaction commits."""
    assert call.decided_at is not None
    held = max(0.0, (call.decided_at - call.created_at).total_seconds())
    outcome = call.status

    def count() -> None:
        DECISIONS.labels(outcome).inc()
        HOLD_TO_DECISION.labels(outcome).observe(held)

    transaction.on_commit(count)


def decision_pushed(state: Mapping[str, Any], *, via: str) -> None:
    """A pushed call state has reached a waiting agent: if it is a held call's end, observe
    how long after the end it arrived."""
    decision = state.get("decision")
    if state.get("status") not in Call.Status.DECIDED or not decision or not decision.get("at"):
        return
    ended = datetime.fromisoformat(decision["at"])
    DECISION_PUSH.labels(via).observe(max(0.0, (timezone.now() - ended).total_seconds()))


def login_locked_out() -> None:
    """Count a lockout that began, once its audit entry commits."""
    transaction.on_commit(LOGIN_LOCKOUTS.inc)


def counted_sockets(kind: str, app: ASGIApp) -> ASGIApp:
    """``app`` (a WebSocket route), its sockets counted in ``countersign_open_sockets`` from
    their accept until the app closes them or returns (Channels' consumers return once the
    client has gone). Refused before the accept, a socket is never counted."""
    gauge = OPEN_SOCKETS.labels(kind)

    async def counted(scope: Scope, receive: Receive, send: Send) -> None:
        is_open = False

        async def sending(message: Mapping[str, Any]) -> None:
            nonlocal is_open
            if message["type"] == "websocket.accept" and not is_open:
                is_open = True
                gauge.inc()
            elif message["type"] == "websocket.close" and is_open:
                is_open = False
                gauge.dec()
            await send(message)

        try:
            await app(scope, receive, sending)
        finally:
            if is_open:
                gauge.dec()

    return counted
