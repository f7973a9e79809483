"""Whether an agent is waiting for a call right now (docs/ui.md, "Is an agent waiting?").

An agent waits for a call while it holds a call socket on it (``/ws/v1/calls/<id>``), a
stream socket of its agent (``/ws/v1/agent``: every call of the agent) or a long-poll on it
(``/api/v1/calls/<id>/wait``), on any worker. The queue and the call page show it, and
when nobody waits, since when (the last moment a waiter was seen).

The agent paths only count: ``waiter_enter`` and ``waiter_leave`` change a number in this
process's memory and wake a task, never a round trip. Where the counts are kept:

- **Without Redis** (one process): in memory, read as they are.
- **With ``REDIS_URL``** (several workers): each worker's task writes its counts as one hash
  of its own that expires ``TTL_SECONDS`` after the last write, refreshed every
  ``HEARTBEAT_SECONDS`` and soon after each change; a killed worker's waiters vanish with
  its hash. Each key of a call or agent that had a waiter also keeps when it was last seen
  waiting (exactly when its last waiter left, or within ``SEEN_EVERY_SECONDS`` for a worker
  that was killed). Readers (page renders, on their own threads) read the live workers'
  hashes, with this worker's own counts as they are now.

Every process's task also notices when the set of waited calls and agents changes, on any
worker, and tells the process's page sockets (``fairness.page_hub_tell``), which render the
queue and the call pages again (folded as every push is: ``fairness.PAGE_PUSH_INTERVAL``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import redis
import redis.asyncio
from django.conf import settings

from approvals.errors import Unavailable
from approvals.models import Call
from config.runtime.redis_layer import CancellableConnection

logger = logging.getLogger(__name__)

# A change is told to the pages this long after it happened, with every change meanwhile: a
# long-poll that answers and is asked again at once is not a wait that ended.
ANNOUNCE_DELAY = 0.2
HEARTBEAT_SECONDS = 0.5
TTL_SECONDS = 1.5  # a killed worker's waiters vanish this long after its last heartbeat
SEEN_EVERY_SECONDS = 10.0
SEEN_KEEP_SECONDS = 8 * 86_400  # how long "last seen waiting" is kept (held calls end sooner)
RETRY_SECONDS = 1.0
LEFT_KEEP = 100_000  # without Redis: last-seen times kept before the old ones are dropped
REDIS_TIMEOUT = 1.0
PREFIX = "countersign:presence:"

PRESENCE_CHANGED = "presence.changed"


def call_key(call_id: uuid.UUID | str) -> str:
    return f"c:{call_id}"


def agent_key(agent_id: int) -> str:
    return f"a:{agent_id}"


@dataclass(frozen=True, slots=True)
class Waiting:
    """An agent waits for the call now (``now``); else ``since`` is when one was last seen
    waiting for it (None: none has, as far as is known)."""

    now: bool
    since: datetime | None = None


class _Call(Protocol):
    pk: uuid.UUID
    agent_id: int
    created_at: datetime


def _when(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


def _waiting(call: _Call, waited: set[str], seen: dict[str, float]) -> Waiting:
    own, agent = call_key(call.pk), agent_key(call.agent_id)
    if own in waited or agent in waited:
        return Waiting(now=True)
    created = call.created_at.timestamp()
    moments = [seen[own]] if own in seen else []
    if agent in seen and seen[agent] >= created:  # a stream that closed before the call: no
        moments.append(seen[agent])
    return Waiting(now=False, since=_when(max(moments, default=None)))


class _Backend:
    """This process's counts, the announcements of changes, and the reads."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.left: dict[str, float] = {}  # keys whose last waiter here left, and when
        self._lock = threading.Lock()  # readers run on page threads
        self._changed: set[str] = set()
        self._announce: asyncio.TimerHandle | None = None

    # -- the agent paths: memory only -----------------------------------------------------

    def enter(self, key: str) -> None:
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1
        self._touched(key)

    def leave(self, key: str) -> None:
        with self._lock:
            count = self.counts.get(key, 0) - 1
            if count > 0:
                self.counts[key] = count
            else:
                self.counts.pop(key, None)
                self.left[key] = now = time.time()
                if len(self.left) > LEFT_KEEP:
                    self.left = {k: t for k, t in self.left.items() if t > now - SEEN_KEEP_SECONDS}
        self._touched(key)

    def _touched(self, key: str) -> None:
        raise NotImplementedError

    # -- readers --------------------------------------------------------------------------

    def read(self, keys: Iterable[str]) -> tuple[set[str], dict[str, float]]:
        """Which of ``keys`` are waited for now, and when the others were last seen."""
        raise NotImplementedError

    def watch(self) -> None:
        """Called from the event loop by whoever wants to hear of changes (page sockets)."""


