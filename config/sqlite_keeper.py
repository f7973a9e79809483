"""Hold a SQLite database open for the life of the server process.

Under ASGI every request closes its database connection (no persistent connections). When the
last connection to a WAL database closes, SQLite checkpoints the log into the database and
deletes it: with one request at a time, every request would pay for a checkpoint. One idle
connection held here means a request's connection is never the last; SQLite still checkpoints
on its own as the log grows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

_held: list[sqlite3.Connection] = []


def hold_open(database: Mapping[str, Any]) -> None:
    """Open ``database`` once if it is a SQLite file; a no-op for anything else."""
    name = str(database.get("NAME", ""))
    if database.get("ENGINE") != "django.db.backends.sqlite3" or name in ("", ":memory:"):
        return
    if _held:
        return
    try:
        # Read-write but never create: a database that is not there yet is not ours to make.
        connection = sqlite3.connect(f"file:{name}?mode=rw", uri=True, check_same_thread=False)
        # A read opens the WAL index: from then on this connection counts as open.
        connection.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error:
        return
    _held.append(connection)
