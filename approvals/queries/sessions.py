"""``Session`` rows, read on every approver's request."""

from __future__ import annotations

from datetime import datetime

from django.contrib.sessions.models import Session

from approvals.queries import sql

_DATA = sql.statement(
    "SELECT {S.session_data} FROM {S} WHERE {S.session_key} = %s AND {S.expire_date} > %s",
    S=Session,
)


def session_data_read(*, session_key: str, now: datetime) -> str | None:
    """The encoded data of the session, unless it is missing or expired by ``now``."""
    expire_date = sql.fields(Session, "expire_date")[0]
    found = sql.rows(_DATA, [session_key, sql.prepared(expire_date, now)])
    return found[0][0] if found else None
