"""WebSocket routes. Agent sockets authenticate by bearer header, never by cookie, and face no
Origin check (non-browser clients send none). The people's sockets are the opposite: a
session cookie, and an Origin that must be one of ``ALLOWED_HOSTS`` (a page on another site
cannot ride the approver's cookie)."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import URLPattern, path

from approvals.consumers import (
    AgentCallConsumer,
    AgentStreamConsumer,
    CallPageConsumer,
    QueueConsumer,
)


def _for_people(app: Any) -> Any:
    return AllowedHostsOriginValidator(AuthMiddlewareStack(app))


# django-stubs types path()'s view as a Django view; Channels' URLRouter takes ASGI apps.
websocket_urlpatterns: list[URLPattern] = [
    path("ws/v1/calls/<uuid:call_id>", AgentCallConsumer.as_asgi()),  # type: ignore[arg-type]
    path("ws/v1/agent", AgentStreamConsumer.as_asgi()),  # type: ignore[arg-type]
    path("ws/v1/queue", _for_people(QueueConsumer.as_asgi())),
    path("ws/v1/queue/calls/<uuid:call_id>", _for_people(CallPageConsumer.as_asgi())),
]
