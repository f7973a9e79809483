"""Writes on agents and their API tokens. A token is shown once, when issued, and stored only
as its SHA-256 digest and its first characters.

Every write that ends an agent's access — a token revoked, the agent disabled or deleted —
also closes, after commit, the sockets and long-polls that authenticated with it
(``pushes.agent_sockets_close``): the admin and the commands write through here only.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from approvals.errors import Invalid
from approvals.models import Agent, AgentToken, AuditEntry
from approvals.realtime import pushes
from approvals.services.admin_changes import model_delete, model_save
from approvals.services.audit import audit_deferred, audit_record, audit_snapshot

TOKEN_PREFIX = "cs_"  # noqa: S105 (a marker, not a secret)
SHOWN_PREFIX_LENGTH = 8
TOKEN_USE_RESOLUTION = timedelta(minutes=1)
UNKNOWN_MODE = "unknown permission mode; one of: " + ", ".join(sorted(Agent.Mode.values))
_MAX_NAME_LENGTH = Agent._meta.get_field("name").max_length or 200


class AgentInvalid(Invalid):
    """A name, principal or mode that cannot be stored; the message never repeats it."""


def _checked(value: str, what: str) -> str:
    """A name or principal: not empty, no surrounding blanks, short enough. The error says
    what was wrong, never the value."""
    value = value.strip()
    if not value:
        raise AgentInvalid(f"the {what} is empty")
    if len(value) > _MAX_NAME_LENGTH:
        raise AgentInvalid(f"the {what} is longer than {_MAX_NAME_LENGTH} characters")
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
    besides the agent's own principal. An unknown ``mode`` is an ``AgentInvalid``."""
    name = _checked(name, "agent name")
    if principal is not None:
        principal = _checked(principal, "principal")
    if mode is not None and mode not in Agent.Mode.values:
        raise AgentInvalid(UNKNOWN_MODE)
    agent = Agent.objects.select_for_update().filter(name=name).first()
    created = agent is None
    before = "" if agent is None else audit_snapshot(agent)
    if agent is None:
        agent = Agent(name=name, principal=principal or name)
    elif principal is not None:
        agent.principal = principal
    if allow_principals is not None:
        agent.allowed_principals = _globs(allow_principals)
    if mode is not None:
        agent.mode = mode
    agent.save()
    after = audit_snapshot(agent)
    if created or after != before:
        audit_record(
            action=AuditEntry.Action.AGENT_CREATED if created else AuditEntry.Action.AGENT_UPDATED,
            obj=agent,
            user=by_user,
            before=before,
            after=after,
        )
    return agent


def token_digest(token: str) -> str:
    """What is stored of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def agent_token_authenticate(*, token: str) -> tuple[Agent, int] | None:
    """The agent holding this unrevoked token, and the token's id, found by the token's digest
    (an index lookup, so no secret is compared byte by byte). Notes the token's use, at most
    once a minute."""
    unrevoked = AgentToken.objects.filter(digest=token_digest(token), revoked_at__isnull=True)
    found = unrevoked.select_related("agent").first()
    if found is None:
        return None
    now = timezone.now()
    if found.last_used_at is None or now - found.last_used_at > TOKEN_USE_RESOLUTION:
        AgentToken.objects.filter(pk=found.pk).update(last_used_at=now)
    return found.agent, found.pk


def agent_authenticate(*, token: str) -> Agent | None:
    """The agent holding this unrevoked token (``agent_token_authenticate``)."""
    found = agent_token_authenticate(token=token)
    return None if found is None else found[0]


@transaction.atomic
def agent_token_issue(*, agent: Agent, by_user: User | None = None) -> str:
    """A new API token for ``agent``. The token is returned once and never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = AgentToken.objects.create(
        agent=agent, digest=token_digest(token), prefix=token[:SHOWN_PREFIX_LENGTH]
    )
    audit_record(
        action=AuditEntry.Action.TOKEN_ISSUED,
        obj=row,
        user=by_user,
        after=f"agent {agent.pk}, prefix {row.prefix}",
    )
    return token


@transaction.atomic
def agent_token_revoke(*, token_row: AgentToken, by_user: User | None = None) -> AgentToken:
    """Revoke a token for good, closing what it opened; revoking a revoked token changes
    nothing."""
    now = timezone.now()
    revoked = AgentToken.objects.filter(pk=token_row.pk, revoked_at__isnull=True).update(
        revoked_at=now
    )
    token_row.refresh_from_db(fields=["revoked_at"])
    if revoked:
        audit_record(
            action=AuditEntry.Action.TOKEN_REVOKED,
            obj=token_row,
            user=by_user,
            before=f"agent {token_row.agent_id}, prefix {token_row.prefix}",
            after="revoked",
            at=now,
        )
        pushes.agent_sockets_close(token_ids=[token_row.pk], code=pushes.CLOSE_TOKEN_REVOKED)
    return token_row


@transaction.atomic
def agent_tokens_revoke(*, agent: Agent, by_user: User | None = None) -> int:
    """Revoke every token of ``agent`` (each audited, each one's sockets closed); how many."""
    rows = list(AgentToken.objects.select_for_update().filter(agent=agent, revoked_at=None))
    # The entries after every row's change: the chain's head is then the last lock taken.
    with audit_deferred():
        for row in rows:
            agent_token_revoke(token_row=row, by_user=by_user)
    return len(rows)


@transaction.atomic
def agent_token_rotate(*, agent: Agent, by_user: User | None = None) -> str:
    """Revoke every token of ``agent`` and issue it a new one, returned once."""
    with audit_deferred():  # the head locked after the new token's row is written
        agent_tokens_revoke(agent=agent, by_user=by_user)
        return agent_token_issue(agent=agent, by_user=by_user)


@transaction.atomic
def agent_save(*, agent: Agent, by_user: User | None = None) -> Agent:
    """Save an agent changed in memory (admin's form), audited as an admin add or change;
    when this disables it, its open sockets and long-polls end (``CLOSE_AGENT_DISABLED``)."""
    was_active = (
        agent.pk is not None
        and Agent.objects.select_for_update().filter(pk=agent.pk, active=True).exists()
    )
    model_save(instance=agent, actor=by_user)
    if was_active and not agent.active:
        pushes.agent_sockets_close(agent_id=agent.pk, code=pushes.CLOSE_AGENT_DISABLED)
    return agent


@transaction.atomic
def agent_delete(*, agent: Agent, by_user: User | None = None) -> None:
    """Delete an agent and its tokens, audited as an admin delete: its open sockets end as
    for a revoked token (``CLOSE_TOKEN_REVOKED``), as the tokens no longer exist."""
    agent_id = agent.pk
    model_delete(instance=agent, actor=by_user)
    pushes.agent_sockets_close(agent_id=agent_id, code=pushes.CLOSE_TOKEN_REVOKED)
