"""The embedded default's channel layer: Channels' in-memory one, scanning for expired
entries at most once a second, and knowing the event loop its receivers are on (where
``push_loop.push_from_sync`` hands synchronous writers' pushes), if any.

``COUNTERSIGN_STOCK=layer`` uses Channels' ``InMemoryChannelLayer`` instead
(config/runtime/README.md).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from channels.layers import InMemoryChannelLayer


class ThrottledInMemoryChannelLayer(InMemoryChannelLayer):
    """Channels' in-memory layer, dropping expired messages and group memberships at most
    once a second instead of on every group send and every receive.

    Each of those scans every channel and every group member, so with thousands of agents
    waiting every push walked all of them. An expired message may now live up to a second
    past its 60 s, and a membership a second past its day.
    """

    CLEAN_INTERVAL = 1.0  # seconds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._next_clean = 0.0
        # The loop of the latest receiver to join a group, where the receivers wait on their
        # queues; None: nobody has joined one, so a group send has nobody to reach.
        self.receivers_loop: asyncio.AbstractEventLoop | None = None

    async def group_add(self, group: str, channel: str) -> None:
        self.receivers_loop = asyncio.get_running_loop()
        await super().group_add(group, channel)

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now < self._next_clean:
            return
        self._next_clean = now + self.CLEAN_INTERVAL
        super()._clean_expired()  # type: ignore[misc]  # private: not in the stubs
