"""The ASGI application: Django for HTTP, Channels for WebSockets, and the long-poll served
on its own so that a waiting agent costs no thread."""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Django must be set up before anything imports models.
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402

from config.handler import PooledThreadASGIHandler  # noqa: E402

django_http = PooledThreadASGIHandler(threads=settings.COUNTERSIGN_REQUEST_THREADS)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from approvals.longpoll import WAIT_PATH, wait_app  # noqa: E402
from approvals.middleware import BodyLimit, Receive, Scope, Send  # noqa: E402
from approvals.routing import websocket_urlpatterns  # noqa: E402
from approvals.sweeper import ensure_sweeper_started  # noqa: E402


async def http(scope: Scope, receive: Receive, send: Send) -> None:
    # daphne sends no lifespan events: the first request of the process starts the sweep.
    ensure_sweeper_started()
    if WAIT_PATH.match(scope["path"]):
        await wait_app(scope, receive, send)
    else:
        await django_http(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": BodyLimit(http),
        # Channels' stubs want their own pattern subclass; Django's path() patterns work as is.
        "websocket": URLRouter(websocket_urlpatterns),  # type: ignore[arg-type]
    }
)
