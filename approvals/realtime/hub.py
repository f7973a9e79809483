"""Fair sockets (docs/reliability.md, "Fair sockets"): how many sockets one person or one agent
may hold open, and page pushes rendered once per view, on threads of their own.

- **Caps.** ``COUNTERSIGN_MAX_SOCKETS_PER_USER`` browser sockets per person and
  ``COUNTERSIGN_MAX_SOCKETS_PER_AGENT`` sockets per agent, counted in each server process: one
  more is closed with ``4429``. Counting across workers would cost a Redis round trip on every
  connect and disconnect, and a count left behind by a killed worker would lock people out;
  per process, the bound of a deployment is the cap times its workers.
- **One delivery per process.** The queue's changes reach a process once: one channel of the
  process is in the queue group, not one per page socket, and hands each change to the
  process's views, so a change costs one channel-layer message per process, not per socket.
- **One feed per view** (``page_feed_join``). The sockets showing one view (a person's queue,
  a person's call page) are pushed to by one task: after a change that concerns the view it
  asks each socket in turn to push, at most every ``PAGE_PUSH_INTERVAL``, with a turn of the
  loop after each, so that an agent's push that comes meanwhile waits for one page push, not
  for every socket's.
- **One render per view.** Each socket asks ``shared(key, work, since=...)`` for what it is to
  send, ``since`` being when the process heard of the change it answers. A run of ``work``
  that started at or after ``since`` serves the ask; otherwise it waits for the next run,
  which starts once the current one ends and serves everyone who asked meanwhile: many queue
  sockets of one person cost one render per change.
- **Sends that take turns.** ``page_send`` sends one page push at a time, across views.
- **Threads of their own.** Page reads and renders run on ``PAGE_THREADS`` threads
  (``page_database``), not on the one thread that every ``database_sync_to_async`` call shares
  by default, so that agent sockets never wait behind approvers' renders. Each run closes its
  database connection before and after, as ``database_sync_to_async`` does.

All of it lives on the event loop of the server process (one per process; tests make one per
test, and get state of their own).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from approvals.realtime.pushes import QUEUE_GROUP

P = ParamSpec("P")
R = TypeVar("R")

CLOSE_TOO_MANY = 4429
# Rendering holds the GIL, so more threads would mostly wait for it; two keep one slow render
# (a long queue) from holding up every other person's.
PAGE_THREADS = 2
# The layer forgets a group's members after a day (channels_redis's group_expiry): the hub's
# channel joins the queue group again well before that.
REJOIN_SECONDS = 3600.0
RETRY_SECONDS = 1.0  # after the channel layer failed (Redis restarting, say)
# The least time between two pushes to a view's sockets: a change after a quiet spell is pushed
# at once, changes in a burst are folded into one push at the end of the interval, so that a
# busy queue does not push to every open page at the rate of its changes.
PAGE_PUSH_INTERVAL = 0.5
# How long a render's result is kept for sockets asking late: longer than the sockets of a
# view, pushed at most every PAGE_PUSH_INTERVAL, take to ask after a change.
KEEP_SECONDS = 5.0

logger = logging.getLogger(__name__)

Listener = Callable[[dict[str, Any], float], None]

_page_threads = ThreadPoolExecutor(max_workers=PAGE_THREADS, thread_name_prefix="page-renders")


def page_database(
    function: Callable[P, R],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """``database_sync_to_async`` on the pages' own threads."""
    return database_sync_to_async(function, thread_sensitive=False, executor=_page_threads)


class _Caps:
    """Open sockets per owner, each owner at most its cap."""

    def __init__(self) -> None:
        self._open: dict[Hashable, int] = {}

    def take(self, owner: Hashable, cap: int) -> bool:
        """Count one more socket for ``owner``; False (and nothing counted) at its cap."""
        count = self._open.get(owner, 0)
        if count >= cap:
            return False
        self._open[owner] = count + 1
        return True

    def give_back(self, owner: Hashable) -> None:
        count = self._open.pop(owner) - 1
        if count:
            self._open[owner] = count


