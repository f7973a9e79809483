"""``approvals.fairness``: one run of a view's render serves every socket asking for it, as
long as the run started after the change each of them answers; the caps count per owner."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from approvals import fairness

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
    since = fairness.now()
    asks = [asyncio.ensure_future(fairness.shared("view", work, since=since)) for _ in range(5)]
    await asyncio.sleep(0)
    work.release.set()
    assert await asyncio.gather(*asks) == [1] * 5


async def test_an_ask_for_a_change_newer_than_the_run_under_way_waits_for_the_next() -> None:
    work = _Work()
    first = asyncio.ensure_future(fairness.shared("view", work, since=fairness.now()))
    await asyncio.sleep(0.01)  # the first run is under way
    later = [
        asyncio.ensure_future(fairness.shared("view", work, since=fairness.now())) for _ in range(3)
    ]
    await asyncio.sleep(0.01)
    work.release.set()
    assert await first == 1
    assert await asyncio.gather(*later) == [2, 2, 2]  # one more run, shared
    assert work.runs == 2


async def test_a_run_that_started_after_the_change_serves_a_late_ask_too() -> None:
    work = _Work()
    work.release.set()
    changed = fairness.now()
    assert await fairness.shared("view", work, since=changed) == 1
    # Another socket of the view asks only now, for the same change: the done run will do.
    assert await fairness.shared("view", work, since=changed) == 1
    assert await fairness.shared("other view", work, since=changed) == 2
    assert await fairness.shared("view", work, since=fairness.now()) == 3


async def test_a_failure_reaches_those_who_asked_and_is_not_served_again() -> None:
    calls = 0

    async def failing() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the database went away")
        return calls

    since = fairness.now()
    with pytest.raises(RuntimeError, match="went away"):
        await fairness.shared("view", failing, since=since)
    assert await fairness.shared("view", failing, since=since) == 2


async def test_the_caps_count_per_owner(settings: Any) -> None:
    settings.COUNTERSIGN_MAX_SOCKETS_PER_USER = 2
    assert fairness.person_socket_take(1)
    assert fairness.person_socket_take(1)
    assert not fairness.person_socket_take(1)
    assert fairness.person_socket_take(2)
    fairness.person_socket_give_back(1)
    assert fairness.person_socket_take(1)
