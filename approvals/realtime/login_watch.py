"""A person's page sockets end within a second of their password changing or their being
deactivated, however that was done (docs/reliability.md, "Access ends when it is taken away").

Admin's forms, the password views and any save in a process whose channel layer reaches the
servers' (Redis) close the sockets at once (``pushes.person_sockets_close``, from the model
signals). A change that sends no push reaches no server that way: ``manage.py
changepassword`` or ``set_password(); save()`` in a script under the embedded in-memory layer
(another process, another layer), or an ``UPDATE`` in SQL. So each server process watches too:
while page sockets are open, every ``WATCH_SECONDS`` it reads the password and the active
flag of the people they belong to, in one query for them all, and compares each socket's
session with it as Channels' ``get_user`` would (the session's hash of the password). A
socket whose session no longer matches is checked in full, as before each push, and closed
with ``4403`` when its login is gone.

The watch lives on the server's event loop (one per process; tests make one per test). Its
reads run on the pages' own threads (``hub.page_database``), never the agents'.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterable
from typing import Protocol

from django.contrib.auth.models import User
from django.utils.crypto import constant_time_compare

from approvals.realtime.hub import page_database

logger = logging.getLogger(__name__)

# Half the promised second: a change is seen at the next read, and its socket closed by the
# check that follows.
WATCH_SECONDS = 0.5

Login = tuple[int, str]  # the person, and their session's hash of the password


class WatchedSocket(Protocol):
    async def login_changed(self) -> None:
        """The person's password or active flag no longer matches the session: check it in
        full, and end the socket if it no longer holds."""


def _stale(logins: Iterable[Login]) -> set[Login]:
    """The logins whose person is gone, inactive, or has another password than their
    session was made with."""
    wanted = set(logins)
    people = User.objects.only("pk", "password", "is_active").in_bulk({pk for pk, _ in wanted})
    hashes = {pk: person.get_session_auth_hash() for pk, person in people.items()}
    return {
        (pk, session_hash)
        for pk, session_hash in wanted
        if pk not in people
        or not people[pk].is_active
        or not constant_time_compare(session_hash, hashes[pk])
    }


_stale_async = page_database(_stale)


class _Watch:
    def __init__(self) -> None:
        self.sockets: dict[WatchedSocket, Login] = {}
        self.task: asyncio.Task[None] | None = None
        self.failing = False
        # While sockets check their logins: a socket ending then must not cancel the others'.
        self.checking = False

    async def run(self) -> None:
        while self.sockets:
            await asyncio.sleep(WATCH_SECONDS)
            watched = dict(self.sockets)
            try:
                stale = await _stale_async(set(watched.values()))
            except Exception:
                # The sockets' own checks still run before each push and every minute.
                if not self.failing:
                    logger.warning("the login watch could not read the people", exc_info=True)
                self.failing = True
                continue
            self.failing = False
            changed = [s for s, login in watched.items() if login in stale and s in self.sockets]
            if changed:
                self.checking = True
                try:
                    outcomes = await asyncio.gather(
                        *(socket.login_changed() for socket in changed), return_exceptions=True
                    )
                finally:
                    self.checking = False
                for outcome in outcomes:
                    if isinstance(outcome, Exception):
                        logger.error("checking a changed login failed", exc_info=outcome)


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()


def _watch() -> _Watch:
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None:
        watch = _watches[loop] = _Watch()
    return watch


def login_watch(socket: WatchedSocket, *, user_id: int, session_hash: str) -> None:
    """Watch ``socket``'s login (again, with the hash its session holds now)."""
    watch = _watch()
    watch.sockets[socket] = (user_id, session_hash)
    if watch.task is None or watch.task.done():
        watch.task = asyncio.get_running_loop().create_task(watch.run())


def login_unwatch(socket: WatchedSocket) -> None:
    watch = _watch()
    watch.sockets.pop(socket, None)
    if not watch.sockets and watch.task is not None and not watch.checking:
        watch.task.cancel()
        watch.task = None