class _Shared:
    """One run at a time per key; each ask is served by a run that started at or after its
    ``since``: the one under way or just done, else the next."""

    def __init__(self) -> None:
        self._asked: dict[Hashable, asyncio.Future[Any]] = {}  # by the next run
        self._work: dict[Hashable, Callable[[], Awaitable[Any]]] = {}
        # The latest run of each key, under way or done: when it started, and its outcome.
        self._latest: dict[Hashable, tuple[float, asyncio.Future[Any]]] = {}
        self._runners: dict[Hashable, asyncio.Task[None]] = {}

    async def run(self, key: Hashable, work: Callable[[], Awaitable[R]], since: float) -> R:
        loop = asyncio.get_running_loop()
        latest = self._latest.get(key)
        if latest is not None and latest[0] >= since:
            return cast(R, await asyncio.shield(latest[1]))
        asked = self._asked.get(key)
        if asked is None:
            asked = self._asked[key] = loop.create_future()
            # Read the outcome even if every asker has gone, so that no failure is reported
            # as "never retrieved".
            asked.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._work[key] = work
        if key not in self._runners:
            self._runners[key] = loop.create_task(self._drive(key))
        # Shielded: one asker going away must not cancel the others' run.
        return cast(R, await asyncio.shield(asked))

    async def _drive(self, key: Hashable) -> None:
        try:
            while (asked := self._asked.pop(key, None)) is not None:
                work = self._work.pop(key)
                started = now()
                self._forget_before(started - KEEP_SECONDS)
                self._latest[key] = (started, asked)
                try:
                    asked.set_result(await work())
                except Exception as error:
                    del self._latest[key]  # a failure serves only those who asked for it
                    asked.set_exception(error)
                except BaseException:
                    del self._latest[key]
                    asked.cancel()
                    raise
        finally:
            del self._runners[key]

    def _forget_before(self, moment: float) -> None:
        """Drop the results of runs started before ``moment``, so that the views of people
        who left do not stay; an ask that late for so old a change gets a run of its own."""
        for key in [key for key, (started, _) in self._latest.items() if started < moment]:
            del self._latest[key]


class _PageHub:
    """The queue group's messages, received by one channel of the process and handed to
    every listening page socket with the time they arrived."""

    def __init__(self) -> None:
        self.listeners: set[Listener] = set()
        self._joining = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    async def join(self, listener: Listener) -> None:
        """Listen from now on: once this returns, no change is missed (the channel is in the
        group)."""
        async with self._joining:
            if not self._tasks:
                layer = get_channel_layer()
                assert layer is not None
                channel = await layer.new_channel()
                await layer.group_add(QUEUE_GROUP, channel)
                loop = asyncio.get_running_loop()
                self._tasks = [
                    loop.create_task(self._receive(layer, channel)),
                    loop.create_task(self._keep_joined(layer, channel)),
                ]
        self.listeners.add(listener)

    async def _receive(self, layer: Any, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except Exception:
                # Pushes are hints: what is lost meanwhile, the next change or reconnect
                # brings.
                logger.warning("queue pushes: the channel layer failed", exc_info=True)
                await asyncio.sleep(RETRY_SECONDS)
                await self._rejoin(layer, channel)
                continue
            self.tell(message)

    def tell(self, message: dict[str, Any]) -> None:
        arrived = now()
        for listener in list(self.listeners):
            try:
                listener(message, arrived)
            except Exception:
                logger.exception("a page socket failed to take a queue push")

    async def _keep_joined(self, layer: Any, channel: str) -> None:
        while True:
            await asyncio.sleep(REJOIN_SECONDS)
            await self._rejoin(layer, channel)

    async def _rejoin(self, layer: Any, channel: str) -> None:
        try:
            await layer.group_add(QUEUE_GROUP, channel)
        except Exception:
            logger.warning("queue pushes: joining the group failed", exc_info=True)


class PageSocket(Protocol):
    async def page_push(self, *, since: float) -> None:
        """Send this socket's view as it is since ``since`` (``now()``'s clock)."""


class _PageFeed:
    """The page sockets of one view in the process, and the one task that pushes to them."""

    def __init__(self, concerns: Callable[[dict[str, Any]], bool]) -> None:
        self.concerns = concerns
        self.sockets: dict[PageSocket, None] = {}  # in the order they joined
        self.stale_since: float | None = None  # when the latest change not yet pushed came
        self.pushed_at = -PAGE_PUSH_INTERVAL
        self.task: asyncio.Task[None] | None = None

    def heard(self, message: dict[str, Any], arrived: float) -> None:
        if not self.concerns(message["call"]):
            return
        self.stale_since = max(arrived, self.stale_since or arrived)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._push_while_stale())

    async def _push_while_stale(self) -> None:
        while self.stale_since is not None and self.sockets:
            wait = self.pushed_at + PAGE_PUSH_INTERVAL - now()
            if wait > 0:
                await asyncio.sleep(wait)  # what changes meanwhile goes into the same push
            since, self.stale_since = self.stale_since, None
            self.pushed_at = now()
            for socket in list(self.sockets):
                if socket not in self.sockets:
                    continue  # left meanwhile
                try:
                    await socket.page_push(since=since)
                except Exception:
                    logger.exception("rendering a page push failed")
                await asyncio.sleep(0)  # whatever else is ready runs before the next push


