"""``within``: a call's result or its own error when it ends in time; ``NoAnswer`` at the bound
while the call is still held by a peer that dribbles; and a signal still reaches the caller."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import pytest

from countersign import bounded

SLACK = 0.5  # a thread's start and a timer's wake-up, not a measure


def test_a_call_that_ends_in_time_gives_its_result() -> None:
    assert bounded.within(5, lambda: "answered") == "answered"


def test_a_call_that_fails_in_time_raises_its_own_error() -> None:
    def fail() -> None:
        raise TimeoutError("the call's own")  # not to be taken for the bound

    with pytest.raises(TimeoutError, match="the call's own"):
        bounded.within(5, fail)


@contextmanager
def dribbling_peer(pause: float) -> Iterator[socket.socket]:
    """A connected socket whose peer sends a byte every ``pause`` seconds until closed."""
    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def dribble() -> None:
        while not stop.wait(pause):
            try:
                theirs.sendall(b"y")
            except OSError:
                return

    threading.Thread(target=dribble, daemon=True).start()
    try:
        yield ours
    finally:
        stop.set()
        theirs.close()
        ours.close()


def read_all(conn: socket.socket, size: int) -> bytes:
    """Each read is well within its timeout; the whole read is not."""
    conn.settimeout(1.0)
    got = b""
    while len(got) < size:
        got += conn.recv(size - len(got))
    return got


def test_a_call_held_by_a_dribbling_peer_is_given_up_at_the_bound() -> None:
    with dribbling_peer(pause=0.1) as conn:
        began = time.monotonic()
        with pytest.raises(bounded.NoAnswer) as raised:
            bounded.within(0.5, lambda: read_all(conn, 1000))  # would take 100 s
        took = time.monotonic() - began
    assert 0.5 <= took < 0.5 + SLACK
    assert str(raised.value) == "no answer within 0.5 seconds"


class Interrupted(Exception):
    pass


def test_a_signal_interrupts_the_caller_while_it_waits() -> None:
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    began = time.monotonic()
    try:
        with pytest.raises(Interrupted), dribbling_peer(pause=0.1) as conn:
            bounded.within(10, lambda: read_all(conn, 1000))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - began < 0.2 + SLACK
