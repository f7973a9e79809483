"""``Call`` rows: the holder of an idempotency key, one read and locked for a decision, and the
queue's gate test."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NamedTuple, NoReturn

from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, F, Func
from django.db.models.sql.compiler import SQLCompiler

from approvals.models import Call
from approvals.queries import sql

_READ = "SELECT {columns} FROM " + sql.statement("{C} WHERE {C.id} = %s", C=Call)
_KEY_HOLDER = sql.statement(
    "SELECT {C.id}, {C.request_sha256}, {C.created_at} FROM {C}"
    " WHERE {C.agent} = %s AND {C.idempotency_key} = %s",
    C=Call,
)


class KeyHolder(NamedTuple):
    call_id: uuid.UUID
    request_sha256: str
    created_at: datetime


def call_key_holder(*, agent_id: int, idempotency_key: str) -> KeyHolder | None:
    """The call of this agent that holds this idempotency key (at most one does: a unique
    constraint), however old. Every submission with a key reads it, nearly always to find
    none."""
    of = sql.fields(Call, "id", "request_sha256", "created_at")
    found = sql.fetch(_KEY_HOLDER, [agent_id, idempotency_key], of)
    return KeyHolder(*found[0]) if found else None


def call_key(call_id: uuid.UUID) -> Any:
    """A call's id as the database stores it (SQLite: hex text)."""
    return sql.prepared(sql.fields(Call, "id")[0], call_id)


def call_read_locked(call_id: uuid.UUID) -> Call | None:
    """The call, its row locked until the transaction ends; None when there is none."""
    of = sql.fields(Call)
    found = sql.fetch(sql.locking(_READ.format(columns=sql.columns(of))), [call_key(call_id)], of)
    return sql.instance(Call, of, found[0]) if found else None


class HeldAtAny(Func):
    """Whether a call's ``gates`` (a JSON list of names) holds any of ``names``. Django's
    JSONField lookups cannot say it on SQLite (``contains`` is unsupported there and
    ``has_any_keys`` reads an object's keys, not a list's items), hence each backend's own."""

    output_field = BooleanField()

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__(F("gates"))
        self.names = names

    def as_sql(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotSupportedError("the queue reads gate lists on SQLite and PostgreSQL only")

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        gates, params = compiler.compile(self.source_expressions[0])
        marks = ", ".join(["%s"] * len(self.names))
        # Only the compiled column and placeholders go into the text; the names are parameters.
        text = f"EXISTS (SELECT 1 FROM json_each({gates}) AS held WHERE held.value IN ({marks}))"
        return text, (*params, *self.names)

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        # jsonb's ?| matches a list's string items as well as an object's keys.
        gates, params = compiler.compile(self.source_expressions[0])
        return f"({gates} ?| %s)", (*params, list(self.names))
