"""The write transaction of the hot services (submit, decide, cancel, expire, extend), whose
writers on SQLite take turns within the process.

SQLite has one writer at a time, and a writer that finds the database locked sleeps and
retries (1 ms, 2 ms, … up to 100 ms between tries): under many concurrent submissions most of
them sleep while the lock is free, and throughput falls (docs/performance.md). Threads of one
process take turns here first and are handed the turn at once; other processes still meet the
busy timeout.

``COUNTERSIGN_STOCK=sqlite_writers`` makes it ``transaction.atomic()`` alone
(config/runtime/README.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

from config.runtime.stock import Stock, uses_stock

_sqlite_writers = threading.Lock()


@contextmanager
def write_transaction() -> Iterator[None]:
    """``transaction.atomic()``; on SQLite, entered one thread of this process at a time.

    The turn ends as the transaction commits, before the commit's hooks run: those send the
    pushes, a hop to an event loop that the next writer need not wait for. Inside another
    transaction there is no turn to take: the outer one holds it, or (a plain ``atomic``)
    already holds SQLite's write lock.
    """
    if (
        connection.vendor != "sqlite"
        or connection.in_atomic_block
        or uses_stock(Stock.SQLITE_WRITERS)
    ):
        with transaction.atomic():
            yield
        return
    _sqlite_writers.acquire()
    held = True

    def end_turn() -> None:
        nonlocal held
        if held:
            held = False
            _sqlite_writers.release()

    try:
        with transaction.atomic():
            # Registered first, so it runs first of the commit's hooks.
            transaction.on_commit(end_turn)
            yield
    finally:
        end_turn()  # a rollback, or a failed commit, runs no hooks
