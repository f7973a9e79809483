"""How a wait for a decision proceeds, without I/O, so that both clients follow one plan.

The WebSocket comes first: it brings the decision the moment it is made. A refused handshake
(say, a proxy that does not pass WebSockets) means long-polling for the rest of the wait; a
connection that fails or drops means one long-poll now and the socket again after it. Failures
to reach the service in a row back off exponentially up to a cap. After every (re)connect the
service sends the current state first, so a decision made while the client was away is never
lost. A deadline bounds the whole wait by the wall clock, whatever the service does (one that
dribbles its answers included): past it the client stops waiting, cancels the call within
``WITHDRAW_TIMEOUT`` and raises ``TimedOut`` (``gave_up`` reads what the cancel answered). A
service lost for longer than the client's ``reconnect_for`` ends the wait with
``ServiceUnavailable``. What a wait says as it begins, and after it withdrew an interrupted
call, is written here too.
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

from countersign import bounded, errors, protocol

# The service's default long-poll; a longer one is refused, a shorter one costs requests.
MAX_POLL_SECONDS = 25
OPEN_TIMEOUT = 10.0
# Closing after the final state is quick; a dead peer must not hold up the deadline for long.
CLOSE_TIMEOUT = 1.0

# Timers can fire a hair early; a wait this close to its deadline is over.
DEADLINE_RESOLUTION = 0.01

CANCELLED = "cancelled"

# A wait that ends without a decision (its deadline, Ctrl-C, a cancelled task) withdraws its
# call within this long, or not: a wait ends by its deadline plus this, whatever the service does.
WITHDRAW_TIMEOUT = 5.0

# Said once as a wait begins, so that a first run does not look hung.
HELD = "Call {call_id} ({tool}) is held for a person at {gates}{why}. Approve or deny it at {page}"
HELD_WHY = ": {reasons}"
HELD_UNKNOWN = "Waiting for a person to decide call {call_id}. Approve or deny it at {page}"
DEFAULT_GATE = "default"
WITHDRAWN = "Withdrew call {call_id}: its wait was interrupted, so no one can approve it now."
FINAL_ALREADY = "The wait for call {call_id} was interrupted once the call was final already."
NOT_WITHDRAWN = (
    "The wait for call {call_id} was interrupted, but the call could not be withdrawn "
    "({detail}): it may still be decided."
)

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


class DeadlineReached(Exception):
    """The wait's deadline (``seconds`` after it began) passed. Not an ``OSError``, so that no
    socket handler takes it for a lost connection: it ends the wait wherever it is raised."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


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
    """One wait's deadline, its choice of WebSocket or long-poll, and its run of failures.

    ``reconnect_for`` (seconds, None for no limit) is how long the service may stay out of
    reach, counted from the last time it answered, before the wait gives up on it."""

    def __init__(self, deadline: float | None, *, reconnect_for: float | None = None) -> None:
        self.websocket = True
        self._failures = 0
        self._deadline = deadline
        self._started = time.monotonic()
        self._reconnect_for = reconnect_for
        self._last_reached = self._started  # the submit (or the caller) just reached it
        self._abandoned = False

    def time_left(self) -> float | None:
        """Seconds until the deadline (None: no deadline); ``DeadlineReached`` once it passed,
        or once the wait was abandoned."""
        if self._abandoned:
            raise self.overran()
        if self._deadline is None:
            return None
        left = self._deadline - (time.monotonic() - self._started)
        if left <= DEADLINE_RESOLUTION:
            raise self.overran()
        return left

    def overran(self) -> DeadlineReached:
        """What ends a wait past its deadline."""
        return DeadlineReached(self._deadline or 0.0)

    def abandon(self) -> None:
        """The waiter stopped waiting (its deadline passed while a request was held, or it was
        interrupted): whatever still runs this plan ends at its next look at the time."""
        self._abandoned = True

    def open_timeout(self, http_timeout: float) -> float:
        """How long a WebSocket handshake may take: a request's time, and never past the
        deadline."""
        left = self.time_left()
        limit = min(OPEN_TIMEOUT, http_timeout)
        return limit if left is None else min(limit, left)

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
        self._last_reached = time.monotonic()

    def pause(self) -> float:
        """Seconds to sleep after failing to reach the service, never past the deadline;
        ``ServiceUnavailable`` once it has been out of reach for ``reconnect_for``."""
        lost = time.monotonic() - self._last_reached
        if self._reconnect_for is not None and lost >= self._reconnect_for:
            raise protocol.unavailable(
                errors.LOST_WHILE_WAITING.format(seconds=self._reconnect_for)
            )
        self._failures += 1
        delay = protocol.backoff(self._failures)
        left = self.time_left()
        return delay if left is None else min(delay, left)


def gave_up(state: protocol.CallState, *, seconds: float) -> protocol.CallState:
    """What a wait that reached its deadline ends in, given the call's state once the client
    cancelled it: ``TimedOut`` if it is cancelled; else the call was decided at the last moment,
    and that final state is the answer (an approval then stands: its ledgers are charged, and
    the tool may run)."""
    if state["status"] == CANCELLED:
        message = errors.DEADLINE_CANCELLED.format(seconds=seconds)
        raise errors.TimedOut(message, call_id=protocol.call_id(state), cancelled=True)
    return state


def not_cancelled(
    call: protocol.CallState | str, *, seconds: float, error: Exception
) -> errors.TimedOut:
    """The ``TimedOut`` of a wait whose cancel at the deadline did not go through (``error``:
    a ``NotApproved``, or ``bounded.NoAnswer``): the call may still be decided."""
    message = errors.DEADLINE_NOT_CANCELLED.format(seconds=seconds, detail=failure_detail(error))
    return errors.TimedOut(message, call_id=protocol.call_id(call), cancelled=False)


def failure_detail(error: Exception) -> str:
    """Why a cancel did not go through, in a few words that never repeat the service's text:
    its error code, the error's kind, or that it did not answer in time."""
    if isinstance(error, bounded.NoAnswer):
        return str(error)
    return getattr(error, "code", "") or type(error).__name__


def held_notice(call: protocol.CallState | str, *, page: str) -> str:
    """What a wait says as it begins: the call, where it is held and why (its reasons), and
    its page. A wait given only an id knows none of that but the page."""
    if isinstance(call, str):
        return HELD_UNKNOWN.format(call_id=call, page=page)
    names = [gate or DEFAULT_GATE for gate in call.get("gates") or [""]]
    gates = ("gate " if len(names) == 1 else "gates ") + ", ".join(names)
    reasons = "; ".join(_reason_text(reason) for reason in call.get("reasons") or [])
    why = HELD_WHY.format(reasons=reasons) if reasons else ""
    return HELD.format(
        call_id=protocol.call_id(call), tool=call.get("tool", ""), gates=gates, why=why, page=page
    )


def _reason_text(reason: dict[str, object]) -> str:
    rule, message = reason.get("rule"), reason.get("message", "")
    return f"{rule}: {message}" if rule else str(message)


def withdrawn_notice(call: protocol.CallState | str, error: Exception | None) -> str:
    """What an interrupted wait says once it tried to withdraw its call (``error``: why the
    cancel did not go through, if it did not)."""
    call_id = protocol.call_id(call)
    if error is None:
        return WITHDRAWN.format(call_id=call_id)
    if isinstance(error, errors.Conflict):  # decided in the meantime
        return FINAL_ALREADY.format(call_id=call_id)
    return NOT_WITHDRAWN.format(call_id=call_id, detail=failure_detail(error))
