"""``Notification`` rows: the messages written, the delivery loops' claims, the runs they
read, and what their attempts came to (with the ``DeliveryAttempt`` rows that keep them).

A message is due when it is pending, its next attempt is due, and no loop holds an unexpired
lease on it; and it is sent only once every earlier message of its channel and call has been
delivered or has failed (order per channel and call). On PostgreSQL a claim locks the rows it
takes with ``FOR UPDATE SKIP LOCKED``, so that concurrent loops pass each other's rows by; on
SQLite the claiming transaction holds the database's write lock. The claim then writes a
lease, so a loop killed while sending leaves the message to be taken over once it expires.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import connection

from approvals.models import DeliveryAttempt, Notification, NotificationChannel
from approvals.queries import sql

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

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
# Statements on a run's messages name them by id alone: given the status too, SQLite looks
# them up through the status index, among every pending message (a backlog's thousands).
_LEASE = sql.statement("UPDATE {N} SET {N.lease_until} = %s WHERE {N.id} IN ", N=Notification)
_UNLEASE = sql.statement("UPDATE {N} SET {N.lease_until} = NULL WHERE {N.id} IN ", N=Notification)
_END = sql.statement(
    """
UPDATE {N} SET {N.status} = %s, {N.attempts} = %s,
               {N.next_attempt_at} = COALESCE(%s, {N.next_attempt_at}),
               {N.lease_until} = NULL, {N.delivered_at} = %s
WHERE {N.id} = %s AND {N.status} = %s
""",
    N=Notification,
)


_ADD = sql.statement(
    """
INSERT INTO {N} ({N.id}, {N.channel}, {N.call}, {N.event}, {N.payload}, {N.status},
                 {N.created_at}, {N.next_attempt_at}, {N.attempts}) VALUES
""",
    N=Notification,
)
_ADD_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s, 0)"
# A run's messages with their channel: only what sending them and recording their attempts
# reads (not the call: a webhook sends the payload as committed, and mail reads the call).
# The fields in the statement's order: a message's are ``RunMessage``'s, and the channel's
# the model's own, as ``Model.from_db`` takes some of a model's fields.
_RUN_MESSAGE = ("id", "call", "event", "payload", "created_at", "attempts")
_RUN_CHANNEL = ("id", "name", "kind", "target", "secret")
_RUN = sql.statement(
    """
SELECT n.{N.id}, n.{N.call}, n.{N.event}, n.{N.payload}, n.{N.created_at}, n.{N.attempts},
       c.{C.id}, c.{C.name}, c.{C.kind}, c.{C.target}, c.{C.secret}, n.{N.status}
FROM {N} n JOIN {C} c ON c.{C.id} = n.{N.channel}
WHERE n.{N.id} IN """,
    N=Notification,
    C=NotificationChannel,
)
_ATTEMPTS_ADD = sql.statement(
    """
INSERT INTO {D} ({D.notification}, {D.at}, {D.duration_ms}, {D.ok}, {D.status_code}, {D.error})
VALUES """,
    D=DeliveryAttempt,
)
_ATTEMPT_ROW = "(%s, %s, %s, %s, %s, %s)"


def _at(moment: datetime | None, on: BaseDatabaseWrapper | None = None) -> object:
    return sql.prepared(sql.fields(Notification, "next_attempt_at")[0], moment, on=on)


def _key(notification_id: uuid.UUID, on: BaseDatabaseWrapper | None = None) -> object:
    return sql.prepared(sql.fields(Notification, "id")[0], notification_id, on=on)


def _marks(count: int) -> str:
    return "(" + ", ".join(["%s"] * count) + ")"


def notifications_add(
    *, channel_ids: Sequence[int], call_id: uuid.UUID, event: str, payload: str, now: datetime
) -> None:
    """Write one pending message of ``event`` for each channel, due at once, in the
    caller's transaction."""
    on = sql.database()
    call = sql.prepared(sql.fields(Notification, "call")[0], call_id, on=on)
    at = _at(now, on)
    params: list[object] = []
    for channel_id in channel_ids:
        params += [_key(uuid.uuid4(), on), channel_id, call, event, payload, PENDING, at, at]
    sql.execute(_ADD + ", ".join([_ADD_ROW] * len(channel_ids)), params)


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
    # The ids as the database gave them: leased as they are, converted only once taken.
    taken: dict[int, list[object]] = {}
    for stored_id, channel_id in sql.rows(text, params):
        ids = taken.get(channel_id)
        if ids is None:
            if len(taken) >= channels:
                continue  # a later row may still add to a channel already taken
            ids = taken[channel_id] = []
        if len(ids) < run:
            ids.append(stored_id)
    leased = [stored_id for ids in taken.values() for stored_id in ids]
    if leased:
        sql.execute(_LEASE + _marks(len(leased)), [_at(lease_until), *leased])
    (of,) = sql.fields(Notification, "id")
    return [(channel_id, sql.converted_column(ids, of)) for channel_id, ids in taken.items()]


