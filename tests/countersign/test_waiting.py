"""The wait plan: what a socket's failure means, the long-poll's query, the deadline, giving
up on a lost service, and what a cancel at the deadline ends in."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosedError, InvalidMessage, InvalidStatus
from websockets.frames import Close
from websockets.http11 import Response

from countersign import bounded, errors, waiting


def closed(code: int) -> ConnectionClosedError:
    return ConnectionClosedError(Close(code, ""), None)


def refused(status: int) -> InvalidStatus:
    return InvalidStatus(Response(status, "", Headers()))


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (4400, errors.BadRequest),
        (4401, errors.Unauthorized),
        (4403, errors.Forbidden),
        (4404, errors.NotFound),
    ],
)
def test_the_services_close_codes_are_errors(code: int, kind: type[Exception]) -> None:
    assert type(waiting.socket_failure(closed(code))) is kind


@pytest.mark.parametrize(
    "error",
    [
        closed(1006),
        closed(1011),
        ConnectionRefusedError(),
        TimeoutError(),
        refused(502),
        InvalidMessage("did not receive a valid HTTP response"),
    ],
)
def test_a_lost_or_failed_connection_means_try_again(error: Exception) -> None:
    assert type(waiting.socket_failure(error)) is waiting.SocketLost


@pytest.mark.parametrize("status", [400, 403, 404])
def test_a_refused_handshake_means_long_poll(status: int) -> None:
    assert type(waiting.socket_failure(refused(status))) is waiting.SocketRefused


def test_socket_messages() -> None:
    state = {"id": "x", "status": "approved"}
    assert waiting.call_message(json.dumps({"type": "call", "call": state})) == state
    assert waiting.call_message(b'{"type": "hello"}') is None
    with pytest.raises(waiting.SocketLost):
        waiting.call_message("not json")


def test_the_long_poll_answer() -> None:
    with pytest.raises(waiting.PollFailed):
        waiting.poll_state(httpx.Response(503))
    with pytest.raises(errors.NotFound):
        waiting.poll_state(httpx.Response(404))
    assert waiting.poll_state(httpx.Response(200, json={"id": "x", "status": "pending"}))


def test_without_a_deadline_the_long_poll_takes_the_services_default() -> None:
    plan = waiting.WaitPlan(None)
    assert plan.time_left() is None
    assert plan.poll(30.0) == ({}, waiting.MAX_POLL_SECONDS + 30.0)
    assert plan.open_timeout(30.0) == waiting.OPEN_TIMEOUT
    assert plan.open_timeout(2.0) == 2.0  # a handshake is one request


def test_a_near_deadline_bounds_the_long_poll_and_the_pause() -> None:
    plan = waiting.WaitPlan(2.5)
    assert plan.poll(30.0) == ({"timeout": 3}, 33.0)
    assert plan.open_timeout(30.0) <= 2.5
    for _ in range(10):
        assert plan.pause() <= 2.5


def test_a_passed_deadline_ends_the_wait_and_is_no_socket_error() -> None:
    plan = waiting.WaitPlan(0.05)
    time.sleep(0.06)
    with pytest.raises(waiting.DeadlineReached) as raised:
        plan.poll(30.0)
    assert raised.value.seconds == 0.05
    assert not isinstance(raised.value, waiting.SOCKET_ERRORS)


def test_a_service_lost_for_longer_than_reconnect_for_is_unavailable() -> None:
    plan = waiting.WaitPlan(None, reconnect_for=0.05)
    assert plan.pause() >= 0  # lost only just now
    time.sleep(0.06)
    with pytest.raises(errors.ServiceUnavailable) as raised:
        plan.pause()
    assert errors.LOST_WHILE_WAITING.format(seconds=0.05) in str(raised.value)
    plan.reached()
    assert plan.pause() >= 0  # reached again: the count starts afresh


def test_a_cancel_at_the_deadline_is_timed_out_unless_the_call_was_decided() -> None:
    with pytest.raises(errors.TimedOut) as raised:
        waiting.gave_up({"id": "c-1", "status": "cancelled"}, seconds=5)
    assert isinstance(raised.value, errors.NotApproved)
    assert (raised.value.call_id, raised.value.cancelled) == ("c-1", True)
    assert str(raised.value) == errors.DEADLINE_CANCELLED.format(seconds=5)
    approved = {"id": "c-2", "status": "approved"}
    assert waiting.gave_up(approved, seconds=5) is approved


def test_a_cancel_that_did_not_go_through_says_the_call_may_still_be_decided() -> None:
    lost = errors.ServiceUnavailable("gone", code="")
    timed_out = waiting.not_cancelled("c-3", seconds=2.5, error=lost)
    assert (timed_out.call_id, timed_out.cancelled) == ("c-3", False)
    assert str(timed_out) == errors.DEADLINE_NOT_CANCELLED.format(
        seconds=2.5, detail="ServiceUnavailable"
    )
    assert isinstance(timed_out, TimeoutError)  # for code that already catches one


def test_a_cancel_that_got_no_answer_in_time_says_so() -> None:
    timed_out = waiting.not_cancelled("c-4", seconds=2.5, error=bounded.NoAnswer(5))
    assert str(timed_out) == errors.DEADLINE_NOT_CANCELLED.format(
        seconds=2.5, detail="no answer within 5 seconds"
    )


def test_an_abandoned_plan_ends_whatever_still_runs_it() -> None:
    """A wait given up at its deadline while a request was held: the thread left with it
    stops at its next look at the time, not at the plan's own deadline."""
    plan = waiting.WaitPlan(60.0)
    plan.abandon()
    with pytest.raises(waiting.DeadlineReached) as raised:
        plan.pause()
    assert raised.value.seconds == 60.0


def test_the_backoff_grows_with_failures_and_restarts_once_reached() -> None:
    plan = waiting.WaitPlan(None)
    pauses = [plan.pause() for _ in range(4)]
    assert pauses[3] > pauses[0]
    plan.reached()
    assert plan.pause() <= pauses[3]
