"""Pushes to the channel layer from synchronous code, on one event loop per process.

channels_redis keeps a connection pool per event loop. ``async_to_sync`` outside the
server's loop (a request thread, a management command, a thread of a test) makes a new loop
for each push, and so a new Redis connection: in a burst, hundreds of them at once, each push
waiting on its own. One long-lived loop keeps one pool (docs/performance.md).

``COUNTERSIGN_STOCK=push_loop`` sends each push through ``async_to_sync`` instead
(config/runtime/README.md).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, InMemoryChannelLayer

from config.runtime.memory_layer import ThrottledInMemoryChannelLayer
from config.runtime.stock import Stock, uses_stock

P = ParamSpec("P")

_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop)
_loop_lock = threading.Lock()


def push_loop() -> asyncio.AbstractEventLoop:
    """This process's one event loop for pushing from synchronous code, on a thread of its
    own, started on first use (and again in a forked child)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="redis-pushes", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def push_from_sync(
    layer: BaseChannelLayer,
    send: Callable[P, Coroutine[Any, Any, None]],
    *args: P.args,
    **kwargs: P.kwargs,
) -> None:
    """Run ``send`` to ``layer``; one writer's pushes keep their order.

    To the in-memory layer's receivers' loop without waiting: the loop starts handed work
    in the order it was handed, and an in-memory send never suspends, so each push is whole
    before the next starts. Not at all while no receiver has joined a group of that layer:
    a group send would reach nobody. Elsewhere, wait until it is done."""
    if uses_stock(Stock.PUSH_LOOP):
        async_to_sync(send)(*args, **kwargs)
    elif isinstance(layer, ThrottledInMemoryChannelLayer):
        loop = layer.receivers_loop
        if loop is None:
            return
        if loop.is_closed():  # its receivers are gone; async_to_sync finds a running loop
            async_to_sync(send)(*args, **kwargs)
        else:
            push = send(*args, **kwargs)
            try:
                loop.call_soon_threadsafe(_start, loop, push)
            except RuntimeError:  # closed meanwhile (the server stopping): a hint lost
                push.close()
    elif isinstance(layer, InMemoryChannelLayer):
        # Channels' own: its queues belong to the server's loop, which async_to_sync finds.
        async_to_sync(send)(*args, **kwargs)
    else:
        asyncio.run_coroutine_threadsafe(send(*args, **kwargs), push_loop()).result()


_handed: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks


def _start(loop: asyncio.AbstractEventLoop, push: Coroutine[Any, Any, None]) -> None:
    task = loop.create_task(push)
    _handed.add(task)
    task.add_done_callback(_handed.discard)
