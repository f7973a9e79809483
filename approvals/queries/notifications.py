"""``Notification`` rows: the delivery loops' claims, and the end of an attempt.

A message is due when it is pending, its next attempt is due, and no loop holds an unexpired
lease on it; and it is sent only once every earlier message of its channel and call has been
delivered or has failed (order per channel and call). On PostgreSQL a claim locks the rows it
takes with ``FOR UPDATE SKIP LOCKED``, so that concurrent loops pass each other's rows by; on
SQLite the claiming transaction holds the database's write lock. The claim then writes a
lease, so a loop killed while sending leaves the message to be taken over once it expires.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime

from django.db import connection

from approvals.models import Notification
from approvals.queries import sql

PENDING = Notification.Status.PENDING.value

_FREE = """
n.{N.status} = %s AND n.{N.next_attempt_at} <= %s
AND (n.{N.lease_until} IS NULL OR n.{N.lease_until} < %s)
"""
_ANY_DUE = sql.statement("SELECT 1 FROM {N} n WHERE " + _FREE + " LIMIT 1", N=Notification)
_DUE = sql.statement(
    "SELECT n.{N.id}, n.{N.channel} FROM {N} n WHERE "
    + _FREE
    + """
AND NOT EXISTS (
    SELECT 1 FROM {N} e
    WHERE e.{N.channel} = n.{N.channel} AND e.{N.call} = n.{N.call} AND e.{N.status} = %s
    AND (e.{N.created_at} < n.{N.created_at}
         OR (e.{N.created_at} = n.{N.created_at} AND e.{N.id} < n.{N.id})))
""",
    N=Notification,
)
_NOT_BUSY = sql.statement(" AND n.{N.channel} NOT IN ", N=Notification)
_ORDER = sql.statement(" ORDER BY n.{N.next_attempt_at} LIMIT %s", N=Notification)
_LEASE = sql.statement("UPDATE {N} SET {N.lease_until} = %s WHERE {N.id} IN ", N=Notification)
_UNLEASE = sql.statement(
    "UPDATE {N} SET {N.lease_until} = NULL WHERE {N.status} = %s AND {N.id} IN ", N=Notification
)
_END = sql.statement(
    """
UPDATE {N} SET {N.status} = %s, {N.attempts} = %s, {N.next_attempt_at} = %s,
               {N.lease_until} = NULL, {N.delivered_at} = %s
WHERE {N.id} = %s AND {N.status} = %s
""",
    N=Notification,
)


def _at(moment: datetime | None) -> object:
    return sql.prepared(sql.fields(Notification, "next_attempt_at")[0], moment)


def _key(notification_id: uuid.UUID) -> object:
    return sql.prepared(sql.fields(Notification, "id")[0], notification_id)


def _marks(count: int) -> str:
    return "(" + ", ".join(["%s"] * count) + ")"


def notifications_due_any(*, now: datetime) -> bool:
    """Whether any message may be due now: the idle loop's cheap look, taking no lock."""
    return bool(sql.rows(_ANY_DUE, [PENDING, _at(now), _at(now)]))


def notifications_claim(
    *,
    now: datetime,
    lease_until: datetime,
    channels: int,
    run: int,
    busy: Collection[int] = (),
) -> list[tuple[int, list[uuid.UUID]]]:
    """Lease the due messages of up to ``channels`` channels, none of them ``busy``, up to
    ``run`` of each: each channel with its messages' ids, the longest due first. Run it in a
    write transaction."""
    params: list[object] = [PENDING, _at(now), _at(now), PENDING]
    text = _DUE
    if busy:
        text += _NOT_BUSY + _marks(len(busy))
        params.extend(busy)
    text += _ORDER
    params.append(channels * run)
    if connection.features.has_select_for_update_skip_locked:
        text += " FOR UPDATE OF n SKIP LOCKED"
    of = sql.fields(Notification, "id", "channel")
    taken: dict[int, list[uuid.UUID]] = {}
    for notification_id, channel_id in sql.fetch(text, params, of):
        ids = taken.get(channel_id)
        if ids is None:
            if len(taken) >= channels:
                continue  # a later row may still add to a channel already taken
            ids = taken[channel_id] = []
        if len(ids) < run:
            ids.append(notification_id)
    leased = [_key(notification_id) for ids in taken.values() for notification_id in ids]
    if leased:
        sql.execute(_LEASE + _marks(len(leased)), [_at(lease_until), *leased])
    return list(taken.items())


def notification_leases_end(notification_ids: Collection[uuid.UUID]) -> None:
    """Let go of claimed messages without an attempt (the rest of a run that stopped): due
    again at once for any loop."""
    keys = [_key(notification_id) for notification_id in notification_ids]
    sql.execute(_UNLEASE + _marks(len(keys)), [PENDING, *keys])


def notification_attempt_end(
    *,
    notification_id: uuid.UUID,
    status: str,
    attempts: int,
    next_attempt_at: datetime,
    delivered_at: datetime | None,
) -> int:
    """The message after an attempt, its lease let go; only while it is still pending (an
    admin's retry or another loop's delivery may have come first). Rows changed."""
    return sql.execute(
        _END,
        [
            status,
            attempts,
            _at(next_attempt_at),
            _at(delivered_at),
            _key(notification_id),
            PENDING,
        ],
    )
