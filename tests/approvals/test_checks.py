"""The system check refuses an SQLite too old for the submission path's upserts."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import connection

from approvals.ops import checks


def test_an_sqlite_older_than_3_35_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "vendor", "sqlite")
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    [error] = checks.sqlite_version_check()
    assert (error.id, error.msg) == (
        "countersign.E001",
        checks.SQLITE_TOO_OLD.format(found="3.34.1"),
    )


def test_this_machines_database_passes() -> None:
    assert checks.sqlite_version_check() == []
