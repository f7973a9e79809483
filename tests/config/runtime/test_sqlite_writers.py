"""On SQLite, a write transaction takes this process's writers' turn and hands it on as it
commits, before the commit's hooks run; switched to stock, it is ``transaction.atomic``."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from config.runtime import sqlite_writers
from config.runtime.sqlite_writers import write_transaction
from config.runtime.stock import Stock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def on_sqlite(settings: Any) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the writers take turns on SQLite only")
    settings.COUNTERSIGN_STOCK = frozenset()


def _turn_taken() -> bool:
    return sqlite_writers._sqlite_writers.locked()


def test_a_writer_holds_the_turn_for_its_transaction(on_sqlite: None) -> None:
    with write_transaction():
        assert connection.in_atomic_block
        assert _turn_taken()
    assert not _turn_taken()


def test_the_turn_ends_before_the_commits_hooks_run(on_sqlite: None) -> None:
    during_hooks: list[bool] = []
    with write_transaction():
        transaction.on_commit(lambda: during_hooks.append(_turn_taken()))
    assert during_hooks == [False]


def test_a_rollback_ends_the_turn(on_sqlite: None) -> None:
    with pytest.raises(RuntimeError), write_transaction():
        raise RuntimeError
    assert not _turn_taken()


def test_inside_another_transaction_there_is_no_turn_to_take(on_sqlite: None) -> None:
    with transaction.atomic(), write_transaction():
        assert not _turn_taken()


def test_switched_to_stock_it_is_atomic_alone(on_sqlite: None, settings: Any) -> None:
    settings.COUNTERSIGN_STOCK = frozenset({Stock.SQLITE_WRITERS})
    with write_transaction():
        assert connection.in_atomic_block
        assert not _turn_taken()
