"""How a wait for a decision proceeds, without I/O, so that both clients follow one plan.

The WebSocket comes first: it brings the decision the moment it is made. A refused handshake
(say, a proxy that does not pass WebSockets) means long-polling for the rest of the wait; a
connection that fails or drops means one long-poll now and the socket again after it. Failures
to reach the service in a row back off exponentially up to a cap. After every (re)connect the
service sends the current state first, so a decision made while the client was away is never
lost. A deadline bounds the whole wait with ``TimeoutError``; the call stays pending on the
service.
"""

from __future__ import annotations

import json
import math
import time

import httpx
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidMessage,
    InvalidStatus,
    WebSocketException,
)

from countersign import errors, protocol

# The service's default long-poll; a longer one is refused, a shorter one costs requests.
MAX_POLL_SECONDS = 25
OPEN_TIMEOUT = 10.0
# Closing after the final state is quick; a dead peer must not hold up the deadline for long.
CLOSE_TIMEOUT = 1.0

# Timers can fire a hair early; a wait this close to its deadline is over.
DEADLINE_RESOLUTION = 0.01

# What connecting to or reading from a WebSocket raises (TimeoutError is an OSError).
SOCKET_ERRORS = (OSError, WebSocketException)

_CLOSE_ERRORS: dict[int, tuple[type[errors.CountersignError], str]] = {
    4400: (errors.BadRequest, errors.BAD_REQUEST),
    4401: (errors.Unauthorized, errors.UNAUTHORIZED),
    4403: (errors.Forbidden, errors.FORBIDDEN),
    4404: (errors.NotFound, errors.NOT_FOUND),
}


class SocketRefused(Exception):
    """The WebSocket handshake was refused: long-poll for the rest of this wait."""


class SocketLost(Exception):
    """The WebSocket did not connect, or dropped: long-poll now, try the socket again later."""


class PollFailed(Exception):
    """The long-poll did not reach the service, or a proxy said it is away: pause, retry."""


def socket_failure(error: Exception) -> Exception:
    """What a WebSocket's exception means for the wait: a ``CountersignError`` when the service
    closed the socket on purpose (bad token, disabled agent, not this agent's call), else
    ``SocketRefused`` or ``SocketLost``."""
    if isinstance(error, ConnectionClosed):
        code = error.rcvd.code if error.rcvd is not None else None
        if code in _CLOSE_ERRORS:
            kind, message = _CLOSE_ERRORS[code]
            return kind(message)
        return SocketLost()
    if isinstance(error, InvalidStatus) and error.response.status_code >= 500:
        return SocketLost()  # a proxy whose service is restarting
    if isinstance(error, InvalidHandshake) and not isinstance(error, InvalidMessage):
        return SocketRefused()
    return SocketLost()


def poll_state(response: httpx.Response) -> protocol.CallState:
    """The long-poll's answer: the call state, an error, or ``PollFailed`` to try again."""
    if response.status_code in protocol.RETRY_STATUSES:
        raise PollFailed
    return protocol.state_from(response)


def call_message(raw: str | bytes) -> protocol.CallState | None:
    """The call state in a socket message; None for a message of another kind."""
    try:
        message = json.loads(raw)
    except ValueError:
        raise SocketLost from None
    if not isinstance(message, dict) or message.get("type") != "call":
        return None
    state = message.get("call")
    return state if isinstance(state, dict) else None


class WaitPlan:
    """One wait's deadline, its choice of WebSocket or long-poll, and its run of failures."""

    def __init__(self, deadline: float | None) -> None:
        self.websocket = True
        self._failures = 0
        self._give_up = None if deadline is None else time.monotonic() + deadline

    def time_left(self) -> float | None:
        """Seconds until the deadline (None: no deadline); ``TimeoutError`` once it passed."""
        if self._give_up is None:
            return None
        left = self._give_up - time.monotonic()
        if left <= DEADLINE_RESOLUTION:
            raise TimeoutError(errors.DEADLINE_PASSED)
        return left

    def open_timeout(self) -> float:
        left = self.time_left()
        return OPEN_TIMEOUT if left is None else min(OPEN_TIMEOUT, left)

    def poll(self, http_timeout: float) -> tuple[dict[str, int], float]:
        """The long-poll's query, and how long to wait for its answer. Without a deadline
        within ``MAX_POLL_SECONDS`` the query is empty: the service's default, which also suits
        a service set to a shorter maximum; else the whole seconds up to the deadline."""
        left = self.time_left()
        if left is None or left >= MAX_POLL_SECONDS:
            return {}, MAX_POLL_SECONDS + http_timeout
        seconds = math.ceil(left)
        return {"timeout": seconds}, seconds + http_timeout

    def reached(self) -> None:
        """The service answered: the next failure starts the backoff afresh."""
        self._failures = 0

    def pause(self) -> float:
        """Seconds to sleep after failing to reach the service, never past the deadline."""
        self._failures += 1
        delay = protocol.backoff(self._failures)
        left = self.time_left()
        return delay if left is None else min(delay, left)
