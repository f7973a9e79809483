"""The ``PolicyStamp`` row, and whether the triggers that renew it are all in place."""

from __future__ import annotations

from django.db import connection

from approvals.models import PolicyStamp
from approvals.queries import sql

# The stamp, and how many of the triggers that renew it are there and enabled: one per table
# on PostgreSQL, one per table and event on SQLite, for the four policy tables (migration
# 0004) and the notification channels (0011). The catalogs are the databases' own, hence
# their names typed here.
_SQLITE = sql.statement(
    r"""
SELECT {S.stamp}, (SELECT count(*) FROM sqlite_master
                   WHERE type = 'trigger'
                   AND (name LIKE 'countersign\_policy\_%' ESCAPE '\'
                        OR name LIKE 'countersign\_channels\_%' ESCAPE '\'))
FROM {S} WHERE {S.id} = 1
""",
    S=PolicyStamp,
)
_SQLITE_TRIGGERS = 15
_POSTGRESQL = sql.statement(
    """
SELECT {S.stamp}, (SELECT count(*) FROM pg_trigger
                   WHERE tgname IN ('countersign_policy_changed', 'countersign_channels_changed')
                   AND tgenabled <> 'D')
FROM {S} WHERE {S.id} = 1
""",
    S=PolicyStamp,
)
_POSTGRESQL_TRIGGERS = 5


def policy_stamp_read() -> int | None:
    """The current stamp, or None when it cannot vouch for a cached policy: no stamp row, a
    trigger missing or disabled, or a database other than SQLite or PostgreSQL."""
    if connection.vendor == "sqlite":
        query, triggers = _SQLITE, _SQLITE_TRIGGERS
    elif connection.vendor == "postgresql":
        query, triggers = _POSTGRESQL, _POSTGRESQL_TRIGGERS
    else:
        return None
    found = sql.rows(query, None)
    if not found or found[0][1] != triggers:
        return None
    return int(found[0][0])
