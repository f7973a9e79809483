"""A wait's deadline is a wall-clock bound, against a real server that dribbles its answers a
byte a second (each byte well within any read timeout) or never answers: ``Client.wait`` and
``AsyncClient.wait`` end by the deadline, and by the deadline plus the cancel's own bound when
the cancel dribbles too, with the ``TimedOut`` the deadline always ends in."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from countersign import AsyncClient, Client, TimedOut, errors, waiting
from tests.countersign.slow_service import (
    ALREADY_FINAL,
    APPROVED,
    CANCEL,
    PENDING,
    READ,
    SOCKET,
    WAIT,
    SlowService,
    Step,
    response,
    slow_service,
)

TOKEN = "cs_unit-token"
DEADLINE = 1.0
# Timers, threads and a local server answering at once: a little over the bound is slack, not
# a measure. Without the bound each of these waits would take minutes.
SLACK = 1.5
GUARD = 60.0  # a wait that regressed fails here instead of hanging the suite


def wait_in_a_thread(service: SlowService) -> tuple[BaseException | None, float]:
    """What ``Client.wait`` raised, and how long it took."""
    raised: list[BaseException] = []

    def wait() -> None:
        with Client(service.url, TOKEN) as client:
            try:
                client.wait(PENDING, deadline=DEADLINE)
            except BaseException as error:
                raised.append(error)

    began = time.monotonic()
    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(GUARD)
    took = time.monotonic() - began
    assert not waiter.is_alive(), f"the wait was still running after {GUARD:g} s"
    return (raised[0] if raised else None), took


@pytest.mark.parametrize(
    "steps",
    [{WAIT: "dribble"}, {WAIT: "silent"}, {SOCKET: "dribble"}],
    ids=["long-poll-dribbles", "long-poll-silent", "socket-handshake-dribbles"],
)
def test_a_wait_ends_at_its_deadline_and_cancels_whatever_the_service_holds(
    steps: dict[str, Step],
) -> None:
    with slow_service(steps) as service:
        raised, took = wait_in_a_thread(service)
    assert isinstance(raised, TimedOut)
    assert (raised.call_id, raised.cancelled) == (PENDING["id"], True)
    assert str(raised) == errors.DEADLINE_CANCELLED.format(seconds=DEADLINE)
    assert DEADLINE <= took < DEADLINE + SLACK
    assert service.asked[-1] == CANCEL


def test_a_cancel_that_dribbles_too_ends_the_wait_within_the_cancels_bound() -> None:
    with slow_service({WAIT: "dribble", CANCEL: "dribble"}) as service:
        raised, took = wait_in_a_thread(service)
    assert isinstance(raised, TimedOut)
    assert raised.cancelled is False  # the service may still have the call pending
    assert str(raised) == errors.DEADLINE_NOT_CANCELLED.format(
        seconds=DEADLINE, detail=f"no answer within {waiting.WITHDRAW_TIMEOUT:g} seconds"
    )
    bound = DEADLINE + waiting.WITHDRAW_TIMEOUT
    assert bound <= took < bound + SLACK
    assert service.asked[-1] == CANCEL


def test_a_call_decided_meanwhile_is_read_once_the_cancel_is_refused() -> None:
    """The long-poll dribbles past the deadline; the cancel is told the call is final: the
    client reads it, within the cancel's bound, and answers its final state."""
    decided = {CANCEL: ALREADY_FINAL, READ: response("200 OK", APPROVED)}
    with (
        slow_service({WAIT: "dribble"}, answers=decided) as service,
        Client(service.url, TOKEN) as client,
    ):
        began = time.monotonic()
        final = client.wait(PENDING, deadline=DEADLINE)
        took = time.monotonic() - began
    assert final == APPROVED  # its ledgers are charged: the tool may run
    assert DEADLINE <= took < DEADLINE + SLACK
    assert service.asked[-2:] == [CANCEL, READ]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("steps", "cancelled", "bound"),
    [
        ({WAIT: "dribble"}, True, DEADLINE),
        ({WAIT: "dribble", CANCEL: "dribble"}, False, DEADLINE + waiting.WITHDRAW_TIMEOUT),
    ],
    ids=["long-poll-dribbles", "cancel-dribbles-too"],
)
async def test_the_async_wait_ends_at_its_deadline_too(
    steps: dict[str, Step], cancelled: bool, bound: float
) -> None:
    with slow_service(steps) as service:
        async with AsyncClient(service.url, TOKEN) as client:
            began = time.monotonic()
            with pytest.raises(TimedOut) as raised:
                await asyncio.wait_for(client.wait(PENDING, deadline=DEADLINE), GUARD)
            took = time.monotonic() - began
    assert raised.value.cancelled is cancelled
    assert bound <= took < bound + SLACK
    assert service.asked[-1] == CANCEL
