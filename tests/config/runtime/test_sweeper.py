"""Each process's sweep starts once on the running loop, runs ``COUNTERSIGN_SWEEP`` off the
loop every interval, outlives a failing run, and runs at once when a waiter asks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from config.runtime import sweeper
from config.runtime.sweeper import ensure_sweeper_started, expire_due_now
from tests.asgi import PROMPTLY

pytestmark = pytest.mark.asyncio

runs: list[int] = []  # the thread of each run


def counted_sweep() -> None:
    runs.append(threading.get_ident())


def failing_sweep() -> None:
    runs.append(threading.get_ident())
    raise RuntimeError("the database went away")


@pytest.fixture
def sweep(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    runs.clear()
    settings.COUNTERSIGN_SWEEP = f"{__name__}.counted_sweep"
    monkeypatch.setattr(sweeper, "SWEEP_INTERVAL_SECONDS", 0.01)
    monkeypatch.setattr(sweeper, "_task", None)
    yield
    if sweeper._task is not None:
        sweeper._task.cancel()


async def _until_runs(count: int) -> None:
    async with asyncio.timeout(PROMPTLY):
        while len(runs) < count:
            await asyncio.sleep(0.01)


async def test_the_sweep_starts_once_and_runs_off_the_loop_every_interval(sweep: None) -> None:
    ensure_sweeper_started()
    task = sweeper._task
    ensure_sweeper_started()
    assert sweeper._task is task
    await _until_runs(3)
    assert threading.get_ident() not in runs


async def test_a_failing_sweep_is_logged_and_run_again(
    sweep: None, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.COUNTERSIGN_SWEEP = f"{__name__}.failing_sweep"
    ensure_sweeper_started()
    await _until_runs(2)
    assert "expiry sweep failed" in caplog.text


async def test_expire_due_now_sweeps_at_once(sweep: None) -> None:
    await expire_due_now()
    assert len(runs) == 1
