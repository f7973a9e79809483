"""Django's ASGI handler with each request's synchronous code on a pooled thread.

Django runs the synchronous parts of every request (sync middleware, sync views, the ORM) on
a thread of that request's own, made for it and ended after it (asgiref's
``ThreadSensitiveContext``, which ends it on a second thread). Under load that is two
thread starts and joins a request, and as many runnable threads as requests in flight, all
contending for the GIL (docs/performance.md has the figures). Here a request borrows one of
a fixed number of long-lived single-thread executors for its whole span, so its synchronous
code still runs on one thread, no two requests share a thread at once, and a request that
finds every thread lent waits its turn.

The middleware chain is Django's synchronous one, run whole on that thread. Django's ASGI
handler builds an asynchronous chain, and each of Django's own middleware in it (sessions,
CSRF, authentication, messages, …) crosses to a thread and back for each of its hooks:
about a dozen switches between the event loop and a thread for one request to a synchronous
view, which every view here is (the agent API, the pages, admin). Besides the chain, Django
crosses for the ``request_started`` receivers before it and for the response's close after
the response is sent. Here a request crosses once: the receivers, the chain and, when the
response's content is whole (not streamed), its close, whose ``request_finished`` receivers
(the database connection given back among them) then run before the body is sent rather
than after. A streamed response is closed after it is sent, as Django does. An asynchronous
view still works, called back on the event loop.

Some paths get executors of their own (``PathPool``, ``COUNTERSIGN_PATH_POOLS``): a login
hashes its password (PBKDF2, deliberately slow, releasing the GIL), and the
request threads are few, so a dozen clients failing to log in as fast as they can would
otherwise keep every agent request waiting behind them; health checks and scrapes answer
while the request threads are all busy. They queue for their own pool's threads instead, and
the login threads run at a lower priority (a higher nice value), so that hashing yields the
cores to agents' requests when there are not enough for both.

``COUNTERSIGN_STOCK=handler`` serves with Django's own ``ASGIHandler`` instead
(config/runtime/README.md), which gives every request a thread of its own: logins do not
wait behind others there either, and the pools have no effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse, HttpResponseBase
from django.urls import set_script_prefix


def lower_priority(nice: int) -> None:
    """Give the calling thread the nice value ``nice``, or leave it the higher one it has.
    Linux keeps one per thread (setpriority(2), NOTES), so the process's other threads keep
    theirs; elsewhere the call would name the whole process, and nothing is done."""
    if sys.platform == "linux":
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(nice, os.getpriority(os.PRIO_PROCESS, thread)))


class ExecutorPool:
    """``size`` single-thread executors, each lent to one borrower at a time. Threads start
    on first use, with the nice value ``nice`` when it is not 0."""

    def __init__(self, size: int, *, name: str = "request", nice: int = 0) -> None:
        initializer = functools.partial(lower_priority, nice) if nice else None
        self._idle = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=initializer)
            for _ in range(size)
        ]
        self._waiting: deque[asyncio.Future[ThreadPoolExecutor]] = deque()

    async def borrow(self) -> ThreadPoolExecutor:
        if self._idle:
            return self._idle.pop()
        turn: asyncio.Future[ThreadPoolExecutor] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            return await turn
        except asyncio.CancelledError:
            # Handed an executor just as the borrower was cancelled: pass it on.
            if turn.done() and not turn.cancelled():
                self.give_back(turn.result())
            raise

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done() and not turn.get_loop().is_closed():
                turn.set_result(executor)
                return
        self._idle.append(executor)


class PathPool(NamedTuple):
    """Requests whose path is one of ``paths`` borrow from ``threads`` executors of their
    own, named ``name`` (as their threads are), whose threads run with the nice value
    ``nice``: when the cores are all busy, a higher one yields them to the request threads."""

    name: str
    threads: int
    paths: frozenset[str]
    nice: int = 0


def configured_path_pools() -> list[PathPool]:
    """``COUNTERSIGN_PATH_POOLS``: (name, threads, paths, nice) for each pool."""
    return [
        PathPool(name, threads, frozenset(paths), nice)
        for name, threads, paths, nice in settings.COUNTERSIGN_PATH_POOLS
    ]


class _Made:
    """A request's response as its thread made it, and whether it was closed (which sends
    ``request_finished``). Written only on that thread; the event loop reads ``closed`` only
    to skip a crossing that would find nothing to do, which the thread checks again."""

    def __init__(self) -> None:
        self.response: HttpResponseBase | None = None
        self.closed = False


class PooledThreadASGIHandler(ASGIHandler):
    """``threads`` executors for every request, but those of ``path_pools`` (by default
    ``COUNTERSIGN_PATH_POOLS``), which borrow from their own pool's."""

    def __init__(self, *, threads: int, path_pools: Iterable[PathPool] | None = None) -> None:
        super().__init__()
        self.executors = ExecutorPool(threads)
        self.pools_by_path: dict[str, ExecutorPool] = {}
        for pool in configured_path_pools() if path_pools is None else path_pools:
            executors = ExecutorPool(pool.threads, name=pool.name, nice=pool.nice)
            self.pools_by_path.update(dict.fromkeys(pool.paths, executors))

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        """Django's ``ASGIHandler.handle`` with one crossing to the request's thread (see the
        module's docstring), listening for the client's disconnect meanwhile as Django does.
        However the request ends (a client gone away included), its response is closed
        once, on its thread, or ``request_finished`` sent if it never had one."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        made = _Made()
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(self._respond(scope, body_file, send, made)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass  # the client went away
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not made.closed:
            # A streamed response, once sent, or a request whose client went away.
            # Thread-sensitive, so after whatever the thread is still doing for this request.
            await sync_to_async(self._close, thread_sensitive=True)(made)
        body_file.close()

    async def _respond(self, scope: Any, body_file: Any, send: Any, made: _Made) -> None:
        # Thread-sensitive: on the executor this request borrowed (see __call__).
        response = await sync_to_async(self._response, thread_sensitive=True)(
            scope, body_file, made
        )
        # The client went away while it was sent: ignored, as Django does.
        with contextlib.suppress(asyncio.CancelledError):
            await self.send_response(response, send)

    def _response(self, scope: Any, body_file: Any, made: _Made) -> HttpResponseBase:
        """On the request's thread: what Django's ``handle`` and ``run_get_response`` do
        before sending, and the close of a response that is not streamed."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        response = error_response if request is None else self.get_response(request)
        assert response is not None  # create_request answers an error when it makes no request
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        response._handler_class = self.__class__  # type: ignore[attr-defined]
        made.response = response
        if not response.streaming:
            self._close(made)
        return response

    def _close(self, made: _Made) -> None:
        if made.closed:
            return
        made.closed = True
        if made.response is None:
            signals.request_finished.send(sender=self.__class__)
        else:
            made.response.close()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError("Django serves HTTP only")
        pool = self.pools_by_path.get(scope["path"], self.executors)
        executor = await pool.borrow()
        try:
            # A view still running after its client went away keeps the executor busy;
            # the next borrower's work queues behind it on the same thread.
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            pool.give_back(executor)
