"""A path a raw route matches never reaches Django's handler; any other does."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from config.runtime.asgi_types import ASGIApp, Message, Receive, Scope, Send
from config.runtime.raw_routes import RawRoutes

pytestmark = pytest.mark.asyncio


def _app(name: str, served: list[str]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        served.append(name)

    return app


async def _serve(routes: RawRoutes, path: str) -> None:
    async def receive() -> Message:
        return {"type": "http.request"}

    async def send(message: Mapping[str, Any]) -> None:
        pass

    await routes({"type": "http", "path": path}, receive, send)


async def test_a_matching_path_goes_to_its_raw_app_and_the_rest_to_django() -> None:
    served: list[str] = []
    routes = RawRoutes(
        [(re.compile(r"^/wait/[0-9]+$"), _app("wait", served))], django=_app("django", served)
    )
    for path in ("/wait/1", "/wait/x", "/other", "/wait/2"):
        await _serve(routes, path)
    assert served == ["wait", "django", "django", "wait"]
