"""Django's SQLite backend, with connections kept open and handed from request to request.

Under ASGI every request, every socket's database call and every long-poll read closes its
connection (no persistent connections: each runs in a thread of its own). A new SQLite
connection opens the file, has Django register its SQL functions and run the pragmas, and
its first query parses the schema again; and when the last connection to a WAL database
closes, SQLite checkpoints the log. With thousands of agents waiting that dominated the
server's CPU (docs/performance.md).

So a closed connection goes to a per-process list of idle ones (at most ``IDLE_MAX`` per
database file) and the next connect takes it from there. A connection is only ever used by
one Django connection at a time, as Django's own backend already allows
(``check_same_thread=False``). One closed inside a transaction is really closed, and so is
one whose file has been replaced since it was opened (a test database made anew).

``COUNTERSIGN_STOCK=sqlite`` uses Django's own backend instead (config/runtime/README.md).
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
from typing import Any

from django.db.backends.sqlite3 import base as sqlite

IDLE_MAX = 32  # idle connections kept per database file

_Idle = queue.SimpleQueue[tuple[sqlite3.Connection, int]]
_idle: dict[str, _Idle] = {}
_idle_lock = threading.Lock()


def _idle_for(path: str) -> _Idle:
    with _idle_lock:
        return _idle.setdefault(path, queue.SimpleQueue())


def _inode(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return -1


class DatabaseWrapper(sqlite.DatabaseWrapper):
    _file_inode = -1  # of the database file the connection in hand was opened on

    def get_new_connection(self, conn_params: dict[str, Any]) -> sqlite3.Connection:
        path = str(self.settings_dict["NAME"])
        if not self.is_in_memory_db():
            idle, current = _idle_for(path), _inode(path)
            while True:
                try:
                    kept, inode = idle.get_nowait()
                except queue.Empty:
                    break
                if inode == current:
                    self._file_inode = inode
                    return kept
                kept.close()
        connection: sqlite3.Connection = super().get_new_connection(conn_params)
        self._file_inode = _inode(path)  # now that connecting has made the file
        return connection

    def _close(self) -> None:
        connection = self.connection
        if connection is None:
            return
        idle = _idle_for(str(self.settings_dict["NAME"]))
        if connection.in_transaction or self.is_in_memory_db() or idle.qsize() >= IDLE_MAX:
            with self.wrap_database_errors:
                connection.close()  # rolls back what a transaction left
            return
        idle.put((connection, self._file_inode))
