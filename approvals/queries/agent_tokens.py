"""``AgentToken`` rows: the agent holding a token, found by its digest on every request."""

from __future__ import annotations

from datetime import datetime

from approvals.models import Agent, AgentToken
from approvals.queries import sql

_AGENT_BY_DIGEST = sql.statement(
    "SELECT t.{T.id}, t.{T.last_used_at}, {{agent_columns}} FROM {T} t"
    " JOIN {A} a ON a.{A.id} = t.{T.agent}"
    " WHERE t.{T.digest} = %s AND t.{T.revoked_at} IS NULL",
    T=AgentToken,
    A=Agent,
)


def agent_token_find(digest: str) -> tuple[int, datetime | None, Agent] | None:
    """The unrevoked token with this digest: its id, when it was last used, and its agent."""
    token_fields = sql.fields(AgentToken, "id", "last_used_at")
    agent_fields = sql.fields(Agent)
    found = sql.fetch(
        _AGENT_BY_DIGEST.format(agent_columns=sql.columns(agent_fields, "a")),
        [digest],
        token_fields + agent_fields,
    )
    if not found:
        return None
    (token_id, last_used_at, *agent_values) = found[0]
    return token_id, last_used_at, sql.instance(Agent, agent_fields, agent_values)
