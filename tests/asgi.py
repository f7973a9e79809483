"""One HTTP request to an ASGI application in this process, answered and finished."""

from __future__ import annotations

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
