"""A socket's messages go straight to their handler: no trip to the thread-sensitive thread
per message (config/runtime/README.md, ``consumer_dispatch.py``)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from config.runtime.consumer_dispatch import NO_HANDLER, DispatchWithoutConnectionSweep
from config.runtime.stock import Stock

pytestmark = pytest.mark.asyncio


class _Listener(DispatchWithoutConnectionSweep):
    def __init__(self) -> None:
        super().__init__()
        self.heard: list[dict[str, Any]] = []

    async def call_changed(self, message: dict[str, Any]) -> None:
        self.heard.append(message)


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each run of Channels' ``aclose_old_connections``."""
    made: list[int] = []

    async def counted() -> None:
        made.append(1)

    monkeypatch.setattr("channels.consumer.aclose_old_connections", counted)
    return made


async def test_a_message_reaches_its_handler_without_closing_connections(
    trips: list[int], settings: Any
) -> None:
    settings.COUNTERSIGN_STOCK = frozenset()
    listener = _Listener()
    await listener.dispatch({"type": "call.changed", "call": {}})
    assert listener.heard == [{"type": "call.changed", "call": {}}]
    assert trips == []


async def test_a_message_without_a_handler_is_refused(trips: list[int]) -> None:
    with pytest.raises(ValueError, match=re.escape(NO_HANDLER.format("nothing.here"))):
        await _Listener().dispatch({"type": "nothing.here"})


async def test_stock_dispatch_closes_connections_first(trips: list[int], settings: Any) -> None:
    settings.COUNTERSIGN_STOCK = frozenset({Stock.CONSUMER_DISPATCH})
    listener = _Listener()
    await listener.dispatch({"type": "call.changed", "call": {}})
    assert len(listener.heard) == 1
    assert trips == [1]