class _LoopState:
    def __init__(self) -> None:
        self.people = _Caps()
        self.agents = _Caps()
        self.shared = _Shared()
        self.pages = _PageHub()
        self.page_sends = asyncio.Lock()
        self.feeds: dict[Hashable, _PageFeed] = {}


_states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
    weakref.WeakKeyDictionary()
)


def _state() -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _states.get(loop)
    if state is None:
        state = _states[loop] = _LoopState()
    return state


def person_socket_take(user_id: int) -> bool:
    """Count a browser socket of this person; False when they hold their cap already."""
    return _state().people.take(user_id, settings.COUNTERSIGN_MAX_SOCKETS_PER_USER)


def person_socket_give_back(user_id: int) -> None:
    _state().people.give_back(user_id)


def agent_socket_take(agent_id: int) -> bool:
    """Count a socket of this agent; False when it holds its cap already."""
    return _state().agents.take(agent_id, settings.COUNTERSIGN_MAX_SOCKETS_PER_AGENT)


def agent_socket_give_back(agent_id: int) -> None:
    _state().agents.give_back(agent_id)


def now() -> float:
    """The clock ``since`` is read on."""
    return asyncio.get_running_loop().time()


async def page_send(send: Callable[[], Awaitable[None]]) -> None:
    """Run ``send()`` (one page push) in turn with the process's other page pushes."""
    async with _state().page_sends:
        await send()


async def page_feed_join(
    key: Hashable, socket: PageSocket, *, concerns: Callable[[dict[str, Any]], bool]
) -> None:
    """Push to ``socket`` with the other sockets of view ``key`` whenever a message to the
    queue group ``concerns`` the view, until ``page_feed_leave``. Once this returns, no
    change is missed."""
    state = _state()
    feed = state.feeds.get(key)
    if feed is None:
        feed = state.feeds[key] = _PageFeed(concerns)
    # In the feed before the wait: a socket that leaves meanwhile is taken out of it.
    feed.sockets[socket] = None
    await state.pages.join(feed.heard)
    if state.feeds.get(key) is not feed:  # every socket of it left while the hub joined
        state.pages.listeners.discard(feed.heard)


def page_feed_leave(key: Hashable, socket: PageSocket) -> None:
    state = _state()
    feed = state.feeds.get(key)
    if feed is None:
        return
    feed.sockets.pop(socket, None)
    if not feed.sockets:
        del state.feeds[key]
        state.pages.listeners.discard(feed.heard)
        if feed.task is not None:
            feed.task.cancel()


def page_hub_tell(message: dict[str, Any]) -> None:
    """Hand ``message`` to this process's page sockets as if it had come to the queue
    group: a change every process learns by itself (``approvals.realtime.presence``)."""
    _state().pages.tell(message)


async def shared(key: Hashable, work: Callable[[], Awaitable[R]], *, since: float) -> R:
    """``work()``'s result, from a run started at or after ``since`` and shared with every
    socket asking for ``key``. ``key`` must name everything the result depends on."""
    return await _state().shared.run(key, work, since)
