"""Channels' consumer dispatch without a trip to the one thread-sensitive thread per message.

Channels' ``AsyncConsumer.dispatch`` runs ``aclose_old_connections()`` before every message it
hands a handler: ``sync_to_async(close_old_connections)``, thread-sensitive, so on the one
thread that every thread-sensitive call of the process shares. With 300 queue sockets open,
each change cost 300 such trips, and the agent sockets' own reads and pushes queued behind
them. The consumers that use this do every database read in a ``database_sync_to_async`` (or
the pages' executor), which closes its connection itself before and after: the trip closes
nothing.

``COUNTERSIGN_STOCK=consumer_dispatch`` uses Channels' own ``dispatch`` (config/runtime/
README.md).
"""

from __future__ import annotations

from typing import Any

from channels.consumer import AsyncConsumer, get_handler_name

from config.runtime.stock import Stock, uses_stock

NO_HANDLER = "No handler for message type {}"  # Channels' own words


class DispatchWithoutConnectionSweep(AsyncConsumer):
    """An ``AsyncConsumer`` whose messages go straight to their handlers."""

    async def dispatch(self, message: dict[str, Any]) -> None:
        if uses_stock(Stock.CONSUMER_DISPATCH):
            await super().dispatch(message)
            return
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(NO_HANDLER.format(message["type"]))
        await handler(message)
