"""The write transaction of the hot services (submit, decide, cancel, expire, extend)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

# SQLite has one writer at a time, and a writer that finds the database locked sleeps and
# retries (1 ms, 2 ms, … up to 100 ms between tries): with 32 concurrent submissions most of
# them sleep while the lock is free, and throughput falls. Threads of one process take turns
# here first and are handed the turn at once; other processes still meet the busy timeout.
# Re-entrant: a service may run inside another's transaction.
_sqlite_writers = threading.RLock()


@contextmanager
def write_transaction() -> Iterator[None]:
    """``transaction.atomic()``; on SQLite, entered one thread of this process at a time."""
    if connection.vendor != "sqlite":
        with transaction.atomic():
            yield
        return
    with _sqlite_writers, transaction.atomic():
        yield
