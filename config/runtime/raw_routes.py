"""HTTP routes served by raw ASGI apps in front of Django's handler.

Django's handler holds a thread per request for as long as its response takes, whatever the
view: a long-poll parked there costs a thread (docs/performance.md: a waiter holds none).
A path matched here goes to its own app instead and never reaches Django. There is no stock
component to switch back to (config/runtime/README.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from config.runtime.asgi_types import ASGIApp, Receive, Scope, Send


class RawRoutes:
    """A request whose path matches one of ``routes`` goes to that route's app; any other
    to ``django``."""

    def __init__(self, routes: Sequence[tuple[re.Pattern[str], ASGIApp]], *, django: ASGIApp):
        self.routes = tuple(routes)
        self.django = django

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        for pattern, app in self.routes:
            if pattern.match(scope["path"]):
                await app(scope, receive, send)
                return
        await self.django(scope, receive, send)
