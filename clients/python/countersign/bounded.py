"""A wall-clock bound on a blocking call, for the waits that must end by their deadline.

httpx's timeouts bound each read and write, not a whole request: a service that answers a
byte at a time, each byte well within the read timeout, holds a request — and the wait around
it — for as long as it likes. ``within`` runs the call on a thread of its own and stops
waiting for it at the bound. The thread left behind ends when its call does (its own timeouts
end it once the service goes quiet); it is a daemon, so no process waits for it to exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

T = TypeVar("T")

NO_ANSWER = "no answer within {seconds:g} seconds"


class NoAnswer(Exception):
    """The call had not returned ``seconds`` after it began: the service is silent, or
    dribbling its answer. It may still be running, on the thread it was left on."""

    def __init__(self, seconds: float) -> None:
        super().__init__(NO_ANSWER.format(seconds=seconds))
        self.seconds = seconds


def within(seconds: float, call: Callable[[], T]) -> T:
    """``call()``'s result, or what it raised, if it ends within ``seconds``; else
    ``NoAnswer``. A signal (Ctrl-C) still interrupts the caller while it waits."""
    outcome: futures.Future[T] = futures.Future()

    def run() -> None:
        outcome.set_running_or_notify_cancel()
        try:
            outcome.set_result(call())
        except BaseException as error:  # handed to the caller, whatever it is
            outcome.set_exception(error)

    threading.Thread(target=run, name="countersign-bounded", daemon=True).start()
    finished, _ = futures.wait([outcome], timeout=max(seconds, 0.0))
    if not finished:
        raise NoAnswer(seconds)
    return outcome.result()
