"""System checks: what the written-out SQL of approvals/services/statements.py needs of the
database."""

from __future__ import annotations

import sqlite3
from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.db import connection

SQLITE_MINIMUM = (3, 35)  # upserts with RETURNING (approvals/services/statements.py)
SQLITE_TOO_OLD = "SQLite {found} is older than 3.35, which counting calls needs (RETURNING)."


@register("database")
def sqlite_version_check(**kwargs: Any) -> list[CheckMessage]:
    if connection.vendor != "sqlite" or sqlite3.sqlite_version_info >= SQLITE_MINIMUM:
        return []
    return [Error(SQLITE_TOO_OLD.format(found=sqlite3.sqlite_version), id="countersign.E001")]
