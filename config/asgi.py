"""The ASGI application: Django for HTTP, Channels for WebSockets, and the long-poll served
on its own so that a waiting agent costs no thread. The pieces are config/runtime/'s."""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Django must be set up before anything imports models.
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from config.runtime.pooled_handler import PooledThreadASGIHandler  # noqa: E402
from config.runtime.stock import Stock, uses_stock  # noqa: E402

django_http = (
    ASGIHandler()
    if uses_stock(Stock.HANDLER)
    else PooledThreadASGIHandler(threads=settings.COUNTERSIGN_REQUEST_THREADS)
)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from approvals.api.longpoll import WAIT_PATH, wait_app  # noqa: E402
from approvals.api.middleware import body_too_large, body_too_slow  # noqa: E402
from approvals.realtime.routing import websocket_urlpatterns  # noqa: E402
from config.runtime.asgi_types import Message, Receive, Scope, Send  # noqa: E402
from config.runtime.body_limit import BodyLimit  # noqa: E402
from config.runtime.raw_routes import RawRoutes  # noqa: E402
from config.runtime.sweeper import ensure_sweeper_started, sweeper_lifespan  # noqa: E402
from notifications.delivery import delivery_stop, ensure_delivery_started  # noqa: E402

# The long-poll outside Django's handler, where a waiter holds no thread.
routes = RawRoutes([(WAIT_PATH, wait_app)], django=django_http)


async def http(scope: Scope, receive: Receive, send: Send) -> None:
    # The server's lifespan start starts the sweep and the notifications' delivery loop; a
    # server that sends no lifespan events starts them with the first request of the process.
    ensure_sweeper_started()
    ensure_delivery_started()
    await routes(scope, receive, send)


async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
    """The sweeper's lifespan, which also starts the delivery loop and drains it at the
    server's shutdown (docs/notifications.md)."""

    async def received() -> Message:
        message = await receive()
        if message["type"] == "lifespan.startup":
            ensure_delivery_started()
        elif message["type"] == "lifespan.shutdown":
            # Bounded by the attempts' deadline: a dribbling receiver cannot hold the stop.
            await delivery_stop()
        return message

    await sweeper_lifespan(scope, received, send)


application = ProtocolTypeRouter(
    {
        "lifespan": lifespan,
        "http": BodyLimit(http, too_large=body_too_large, too_slow=body_too_slow),
        # Channels' stubs want their own pattern subclass; Django's path() patterns work as is.
        "websocket": URLRouter(websocket_urlpatterns),  # type: ignore[arg-type]
    }
)
