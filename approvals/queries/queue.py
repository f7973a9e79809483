"""``Call`` rows held for a human, as the queue reads them for one person: both sections'
exact counts, then each section's first rows.

The queue is read on every page load, htmx request and socket push. The ORM spent more than
10 ms of Python building these statements, with their two correlated annotations, and the
rows' instances, against 3 ms for the database to answer (docs/performance.md). Which calls
are a person's to decide is still said in one place, ``deciders.decidable_filter``: its
condition is compiled into these statements' text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Q
from django.db.models.sql import Query

from approvals.models import Agent, Approval, Call
from approvals.queries import sql

# Whether this person decided the call, either way. An approval an edit voided is no
# decision: the edited version is theirs to decide.
_DECIDED = sql.statement(
    "EXISTS (SELECT 1 FROM {A} WHERE {A}.{A.call} = {C}.{C.id} AND {A}.{A.user} = %s"
    " AND {A}.{A.voided_at} IS NULL)",
    A=Approval,
    C=Call,
)
# ``{mine}``: the first section's condition, decidable and not decided. The calls table keeps
# its own name in these statements: the condition is compiled against it.
_COUNTS = sql.statement(
    "SELECT COUNT(*), COUNT(CASE WHEN {{mine}} THEN 1 END) FROM {C} WHERE {C}.{C.status} = %s",
    C=Call,
)
# One section's rows (``{section}``), oldest first: read along the status index until
# ``limit`` are found, each with whether this person decided it (``{decided}``) and its
# approvals so far.
_ROWS = sql.statement(
    "SELECT {{decided}}, (SELECT COUNT(*) FROM {A} WHERE {A}.{A.call} = {C}.{C.id}"
    " AND {A}.{A.approve} AND {A}.{A.voided_at} IS NULL), {G}.{G.name}, {{columns}}"
    " FROM {C} JOIN {G} ON {G}.{G.id} = {C}.{C.agent}"
    " WHERE {C}.{C.status} = %s AND {{section}}"
    " ORDER BY {C}.{C.created_at}, {C}.{C.id} LIMIT %s",
    A=Approval,
    C=Call,
    G=Agent,
)

# What a row shows, its amounts and whether an agent waits for it are read from; the rest
# (context, the decision, the idempotency fields) can be large and is left in the database.
_ROW_FIELDS = (
    "id",
    "agent",
    "tool",
    "arguments",
    "arguments_sha256",
    "principal",
    "run_id",
    "reasons",
    "gates",
    "pending_records",
    "created_at",
    "expires_at",
)


@dataclass(frozen=True, slots=True)
class QueueCall:
    call: Call  # only ``_ROW_FIELDS`` loaded
    agent_name: str
    decided: bool  # by this person, either way
    approved: int  # approvals so far


@dataclass(frozen=True, slots=True)
class QueueRead:
    mine: list[QueueCall]  # theirs to decide, oldest first
    others: list[QueueCall]  # the rest, oldest first
    mine_count: int
    others_count: int


def _condition(decidable: Q) -> tuple[str, list[Any]]:
    """``decidable`` as SQL on the calls table, compiled the way Django compiles a
    constraint's condition: the one statement of who may decide stays ``decidable_filter``."""
    query = Query(Call)
    where = query.build_where(decidable)
    text, params = where.as_sql(query.get_compiler(connection=connection), connection)
    return text, list(params)


def queue_read(*, user_id: int, decidable: Q, limit: int) -> QueueRead:
    """The held calls as ``user_id`` sees them: those ``decidable`` (a filter on calls, from
    ``deciders.decidable_filter``) that they have not decided, then the others; at most
    ``limit`` rows a section, the counts exact. A section counted empty is not read."""
    condition, condition_params = _condition(decidable)
    mine = f"({condition}) AND NOT {_DECIDED}"
    mine_params = [*condition_params, user_id]
    pending = Call.Status.PENDING.value
    # Counted apart from the rows: a change in between is pushed, and the page read again.
    ((held, mine_count),) = sql.rows(_COUNTS.format(mine=mine), [*mine_params, pending])
    of = sql.fields(Call, *_ROW_FIELDS)
    columns = sql.columns(of, Call._meta.db_table)

    def section(test: str, *, count: int) -> list[QueueCall]:
        if not count:
            return []
        text = _ROWS.format(decided=_DECIDED, columns=columns, section=test)
        found = sql.rows(text, [user_id, pending, *mine_params, limit])
        return [
            QueueCall(
                call=sql.instance(Call, of, sql.converted(values, of)),
                agent_name=agent_name,
                decided=bool(decided),
                approved=approved,
            )
            for decided, approved, agent_name, *values in found
        ]

    return QueueRead(
        mine=section(mine, count=mine_count),
        others=section(f"NOT ({mine})", count=held - mine_count),
        mine_count=mine_count,
        others_count=held - mine_count,
    )
