"""The embedded default's channel layer still delivers and still expires, but scans its
channels at most once a second."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import InMemoryChannelLayer

from config.runtime.memory_layer import ThrottledInMemoryChannelLayer

pytestmark = pytest.mark.asyncio


async def test_a_group_send_reaches_every_member() -> None:
    layer = ThrottledInMemoryChannelLayer()
    channels = [await layer.new_channel() for _ in range(3)]
    for channel in channels:
        await layer.group_add("call.1", channel)
    await layer.group_send("call.1", {"type": "call.changed", "n": 1})
    assert [(await layer.receive(channel))["n"] for channel in channels] == [1, 1, 1]


async def test_many_sends_and_receives_within_a_second_scan_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scans: list[None] = []
    full_scan = InMemoryChannelLayer._clean_expired  # type: ignore[attr-defined]

    def counted(self: InMemoryChannelLayer) -> None:
        scans.append(None)
        full_scan(self)

    monkeypatch.setattr(InMemoryChannelLayer, "_clean_expired", counted)
    layer = ThrottledInMemoryChannelLayer()
    channel = await layer.new_channel()
    await layer.group_add("queue", channel)
    for n in range(200):
        await layer.group_send("queue", {"type": "call.changed", "n": n})
        assert (await layer.receive(channel))["n"] == n
    assert len(scans) == 1


async def test_an_expired_message_is_still_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ThrottledInMemoryChannelLayer, "CLEAN_INTERVAL", 0.05)
    layer = ThrottledInMemoryChannelLayer(expiry=0.1)
    stale, fresh = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("call.2", stale)
    await layer.send(stale, {"type": "call.changed", "n": "old"})
    await asyncio.sleep(0.2)  # past the message's expiry and the interval
    await layer.send(fresh, {"type": "call.changed", "n": "new"})  # runs the clean-up
    assert (await layer.receive(fresh))["n"] == "new"
    assert stale not in layer.channels
    # An expired message also ends its channel's group memberships, as before.
    assert stale not in layer.groups.get("call.2", {})
