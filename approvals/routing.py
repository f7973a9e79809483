"""WebSocket routes (agent sockets authenticate by bearer header, never by cookie)."""

from __future__ import annotations

from django.urls import URLPattern, path

from approvals.consumers import AgentCallConsumer, AgentStreamConsumer

# django-stubs types path()'s view as a Django view; Channels' URLRouter takes ASGI apps.
websocket_urlpatterns: list[URLPattern] = [
    path("ws/v1/calls/<uuid:call_id>", AgentCallConsumer.as_asgi()),  # type: ignore[arg-type]
    path("ws/v1/agent", AgentStreamConsumer.as_asgi()),  # type: ignore[arg-type]
]
