"""Waking this process's delivery loop after a commit that wrote messages. The loop registers
itself here as it starts (``notifications.delivery``), so that writers of messages wake it
without importing the loop, which writes messages itself (the expiring notices)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

_poke: Callable[[], None] | None = None


def delivery_wake_register(poke: Callable[[], None]) -> None:
    """Have ``delivery_wake`` call ``poke``: the loop just started in this process."""
    global _poke
    _poke = poke


def delivery_wake() -> None:
    """Wake this process's loop, if it runs one (after a commit that wrote messages)."""
    poke = _poke
    if poke is not None:
        with contextlib.suppress(RuntimeError):  # its event loop has closed
            poke()
