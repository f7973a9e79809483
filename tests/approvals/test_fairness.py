"""``approvals.realtime.hub``: one run of a view's render serves every socket asking for it, as
long as the run started after the change each of them answers; the caps count per owner."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from approvals.realtime import hub

pytestmark = pytest.mark.asyncio


class _Work:
    """A render that takes until released, counting its runs."""

    def __init__(self) -> None:
        self.runs = 0
        self.release = asyncio.Event()

    async def __call__(self) -> int:
        self.runs += 1
        run = self.runs
        await self.release.wait()
        return run


async def test_asks_made_before_a_run_starts_share_it() -> None:
    work = _Work()
    since = hub.now()
    asks = [asyncio.ensure_future(hub.shared("view", work, since=since)) for _ in range(5)]
    await asyncio.sleep(0)
    work.release.set()
    assert await asyncio.gather(*asks) == [1] * 5


async def test_an_ask_for_a_change_newer_than_the_run_under_way_waits_for_the_next() -> None:
    work = _Work()
    first = asyncio.ensure_future(hub.shared("view", work, since=hub.now()))
    await asyncio.sleep(0.01)  # the first run is under way
    later = [asyncio.ensure_future(hub.shared("view", work, since=hub.now())) for _ in range(3)]
    await asyncio.sleep(0.01)
    work.release.set()
    assert await first == 1
    assert await asyncio.gather(*later) == [2, 2, 2]  # one more run, shared
    assert work.runs == 2


async def test_a_run_that_started_after_the_change_serves_a_late_ask_too() -> None:
    work = _Work()
    work.release.set()
    changed = hub.now()
    assert await hub.shared("view", work, since=changed) == 1
    # Another socket of the view asks only now, for the same change: the done run will do.
    assert await hub.shared("view", work, since=changed) == 1
    assert await hub.shared("other view", work, since=changed) == 2
    assert await hub.shared("view", work, since=hub.now()) == 3


async def test_a_failure_reaches_those_who_asked_and_is_not_served_again() -> None:
    calls = 0

    async def failing() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the database went away")
        return calls

    since = hub.now()
    with pytest.raises(RuntimeError, match="went away"):
        await hub.shared("view", failing, since=since)
    assert await hub.shared("view", failing, since=since) == 2


async def test_the_caps_count_per_owner(settings: Any) -> None:
    settings.COUNTERSIGN_MAX_SOCKETS_PER_USER = 2
    assert hub.person_socket_take(1)
    assert hub.person_socket_take(1)
    assert not hub.person_socket_take(1)
    assert hub.person_socket_take(2)
    hub.person_socket_give_back(1)
    assert hub.person_socket_take(1)


class _Socket:
    """A page socket that notes its pushes, and the turn of the loop after each."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    async def page_push(self, *, since: float) -> None:
        self.seen.append(f"push {self.name}")
        asyncio.get_running_loop().call_soon(self.seen.append, f"turn after {self.name}")


def _change(status: str = "pending") -> dict[str, Any]:
    return {"type": "call.changed", "call": {"status": status}}


def _pending(call: dict[str, Any]) -> bool:
    return bool(call["status"] == "pending")


async def _settled(seen: list[str], count: int) -> None:
    for _ in range(200):
        if len(seen) >= count:
            return
        await asyncio.sleep(0.005)


async def test_a_views_sockets_are_pushed_one_at_a_time_with_a_turn_of_the_loop_between() -> None:
    """One task pushes to them all: an agent's push waits for one page push, never for the
    steps of 300 sockets made ready at once."""
    seen: list[str] = []
    sockets = [_Socket(name, seen) for name in "abc"]
    for socket in sockets:
        await hub.page_feed_join("view", socket, concerns=_pending)
    hub.page_hub_tell(_change())
    await _settled(seen, 6)
    assert seen == ["push a", "turn after a", "push b", "turn after b", "push c", "turn after c"]
    for socket in sockets:
        hub.page_feed_leave("view", socket)


async def test_changes_in_a_burst_are_folded_and_what_does_not_concern_the_view_is_not_pushed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hub, "PAGE_PUSH_INTERVAL", 0.05)
    seen: list[str] = []
    kept, leaving = _Socket("kept", seen), _Socket("leaving", seen)
    await hub.page_feed_join("view", kept, concerns=_pending)
    await hub.page_feed_join("view", leaving, concerns=_pending)
    hub.page_hub_tell(_change("allowed"))
    await asyncio.sleep(0.1)
    assert seen == []
    hub.page_hub_tell(_change())
    await _settled(seen, 4)
    hub.page_feed_leave("view", leaving)
    for _ in range(3):  # within the interval of the last push: one more push, at its end
        hub.page_hub_tell(_change())
    await asyncio.sleep(0.15)
    assert [line for line in seen if line.startswith("push")] == [
        "push kept",
        "push leaving",
        "push kept",
    ]
    hub.page_feed_leave("view", kept)


async def test_a_socket_that_leaves_while_its_view_joins_leaves_nothing_behind() -> None:
    """The first socket of a view waits for the process's hub to join the queue group; if it
    disconnects meanwhile, neither it nor its view's feed hears of later changes."""
    seen: list[str] = []
    leaving = _Socket("leaving", seen)
    pages = hub._state().pages
    async with pages._joining:  # the hub's join is under way
        joining = asyncio.ensure_future(hub.page_feed_join("view", leaving, concerns=_pending))
        await asyncio.sleep(0.01)
        hub.page_feed_leave("view", leaving)
    await joining
    assert pages.listeners == set()
    hub.page_hub_tell(_change())
    await asyncio.sleep(0.05)
    assert seen == []