class MemoryPresence(_Backend):
    """One process: the counts are the truth; a change is told after ``ANNOUNCE_DELAY``."""

    def __init__(self) -> None:
        super().__init__()
        self._told: set[str] = set()  # the waited keys as last told
        self._announce_loop: asyncio.AbstractEventLoop | None = None

    def _touched(self, key: str) -> None:
        self._changed.add(key)
        loop = asyncio.get_running_loop()
        if self._announce is None or self._announce_loop is not loop:
            self._announce_loop = loop
            self._announce = loop.call_later(ANNOUNCE_DELAY, self._tell)

    def _tell(self) -> None:
        self._announce = None
        changed, self._changed = self._changed, set()
        with self._lock:
            now = {key for key in changed if key in self.counts}
        flipped = {key for key in changed if (key in now) != (key in self._told)}
        self._told = (self._told - changed) | now
        _tell_pages(flipped)

    def read(self, keys: Iterable[str]) -> tuple[set[str], dict[str, float]]:
        with self._lock:
            wanted = list(keys)
            return (
                {key for key in wanted if key in self.counts},
                {key: self.left[key] for key in wanted if key in self.left},
            )


class RedisPresence(_Backend):
    """Several workers: each worker's counts in a hash of its own that expires unless its
    heartbeat renews it; last-seen times in keys of their own."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = PREFIX,
        heartbeat: float = HEARTBEAT_SECONDS,
        ttl: float = TTL_SECONDS,
    ) -> None:
        super().__init__()
        self.url, self.prefix = url, prefix
        self.heartbeat, self.ttl = heartbeat, ttl
        self.worker = uuid.uuid4().hex
        self._sync = redis.Redis.from_url(
            url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT
        )
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._seen_at = 0.0  # when the waited keys' last-seen times were last written

    @property
    def _workers(self) -> str:
        return f"{self.prefix}workers"

    def _hash(self, worker: str) -> str:
        return f"{self.prefix}w:{worker}"

    def _seen(self, key: str) -> str:
        return f"{self.prefix}seen:{key}"

    # -- the task -------------------------------------------------------------------------

    def _touched(self, key: str) -> None:
        self.watch()
        assert self._wake is not None
        self._wake.set()

    def watch(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(self._wake))

    async def _run(self, wake: asyncio.Event) -> None:
        client = redis.asyncio.Redis.from_url(
            self.url,
            socket_timeout=REDIS_TIMEOUT,
            socket_connect_timeout=REDIS_TIMEOUT,
            connection_class=CancellableConnection,
        )
        # What the pages were last told; from nothing, so the first beat tells of every
        # waiter (one more render of pages that have just read it all).
        told: set[str] = set()
        task = asyncio.current_task()
        try:
            # Not ``while True``: a cancel lost inside a library (CancellableConnection says
            # how redis-py lost one) would keep this task, and its event loop, for good. A
            # cancel still pending is seen here.
            while task is None or not task.cancelling():
                try:
                    await asyncio.wait_for(wake.wait(), timeout=self.heartbeat)
                    await asyncio.sleep(0.05)  # the changes of the same moment, together
                except TimeoutError:
                    pass
                wake.clear()
                try:
                    waited = await self._beat(client)
                except Exception:  # Redis restarting, say: the pages show less meanwhile
                    logger.warning("presence: the heartbeat failed", exc_info=True)
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                if waited != told:
                    _tell_pages(waited ^ told)
                told = waited
        finally:
            await client.aclose()

    async def _beat(self, client: redis.asyncio.Redis) -> set[str]:
        """Write this worker's counts (and the last-seen times due), then read every live
        worker's: the keys waited for anywhere."""
        now = time.time()
        with self._lock:
            counts = dict(self.counts)
            left, self.left = self.left, {}
        seen = dict(left)
        if now - self._seen_at >= SEEN_EVERY_SECONDS:
            self._seen_at = now
            seen.update(dict.fromkeys(counts, now))
        mine = self._hash(self.worker)
        pipe = client.pipeline(transaction=True)
        pipe.delete(mine)
        if counts:
            fields: dict[Any, Any] = dict(counts)  # redis-py's stubs want its own key types
            pipe.hset(mine, mapping=fields)
            pipe.pexpire(mine, int(self.ttl * 1000))
            pipe.zadd(self._workers, {self.worker: now + self.ttl})
        else:
            pipe.zrem(self._workers, self.worker)
        for key, moment in seen.items():
            pipe.set(self._seen(key), repr(moment), ex=SEEN_KEEP_SECONDS)
        # Hashes expire by themselves; the list of workers is pruned well after them.
        pipe.zremrangebyscore(self._workers, "-inf", now - 60)
        pipe.zrange(self._workers, 0, -1)
        try:
            workers = (await pipe.execute())[-1]
        except BaseException:
            with self._lock:  # written next time
                for key, moment in left.items():
                    self.left.setdefault(key, moment)
            raise
        others = [w.decode() for w in workers if w.decode() != self.worker]
        waited = set(counts)
        if others:
            read = client.pipeline(transaction=False)
            for worker in others:
                read.hkeys(self._hash(worker))
            for keys in await read.execute():
                waited.update(key.decode() for key in keys)
        return waited

    # -- readers --------------------------------------------------------------------------

    def read(self, keys: Iterable[str]) -> tuple[set[str], dict[str, float]]:
        wanted = list(keys)
        with self._lock:
            waited = {key for key in wanted if key in self.counts}
            left = {key: self.left[key] for key in wanted if key in self.left}
        if not wanted:
            return waited, left
        try:
            listed: list[bytes] = self._sync.zrange(self._workers, 0, -1)  # type: ignore[assignment]
            workers = [w.decode() for w in listed if w.decode() != self.worker]
            pipe = self._sync.pipeline(transaction=False)
            for worker in workers:
                pipe.hmget(self._hash(worker), wanted)
            pipe.mget([self._seen(key) for key in wanted])
            *counts, seen = pipe.execute()
        except (redis.RedisError, OSError):
            logger.warning("presence: Redis failed; shown as unknown", exc_info=True)
            raise PresenceUnknown from None
        for values in counts:
            waited.update(key for key, value in zip(wanted, values, strict=True) if value)
        stored = {key: float(value) for key, value in zip(wanted, seen, strict=True) if value}
        for key, moment in left.items():
            stored[key] = max(moment, stored.get(key, moment))
        return waited, stored

    def close(self) -> None:
        self._sync.close()


