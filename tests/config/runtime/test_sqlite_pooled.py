"""The SQLite backend hands closed connections on instead of opening new ones, and never
hands on one that could be stale."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from config.runtime.sqlite_pooled.base import DatabaseWrapper


@pytest.fixture
def database(tmp_path: Path, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """The settings of a database of this test's own, in a file beside nothing else."""
    if connections["default"].vendor != "sqlite":
        pytest.skip("the pooled backend is SQLite's")
    settings = copy.deepcopy(connections.databases["default"])
    settings["NAME"] = str(tmp_path / "pooled.sqlite3")
    with django_db_blocker.unblock():
        yield settings


def _wrapper(settings: dict[str, Any]) -> DatabaseWrapper:
    return DatabaseWrapper(settings, alias="pooled-test")


def _raw(wrapper: DatabaseWrapper) -> object:
    wrapper.ensure_connection()
    return wrapper.connection


def test_a_closed_connection_is_handed_to_the_next_connect(database: dict[str, Any]) -> None:
    first = _wrapper(database)
    opened = _raw(first)
    with first.cursor() as cursor:
        cursor.execute("CREATE TABLE t (n INTEGER)")
        cursor.execute("INSERT INTO t VALUES (1)")
    first.close()
    again = _wrapper(database)
    assert _raw(again) is opened
    with again.cursor() as cursor:
        cursor.execute("SELECT n FROM t")
        assert cursor.fetchall() == [(1,)]
    # Foreign keys and the configured pragmas came with it, set when it was opened.
    with again.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone() == ("wal",)
        cursor.execute("PRAGMA foreign_keys")
        assert cursor.fetchone() == (1,)
    again.close()


def test_another_thread_takes_it_over(database: dict[str, Any]) -> None:
    first = _wrapper(database)
    opened = _raw(first)
    first.close()
    seen: list[object] = []

    def other_thread() -> None:
        wrapper = _wrapper(database)
        seen.append(_raw(wrapper))
        wrapper.close()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen == [opened]


def test_one_closed_inside_a_transaction_is_really_closed(database: dict[str, Any]) -> None:
    first = _wrapper(database)
    with first.cursor() as cursor:
        cursor.execute("CREATE TABLE t (n INTEGER)")
    opened = _raw(first)
    with first.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("INSERT INTO t VALUES (1)")
    first.close()
    again = _wrapper(database)
    assert _raw(again) is not opened
    with again.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM t")
        assert cursor.fetchone() == (0,)  # the unfinished insert went with it
    again.close()


def test_a_connection_to_a_replaced_file_is_not_reused(database: dict[str, Any]) -> None:
    path = Path(database["NAME"])
    first = _wrapper(database)
    with first.cursor() as cursor:
        cursor.execute("CREATE TABLE old (n INTEGER)")
    opened = _raw(first)
    first.close()
    for leftover in path.parent.glob(f"{path.name}*"):
        leftover.unlink()  # the file and its WAL, as a test database is made anew
    again = _wrapper(database)
    assert _raw(again) is not opened
    with again.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE name = 'old'")
        assert cursor.fetchall() == []
    again.close()