class RunMessage(NamedTuple):
    """A claimed message as its run sends it and keeps its attempt: only what those read."""

    id: uuid.UUID
    call_id: uuid.UUID
    event: str
    payload: str
    created_at: datetime
    attempts: int


def notifications_run_read(
    *, notification_ids: Sequence[uuid.UUID]
) -> tuple[NotificationChannel, list[RunMessage]] | None:
    """The claimed messages (of one channel) still pending, in the order given, and their
    channel; None if none is. The channel has only its kind, target, secret and name."""
    message_fields = sql.fields(Notification, *_RUN_MESSAGE)
    channel_fields = sql.fields(NotificationChannel, *_RUN_CHANNEL)
    on = sql.database()
    keys = [_key(notification_id, on) for notification_id in notification_ids]
    rows = [row for row in sql.rows(_RUN + _marks(len(keys)), keys) if row[-1] == PENDING]
    if not rows:
        return None
    split = len(message_fields)
    channel = NotificationChannel.from_db(
        connection.alias,
        [field.attname for field in channel_fields],
        sql.converted(rows[0][split:-1], channel_fields),  # the same on every row
    )
    by_id = {}
    for row in rows:
        message = RunMessage(*sql.converted(row[:split], message_fields))
        by_id[message.id] = message
    return channel, [by_id[key] for key in notification_ids if key in by_id]


def notification_leases_end(notification_ids: Collection[uuid.UUID]) -> None:
    """Let go of claimed messages without an attempt (the rest of a run that stopped): due
    again at once for any loop."""
    keys = [_key(notification_id) for notification_id in notification_ids]
    sql.execute(_UNLEASE + _marks(len(keys)), keys)


class AttemptEnd(NamedTuple):
    """One attempt at a message, and what it makes of the message."""

    notification_id: uuid.UUID
    at: datetime
    duration_ms: int
    ok: bool
    status_code: int | None
    error: str
    status: str  # the message's, after it
    attempts: int  # the message's attempts, this one counted
    next_attempt_at: datetime | None  # None: as it was
    delivered_at: datetime | None


def notification_attempts_end(*, ends: Sequence[AttemptEnd]) -> None:
    """Keep these attempts, and end each one's message as it says, its lease let go: only
    while it is still pending (an admin's retry or another loop's delivery may have come
    first). Run it in a write transaction."""
    if not ends:
        return
    on = sql.database()
    rows: list[object] = []
    changes: list[tuple[Any, ...]] = []
    for end in ends:
        key = _key(end.notification_id, on)
        rows += [key, _at(end.at, on), end.duration_ms, end.ok, end.status_code, end.error]
        delivered = _at(end.delivered_at, on)
        changes.append(
            (end.status, end.attempts, _at(end.next_attempt_at, on), delivered, key, PENDING)
        )
    sql.execute(_ATTEMPTS_ADD + ", ".join([_ATTEMPT_ROW] * len(ends)), rows)
    sql.execute_many(_END, changes)
