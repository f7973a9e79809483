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
view, which every view here is (the agent API, the pages, admin). Here a request crosses once
for the whole chain. An asynchronous view still works, called back on the event loop.

``COUNTERSIGN_STOCK=handler`` serves with Django's own ``ASGIHandler`` instead
(config/runtime/README.md).
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase


class ExecutorPool:
    """``size`` single-thread executors, each lent to one borrower at a time. Threads start
    on first use."""

    def __init__(self, size: int) -> None:
        self._idle = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="request") for _ in range(size)
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


class PooledThreadASGIHandler(ASGIHandler):
    def __init__(self, *, threads: int) -> None:
        super().__init__()
        self.executors = ExecutorPool(threads)

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        # Thread-sensitive: on the executor this request borrowed (see __call__).
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError("Django serves HTTP only")
        executor = await self.executors.borrow()
        try:
            # A view still running after its client went away keeps the executor busy;
            # the next borrower's work queues behind it on the same thread.
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.executors.give_back(executor)
