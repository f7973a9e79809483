"""The switches back to the stock components (``COUNTERSIGN_STOCK``, config/runtime/README.md).

Pieces that have no stock equivalent (the expiry sweeper, the long-poll's route, the body
limit) have no switch.
"""

from __future__ import annotations

from enum import StrEnum

from django.conf import settings


class Stock(StrEnum):
    HANDLER = "handler"  # Django's ASGIHandler
    SQLITE = "sqlite"  # django.db.backends.sqlite3
    LAYER = "layer"  # Channels' InMemoryChannelLayer, channels_redis's RedisChannelLayer
    PUSH_LOOP = "push_loop"  # async_to_sync for each push
    SQLITE_WRITERS = "sqlite_writers"  # transaction.atomic alone
    CONSUMER_DISPATCH = "consumer_dispatch"  # Channels' AsyncConsumer.dispatch


def uses_stock(piece: Stock) -> bool:
    """Whether ``COUNTERSIGN_STOCK`` switches ``piece`` back to the stock component."""
    return piece in settings.COUNTERSIGN_STOCK
