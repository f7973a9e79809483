"""One HTTP request to an ASGI application in this process, answered and finished."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from channels.testing import HttpCommunicator

# How long a test waits for an answer or message that should come at once. Generous on
# purpose: it costs nothing when the message comes, and a loaded CI machine (two cores, two
# test processes' worth of PostgreSQL) can stall a first render past a second.
PROMPTLY = 10.0


async def finished(communicator: HttpCommunicator, timeout: float) -> dict[str, Any]:
    """The response, once the application has returned.

    Django gives the request's database connection back only after the response is sent
    (``request_finished``). A communicator dropped as soon as its response arrives cancels
    the application before that, and on PostgreSQL the connection stays checked out of the
    process's pool for good: enough such tests exhausted the pool for the rest of the run.
    """
    response = await communicator.get_response(timeout=timeout)
    await communicator.wait(timeout=timeout)
    return dict(response)


def http_scope(
    method: str, path: str, headers: list[tuple[bytes, bytes]], *, query_string: bytes = b""
) -> dict[str, Any]:
    """The ASGI scope of one HTTP request over loopback, for an application called by hand."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }


async def asgi_response(
    application: Any,
    method: str,
    path: str,
    *,
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    timeout: float = PROMPTLY,
) -> dict[str, Any]:
    communicator = HttpCommunicator(application, method, path, body=body, headers=headers)
    return await finished(communicator, timeout)


async def chunked_request(
    application: Any,
    scope: dict[str, Any],
    chunks: list[bytes],
    *,
    timeout: float = PROMPTLY,
) -> tuple[list[dict[str, Any]], int]:
    """Call ``application`` with a ``receive`` that yields the body in these
    ``http.request`` messages (``more_body`` on all but the last) and then waits for ever:
    the client stays connected. What the application sent, and how many body messages it
    read."""
    messages = [
        {"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
        for index, chunk in enumerate(chunks)
    ]
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        if messages:
            read += 1
            return messages.pop(0)
        await asyncio.Event().wait()  # never set: no disconnect
        raise AssertionError("unreachable")

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(dict(message))

    await asyncio.wait_for(application(scope, receive, send), timeout=timeout)
    return sent, read
