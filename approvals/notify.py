"""The one place that sends to the channel layer.

Pushes are hints: they are sent after the transaction commits, carry the call's full state,
and whoever misses one rebuilds from the database on (re)connect.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from approvals.models import Call
from approvals.selectors import call_state

QUEUE_GROUP = "queue"
CALL_CHANGED = "call.changed"


def call_group(call_id: object) -> str:
    return f"call.{call_id}"


def agent_group(agent_id: int) -> str:
    return f"agent.{agent_id}"


def _send(groups: list[str], message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        async_to_sync(layer.group_send)(group, message)


def notify_call(call: Call) -> None:
    """After commit, tell everyone watching this call, its agent, or the queue."""
    message = {"type": CALL_CHANGED, "call": call_state(call)}
    groups = [call_group(call.pk), agent_group(call.agent_id), QUEUE_GROUP]
    transaction.on_commit(lambda: _send(groups, message))
