"""System checks: what the written-out SQL of approvals/services/statements.py needs of the
database, and files of Countersign's that others may read."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connection

from config.private_files import loose, private_paths

SQLITE_MINIMUM = (3, 35)  # upserts with RETURNING (approvals/services/statements.py)
SQLITE_TOO_OLD = "SQLite {found} is older than 3.35, which counting calls needs (RETURNING)."


@register("database")
def sqlite_version_check(**kwargs: Any) -> list[CheckMessage]:
    if connection.vendor != "sqlite" or sqlite3.sqlite_version_info >= SQLITE_MINIMUM:
        return []
    return [Error(SQLITE_TOO_OLD.format(found=sqlite3.sqlite_version), id="countersign.E001")]


LOOSE_FILES = "Others than their owner may read these files of Countersign's: {paths}."
LOOSE_FILES_HINT = (
    "They hold the database, session keys and secret keys. Countersign tightens what is its "
    "own at start; these it could not (another user's, or a read-only mount): make the "
    "directory 0700 and its files 0600 for the user Countersign runs as."
)


@register("security")
def private_files_check(**kwargs: Any) -> list[CheckMessage]:
    """The var directory, its files and an SQLite database are private
    (config/private_files.py); what could not be made so is named."""
    found = loose(private_paths(Path(settings.VAR_DIR), settings.SQLITE_DATABASE))
    if not found:
        return []
    return [
        Warning(
            LOOSE_FILES.format(paths=", ".join(str(path) for path in found)),
            hint=LOOSE_FILES_HINT,
            id="countersign.W002",
        )
    ]
