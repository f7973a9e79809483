"""A wait on a held call says once, at INFO on the ``countersign`` logger, which call waits,
where and why, and the page where a person decides it; interrupted (Ctrl-C, a cancelled
task), it withdraws the call, so no one approves a call that will not run."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from countersign import AsyncClient, Client, TimedOut, protocol, waiting
from tests.countersign.world import APPROVER, BIG_PAYMENT, PASSWORD, TOKEN
from tests.live import Approver, LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 10.0  # a guard against hangs, not a measure
# Long enough for the wait to be connected when it is interrupted.
SETTLE = 0.5


def state_of(server: LiveServer, call_id: str) -> str:
    answer = httpx.get(
        f"{server.url}/api/v1/calls/{call_id}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    return str(answer.json()["status"])


@contextmanager
def ctrl_c_after(seconds: float) -> Iterator[None]:
    """A real SIGINT to this (the main) thread after ``seconds``, as Ctrl-C in a terminal,
    with Python's own handler for it, as in a shell (a run started in the background ignores
    SIGINT)."""
    main = threading.get_ident()
    assert main == threading.main_thread().ident
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(seconds, signal.pthread_kill, args=(main, signal.SIGINT))
    ctrl_c.start()
    try:
        yield
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)


def notices(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "countersign"]


def test_a_wait_says_once_where_the_call_waits_why_and_its_page(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="countersign")
    with Client(server.url, TOKEN, timeout=WAIT) as client:
        held = client.submit("pay", BIG_PAYMENT)
        caplog.clear()
        with pytest.raises(TimedOut):
            client.wait(held, deadline=SETTLE)
    page = f"{server.url}/calls/{held['id']}/"
    (said,) = notices(caplog)
    assert said == (
        f"Call {held['id']} (pay) is held for a person at gate default: big: USD 600.00 is over "
        f"the limit of USD 500.00 per call. Approve or deny it at {page}"
    )
    approver = Approver(server, APPROVER, PASSWORD)
    try:
        assert approver.http.get(page).status_code == 200  # the page is the call's
    finally:
        approver.close()


def test_a_wait_given_only_an_id_names_the_page() -> None:
    page = protocol.page_url("http://127.0.0.1:8000", "c-1")
    assert waiting.held_notice("c-1", page=page) == (
        "Waiting for a person to decide call c-1. Approve or deny it at "
        "http://127.0.0.1:8000/calls/c-1/"
    )


def test_ctrl_c_during_a_wait_withdraws_the_call(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="countersign")
    with Client(server.url, TOKEN, timeout=WAIT) as client:
        held = client.submit("pay", BIG_PAYMENT)
        with ctrl_c_after(SETTLE), pytest.raises(KeyboardInterrupt):
            client.wait(held, deadline=WAIT)
    assert state_of(server, held["id"]) == "cancelled"
    assert notices(caplog)[-1] == waiting.WITHDRAWN.format(call_id=held["id"])


def test_a_wait_told_not_to_cancel_leaves_the_call_pending_on_ctrl_c(server: LiveServer) -> None:
    with Client(server.url, TOKEN, timeout=WAIT) as client:
        held = client.submit("pay", BIG_PAYMENT)
        with ctrl_c_after(SETTLE), pytest.raises(KeyboardInterrupt):
            client.wait(held, deadline=WAIT, cancel=False)
    assert state_of(server, held["id"]) == "pending"


@pytest.mark.asyncio
async def test_a_cancelled_task_withdraws_its_call(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="countersign")
    async with AsyncClient(server.url, TOKEN, timeout=WAIT) as client:
        held = await client.submit("pay", BIG_PAYMENT)
        waiting_task = asyncio.ensure_future(client.wait(held, deadline=WAIT))
        await asyncio.sleep(SETTLE)
        waiting_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting_task
    assert await asyncio.to_thread(state_of, server, held["id"]) == "cancelled"
    assert notices(caplog)[-1] == waiting.WITHDRAWN.format(call_id=held["id"])


@pytest.mark.asyncio
async def test_a_wait_bounded_by_asyncio_timeout_withdraws_its_call(server: LiveServer) -> None:
    async with AsyncClient(server.url, TOKEN, timeout=WAIT) as client:
        held = await client.submit("pay", BIG_PAYMENT)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(SETTLE):
                await client.wait(held)
        assert time.monotonic() - started < WAIT
    assert await asyncio.to_thread(state_of, server, held["id"]) == "cancelled"
