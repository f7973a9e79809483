"""WebSocket routes. Agent sockets authenticate by bearer header, never by cookie, and face no
Origin check (non-browser clients send none). The people's sockets are the opposite: a
session cookie, and an Origin that must be the site's own — scheme, host and port — or one
of ``CSRF_TRUSTED_ORIGINS`` (``origins.py``): a page on another site, or on another port of
this host, cannot ride the approver's cookie."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from django.urls import URLPattern, path

from approvals.ops.metrics import SocketKind, counted_sockets
from approvals.realtime.consumers import (
    AgentCallConsumer,
    AgentStreamConsumer,
    CallPageConsumer,
    QueueConsumer,
)
from approvals.realtime.origins import SameOriginValidator


def _for_people(app: Any) -> Any:
    return SameOriginValidator(AuthMiddlewareStack(app))


# django-stubs types path()'s view as a Django view; Channels' URLRouter takes ASGI apps.
# Each route's open sockets are counted for /metrics (approvals/ops/metrics.py).
websocket_urlpatterns: list[URLPattern] = [
    path(
        "ws/v1/calls/<uuid:call_id>",
        counted_sockets(SocketKind.AGENT_CALL, AgentCallConsumer.as_asgi()),  # type: ignore[arg-type]
    ),
    path(
        "ws/v1/agent",
        counted_sockets(SocketKind.AGENT_STREAM, AgentStreamConsumer.as_asgi()),  # type: ignore[arg-type]
    ),
    path(
        "ws/v1/queue",
        counted_sockets(SocketKind.QUEUE, _for_people(QueueConsumer.as_asgi())),  # type: ignore[arg-type]
    ),
    path(
        "ws/v1/queue/calls/<uuid:call_id>",
        counted_sockets(SocketKind.CALL_PAGE, _for_people(CallPageConsumer.as_asgi())),  # type: ignore[arg-type]
    ),
]
