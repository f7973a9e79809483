"""Writes on agents and their API tokens. A token is shown once, when issued, and stored only
as its SHA-256 digest and its first characters."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import User
from django.core import serializers
from django.db import transaction
from django.utils import timezone

from approvals import sql
from approvals.models import MODE_CHOICES, Agent, AgentToken, AuditEntry

TOKEN_PREFIX = "cs_"  # noqa: S105 (a marker, not a secret)
SHOWN_PREFIX_LENGTH = 8
TOKEN_USE_RESOLUTION = timedelta(minutes=1)
_MODES = frozenset(value for value, _ in MODE_CHOICES)
_MAX_NAME_LENGTH = Agent._meta.get_field("name").max_length or 200
_AGENT_BY_DIGEST = "SELECT t.id, t.last_used_at, {agent_columns} FROM approvals_agenttoken t"
_AGENT_BY_DIGEST += " JOIN approvals_agent a ON a.id = t.agent_id"
_AGENT_BY_DIGEST += " WHERE t.digest = %s AND t.revoked_at IS NULL"


def _snapshot(agent: Agent) -> str:
    return str(serializers.serialize("json", [agent]))


def _checked(value: str, what: str) -> str:
    """A name or principal: not empty, no surrounding blanks, short enough. The error says
    what was wrong, never the value."""
    value = value.strip()
    if not value:
        raise ValueError(f"the {what} is empty")
    if len(value) > _MAX_NAME_LENGTH:
        raise ValueError(f"the {what} is longer than {_MAX_NAME_LENGTH} characters")
    return value


def _globs(text: str) -> str:
    """Comma-separated globs, each stripped, empty ones dropped."""
    return ",".join(part.strip() for part in text.split(",") if part.strip())


@transaction.atomic
def agent_create_or_update(
    *,
    name: str,
    principal: str | None = None,
    allow_principals: str | None = None,
    mode: str | None = None,
    by_user: User | None = None,
) -> Agent:
    """The agent called ``name``, created if missing (its principal defaulting to its name);
    each option given updates it. ``allow_principals`` is comma-separated globs (``*`` = any)
    besides the agent's own principal. An unknown ``mode`` is a ``ValueError``."""
    name = _checked(name, "agent name")
    if principal is not None:
        principal = _checked(principal, "principal")
    if mode is not None and mode not in _MODES:
        raise ValueError("unknown permission mode; one of: " + ", ".join(sorted(_MODES)))
    agent = Agent.objects.select_for_update().filter(name=name).first()
    created = agent is None
    before = "" if agent is None else _snapshot(agent)
    if agent is None:
        agent = Agent(name=name, principal=principal or name)
    elif principal is not None:
        agent.principal = principal
    if allow_principals is not None:
        agent.allowed_principals = _globs(allow_principals)
    if mode is not None:
        agent.mode = mode
    agent.save()
    after = _snapshot(agent)
    if created or after != before:
        AuditEntry.objects.create(
            at=timezone.now(),
            user=by_user,
            action="agent created" if created else "agent updated",
            object_type="agent",
            object_id=str(agent.pk),
            before=before,
            after=after,
        )
    return agent


def token_digest(token: str) -> str:
    """What is stored of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def agent_authenticate(*, token: str) -> Agent | None:
    """The agent holding this unrevoked token, found by the token's digest (an index lookup,
    so no secret is compared byte by byte). Notes the token's use, at most once a minute.

    In SQL (approvals/sql.py): every request of an agent runs it.
    """
    token_fields = sql.fields(AgentToken, "id", "last_used_at")
    agent_fields = sql.fields(Agent)
    found = sql.fetch(
        _AGENT_BY_DIGEST.format(agent_columns=sql.columns(agent_fields, "a")),
        [token_digest(token)],
        token_fields + agent_fields,
    )
    if not found:
        return None
    (token_id, last_used_at, *agent_values) = found[0]
    now = timezone.now()
    if last_used_at is None or now - last_used_at > TOKEN_USE_RESOLUTION:
        AgentToken.objects.filter(pk=token_id).update(last_used_at=now)
    return sql.instance(Agent, agent_fields, agent_values)  # type: ignore[no-any-return]


@transaction.atomic
def agent_token_issue(*, agent: Agent, by_user: User | None = None) -> str:
    """A new API token for ``agent``. The token is returned once and never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = AgentToken.objects.create(
        agent=agent, digest=token_digest(token), prefix=token[:SHOWN_PREFIX_LENGTH]
    )
    AuditEntry.objects.create(
        at=timezone.now(),
        user=by_user,
        action="token issued",
        object_type="agent token",
        object_id=str(row.pk),
        after=f"agent {agent.pk}, prefix {row.prefix}",
    )
    return token


@transaction.atomic
def agent_token_revoke(*, token_row: AgentToken, by_user: User | None = None) -> AgentToken:
    """Revoke a token for good; revoking a revoked token changes nothing."""
    now = timezone.now()
    revoked = AgentToken.objects.filter(pk=token_row.pk, revoked_at__isnull=True).update(
        revoked_at=now
    )
    token_row.refresh_from_db(fields=["revoked_at"])
    if revoked:
        AuditEntry.objects.create(
            at=now,
            user=by_user,
            action="token revoked",
            object_type="agent token",
            object_id=str(token_row.pk),
            before=f"agent {token_row.agent_id}, prefix {token_row.prefix}",
            after="revoked",
        )
    return token_row