class PresenceUnknown(Unavailable):
    """Redis did not answer: nobody knows."""


def _tell_pages(keys: set[str]) -> None:
    if not keys:
        return
    from approvals.realtime.hub import page_hub_tell

    calls = sorted(key[2:] for key in keys if key.startswith("c:"))
    agents = any(key.startswith("a:") for key in keys)
    # Shaped as a pending call's change, which every page socket looks at; the call pages
    # also look at which calls (any, for an agent's stream socket).
    state: dict[str, Any] = {
        "status": Call.Status.PENDING.value,
        "presence_calls": calls,
        "presence_agents": agents,
    }
    page_hub_tell({"type": PRESENCE_CHANGED, "call": state})


_backend: _Backend | None = None
_backend_lock = threading.Lock()


def backend() -> _Backend:
    global _backend
    if _backend is None:
        with _backend_lock:
            if _backend is None:
                url = settings.REDIS_URL
                _backend = RedisPresence(url) if url else MemoryPresence()
    return _backend


def backend_set(new: _Backend | None) -> _Backend | None:
    """Use ``new`` from now on (tests); the one in use before is returned."""
    global _backend
    old, _backend = _backend, new
    return old


# --- the entry points ---------------------------------------------------------------------


def waiter_enter(key: str) -> None:
    """An agent waits from now on (``call_key`` or ``agent_key``); from the event loop."""
    backend().enter(key)


def waiter_leave(key: str) -> None:
    """One waiter of ``key`` has gone; from the event loop."""
    backend().leave(key)


def presence_watch() -> None:
    """Hear of changes on every worker from now on (page sockets); from the event loop."""
    backend().watch()


def presence_of(calls: Iterable[_Call]) -> dict[uuid.UUID, Waiting]:
    """Whether an agent waits for each call now, or since when none has; empty when that
    is unknown (Redis did not answer). Any thread."""
    listed = list(calls)
    keys = {call_key(call.pk) for call in listed} | {agent_key(call.agent_id) for call in listed}
    try:
        waited, seen = backend().read(sorted(keys))
    except PresenceUnknown:
        return {}
    return {call.pk: _waiting(call, waited, seen) for call in listed}
