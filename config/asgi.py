"""The ASGI application: Django for HTTP, Channels for WebSockets."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Django must be set up before anything imports models.
django_http = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from approvals.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_http,
        # Channels' stubs want their own pattern subclass; Django's path() patterns work as is.
        "websocket": URLRouter(websocket_urlpatterns),  # type: ignore[arg-type]
    }
)
