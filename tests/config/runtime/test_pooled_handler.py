"""Requests' synchronous code runs on a fixed number of reused threads, one request at a
time each: no thread is started per request, and a request that finds them all busy waits.
Paths with a pool of their own (logins, health checks) wait only for that pool's threads."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.core import signals

from config.runtime.pooled_handler import (
    ExecutorPool,
    PathPool,
    PooledThreadASGIHandler,
    configured_path_pools,
)
from tests.asgi import PROMPTLY, asgi_response, http_scope
from tests.config.runtime import pooled_handler_urls

pytestmark = [pytest.mark.asyncio, pytest.mark.urls("tests.config.runtime.pooled_handler_urls")]
HOST = [(b"host", b"localhost")]


async def _threads_of(
    handler: PooledThreadASGIHandler, count: int, sleep: float
) -> list[dict[str, int]]:
    answers = await asyncio.gather(
        *(
            asgi_response(handler, "GET", f"/thread?sleep={sleep}", headers=HOST)
            for _ in range(count)
        )
    )
    assert {answer["status"] for answer in answers} == {200}
    return [json.loads(answer["body"]) for answer in answers]


async def test_concurrent_requests_share_the_pools_threads_and_none_is_started_per_request() -> (
    None
):
    handler = PooledThreadASGIHandler(threads=3)
    await _threads_of(handler, 3, 0.05)  # the pool's threads start on first use
    before = threading.active_count()
    first = await _threads_of(handler, 12, 0.05)
    second = await _threads_of(handler, 12, 0.0)
    assert threading.active_count() == before
    used = {answer["first"] for answer in first + second}
    assert len(used) <= 3
    # Each request's synchronous code ran on one thread from start to end.
    assert all(answer["first"] == answer["last"] for answer in first + second)


async def test_a_request_crosses_to_its_thread_once_for_the_whole_middleware_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Django's asynchronous chain crosses to a thread and back for each hook of each of its
    middleware (about a dozen times a request), and once more each for the request_started
    receivers and the response's close; here all of it runs on the request's thread at once."""
    handler = PooledThreadASGIHandler(threads=1)
    await _threads_of(handler, 1, 0.0)
    crossings = 0
    cross = SyncToAsync.__call__

    async def counted(self: SyncToAsync[Any, Any], *args: Any, **kwargs: Any) -> Any:
        nonlocal crossings
        crossings += 1
        return await cross(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    await _threads_of(handler, 1, 0.0)
    assert crossings == 1
    await _call(handler, "/streamed", _receive(asyncio.Event()))
    assert b"".join(message.get("body", b"") for message in SENT) == b"onetwo"
    assert crossings == 3  # a streamed response is closed after it is sent


@pytest.fixture
def finishes() -> Iterator[list[tuple[int, int]]]:
    """Each ``request_finished`` as (the thread it ran on, the ASGI messages sent by then),
    for the tests that append what they send to ``SENT``."""
    seen: list[tuple[int, int]] = []

    def finished(**kwargs: Any) -> None:
        seen.append((threading.get_ident(), len(SENT)))

    signals.request_finished.connect(finished, weak=False)
    yield seen
    signals.request_finished.disconnect(finished)


SENT: list[dict[str, Any]] = []


async def _call(
    handler: PooledThreadASGIHandler, path: str, receive: Any, timeout: float = PROMPTLY
) -> None:
    scope = http_scope("GET", path, HOST)

    async def send(message: dict[str, Any]) -> None:
        SENT.append(message)

    SENT.clear()
    await asyncio.wait_for(handler(scope, receive, send), timeout)


def _receive(gone: asyncio.Event) -> Any:
    """The request's one body message, then a disconnect once ``gone`` is set."""
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    return receive


@pytest.mark.parametrize(
    ("path", "sent_before"), [("/thread", 0), ("/streamed", 4)], ids=["whole", "streamed"]
)
async def test_a_request_is_finished_once_on_its_own_thread(
    finishes: list[tuple[int, int]], path: str, sent_before: int
) -> None:
    """A whole response is closed before its body is sent (the connection given back
    sooner), a streamed one after all of it (start, two parts, the end) was sent."""
    handler = PooledThreadASGIHandler(threads=1)
    await _call(handler, path, _receive(asyncio.Event()))
    assert SENT[0]["status"] == 200
    thread = threading.get_ident()
    assert [(ran_on != thread, sent) for ran_on, sent in finishes] == [(True, sent_before)]


async def test_a_client_gone_during_its_view_is_finished_once_after_the_view(
    release: threading.Event, finishes: list[tuple[int, int]]
) -> None:
    handler = PooledThreadASGIHandler(threads=1)
    gone = asyncio.Event()
    call = asyncio.ensure_future(_call(handler, "/held", _receive(gone)))
    await asyncio.sleep(0.1)
    gone.set()
    await asyncio.sleep(0.1)
    assert finishes == []  # the view still holds its thread
    release.set()
    await asyncio.wait_for(call, PROMPTLY)
    assert len(finishes) == 1
    assert SENT == []  # nobody to answer


async def test_an_asynchronous_view_runs_on_the_event_loop_after_the_middleware() -> None:
    handler = PooledThreadASGIHandler(threads=1)
    answer = await asgi_response(handler, "GET", "/async", headers=HOST)
    assert answer["status"] == 200
    # On this test's loop, and the authentication middleware ran before it.
    assert json.loads(answer["body"]) == {"thread": threading.get_ident(), "user": True}


async def test_a_request_waits_while_every_thread_is_busy() -> None:
    handler = PooledThreadASGIHandler(threads=1)
    slow = asyncio.ensure_future(asgi_response(handler, "GET", "/thread?sleep=0.5", headers=HOST))
    await asyncio.sleep(0.1)
    quick = asyncio.ensure_future(asgi_response(handler, "GET", "/thread", headers=HOST))
    await asyncio.sleep(0.2)
    assert not quick.done()  # the one thread is still the slow request's
    slow_answer, quick_answer = await asyncio.wait_for(asyncio.gather(slow, quick), PROMPTLY)
    assert json.loads(slow_answer["body"])["first"] == json.loads(quick_answer["body"])["first"]


async def test_the_pool_lends_each_executor_to_one_borrower_at_a_time() -> None:
    pool = ExecutorPool(2)
    first, second = await pool.borrow(), await pool.borrow()
    assert first is not second
    third = asyncio.ensure_future(pool.borrow())
    await asyncio.sleep(0.01)
    assert not third.done()
    pool.give_back(second)
    assert await asyncio.wait_for(third, PROMPTLY) is second


async def test_a_cancelled_borrower_loses_no_executor() -> None:
    pool = ExecutorPool(1)
    held = await pool.borrow()
    gave_up = asyncio.ensure_future(pool.borrow())
    waiting = asyncio.ensure_future(pool.borrow())
    await asyncio.sleep(0.01)
    gave_up.cancel()
    pool.give_back(held)  # skips the cancelled borrower
    assert await asyncio.wait_for(waiting, PROMPTLY) is held


async def test_an_executor_handed_to_a_borrower_cancelled_at_that_moment_is_passed_on() -> None:
    pool = ExecutorPool(1)
    held = await pool.borrow()
    unlucky = asyncio.ensure_future(pool.borrow())
    next_in_line = asyncio.ensure_future(pool.borrow())
    await asyncio.sleep(0.01)
    pool.give_back(held)  # handed to ``unlucky``, which is cancelled before it resumes
    unlucky.cancel()
    with pytest.raises(asyncio.CancelledError):
        await unlucky
    assert await asyncio.wait_for(next_in_line, PROMPTLY) is held


OWN = [PathPool("login", 1, frozenset({"/own", "/own-held"}))]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    pooled_handler_urls.RELEASE.clear()
    yield pooled_handler_urls.RELEASE
    pooled_handler_urls.RELEASE.set()


async def test_a_path_with_a_pool_of_its_own_answers_while_every_request_thread_is_busy(
    release: threading.Event,
) -> None:
    handler = PooledThreadASGIHandler(threads=1, path_pools=OWN)
    held = asyncio.ensure_future(asgi_response(handler, "GET", "/held", headers=HOST))
    await asyncio.sleep(0.1)
    own = await asgi_response(handler, "GET", "/own", headers=HOST)
    assert not held.done()  # the one request thread is still held
    assert json.loads(own["body"])["name"].startswith("login")
    release.set()
    answer = await asyncio.wait_for(held, PROMPTLY)
    assert json.loads(answer["body"]) == {"released": True, "name": "request_0"}


async def test_requests_keep_their_threads_while_the_own_pool_is_busy(
    release: threading.Event,
) -> None:
    handler = PooledThreadASGIHandler(threads=1, path_pools=OWN)
    logins = [
        asyncio.ensure_future(asgi_response(handler, "GET", "/own-held", headers=HOST))
        for _ in range(12)
    ]
    await asyncio.sleep(0.1)
    other = await asgi_response(handler, "GET", "/thread", headers=HOST)
    assert json.loads(other["body"])["name"].startswith("request")
    assert not any(login.done() for login in logins)  # queued for the one login thread
    release.set()
    answers = await asyncio.wait_for(asyncio.gather(*logins), PROMPTLY)
    assert {json.loads(answer["body"])["name"] for answer in answers} == {"login_0"}


async def test_the_pools_of_their_own_are_the_settings() -> None:
    pools = {pool.name: pool for pool in configured_path_pools()}
    assert pools["login"].paths == {"/accounts/login/", "/admin/login/"}
    assert pools["ops"] == PathPool("ops", 1, frozenset({"/healthz", "/readyz", "/metrics"}))


@pytest.mark.skipif(sys.platform != "linux", reason="a nice value per thread is Linux's")
async def test_a_pools_threads_run_at_its_nice_value_and_the_others_at_the_processes() -> None:
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    lower = min(own + 7, 19)
    pools = [PathPool("login", 1, frozenset({"/own"}), nice=lower)]
    handler = PooledThreadASGIHandler(threads=1, path_pools=pools)
    login = await asgi_response(handler, "GET", "/own", headers=HOST)
    other = await asgi_response(handler, "GET", "/thread", headers=HOST)
    assert json.loads(login["body"])["nice"] == lower
    assert json.loads(other["body"])["nice"] == own
