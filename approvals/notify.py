"""The one place that sends to the channel layer.

Pushes are hints: they are sent after the transaction commits, carry the call's full state,
and whoever misses one rebuilds from the database on (re)connect.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer
from django.db import transaction

from approvals.models import Approval, Call
from approvals.selectors.calls import call_state
from config.runtime.push_loop import push_from_sync

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


def _deliver(groups: list[str], message: dict[str, Any]) -> None:
    """Send, and wait until sent (so one writer's pushes keep their order)."""
    layer = get_channel_layer()
    if layer is None:
        return
    push_from_sync(layer, _send, layer, groups, message)


def notify_call(call: Call, *, approvals: Iterable[Approval] | None = None) -> None:
    """After commit, tell everyone watching this call, its agent, or the queue. Pass the
    call's ``approvals`` (with their users) when they are at hand, to save reading them."""
    message = {"type": CALL_CHANGED, "call": call_state(call, approvals=approvals)}
    groups = [call_group(call.pk), agent_group(call.agent_id), QUEUE_GROUP]
    # One hop to an event loop per push, not one per group.
    transaction.on_commit(lambda: _deliver(groups, message))
