"""Each server process's expiry sweep: ``COUNTERSIGN_SWEEP`` run once a second.

The sweep starts with the server's ASGI ``lifespan`` startup (``sweeper_lifespan``), and, for
a server that sends no lifespan events, with the first request or socket of each process
(``ensure_sweeper_started`` is called there too, and starts it once). Every worker runs
one, so what it runs must be safe to run on several at once (approvals' expires each call by
one conditional ``UPDATE``). There is no stock component to switch back to
(config/runtime/README.md).
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.utils.module_loading import import_string

from config.runtime.asgi_types import Receive, Scope, Send

SWEEP_INTERVAL_SECONDS = 1.0

logger = logging.getLogger(__name__)
_task: asyncio.Task[None] | None = None


def _sweep_once() -> None:
    try:
        import_string(settings.COUNTERSIGN_SWEEP)()
    finally:
        close_old_connections()


async def _sweep_forever() -> None:
    while True:
        try:
            await sync_to_async(_sweep_once, thread_sensitive=False)()
        except Exception:
            # A database hiccup must not stop expiry for good: log it and try again.
            logger.exception("expiry sweep failed")
        await asyncio.sleep(SWEEP_INTERVAL_SECONDS)


def ensure_sweeper_started() -> None:
    """Start this process's sweep on the running event loop, once."""
    global _task
    loop = asyncio.get_running_loop()
    if _task is None or _task.done() or _task.get_loop() is not loop:
        _task = loop.create_task(_sweep_forever())


async def expire_due_now() -> None:
    """Sweep at once (a waiter whose call reached its deadline calls this)."""
    await sync_to_async(_sweep_once, thread_sensitive=False)()


async def sweeper_lifespan(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI ``lifespan`` protocol: start the sweep with the server, nothing to stop (the
    process's end ends it)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            ensure_sweeper_started()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
