"""The one place that sends to the channel layer.

Pushes are hints: they are sent after the transaction commits, carry the call's full state,
and whoever misses one rebuilds from the database on (re)connect.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from approvals.models import Approval, Call
from approvals.selectors import call_state

logger = logging.getLogger(__name__)

QUEUE_GROUP = "queue"
CALL_CHANGED = "call.changed"


def call_group(call_id: object) -> str:
    return f"call.{call_id}"


def agent_group(agent_id: int) -> str:
    return f"agent.{agent_id}"


async def _send(layer: BaseChannelLayer, groups: list[str], message: dict[str, Any]) -> None:
    """Runs after the commit: the write stands whatever happens here, so a failing channel
    layer is logged and the request goes on to answer with what was stored. Whoever misses
    the push reads the database (waiters poll it, sockets get the state on reconnect)."""
    for group in groups:
        try:
            await layer.group_send(group, message)
        except Exception:
            logger.warning(
                "push to %s failed; waiters fall back to the database", group, exc_info=True
            )


_redis_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop)
_redis_loop_lock = threading.Lock()


def _redis_push_loop() -> asyncio.AbstractEventLoop:
    """This process's one event loop for pushing to Redis from synchronous code.

    channels_redis keeps a connection pool per event loop. ``async_to_sync`` outside the
    server's loop (a management command, a thread of a test) makes a new loop for each push,
    and so a new Redis connection: in a burst, hundreds of them at once, each push waiting on
    its own. One long-lived loop keeps one pool.
    """
    global _redis_loop
    with _redis_loop_lock:
        if _redis_loop is None or _redis_loop[0] != os.getpid():  # none yet, or forked
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="redis-pushes", daemon=True).start()
            _redis_loop = (os.getpid(), loop)
        return _redis_loop[1]


def _deliver(groups: list[str], message: dict[str, Any]) -> None:
    """Send, and wait until sent (so one writer's pushes keep their order)."""
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):
        # Its queues belong to the server's loop: go there (async_to_sync finds it).
        async_to_sync(_send)(layer, groups, message)
    else:
        send = _send(layer, groups, message)
        asyncio.run_coroutine_threadsafe(send, _redis_push_loop()).result()


def notify_call(call: Call, *, approvals: Iterable[Approval] | None = None) -> None:
    """After commit, tell everyone watching this call, its agent, or the queue. Pass the
    call's ``approvals`` (with their users) when they are at hand, to save reading them."""
    message = {"type": CALL_CHANGED, "call": call_state(call, approvals=approvals)}
    groups = [call_group(call.pk), agent_group(call.agent_id), QUEUE_GROUP]
    # One hop to an event loop per push, not one per group.
    transaction.on_commit(lambda: _deliver(groups, message))
