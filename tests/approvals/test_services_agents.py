"""Agents and their API tokens: created or updated by name, tokens shown once, stored hashed."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from approvals.models import Agent, AgentToken, AuditEntry
from approvals.services.agents import (
    agent_authenticate,
    agent_create_or_update,
    agent_token_issue,
    agent_token_revoke,
)

pytestmark = pytest.mark.django_db


def test_create_defaults_the_principal_to_the_name() -> None:
    agent = agent_create_or_update(name="billing-bot")
    assert agent.principal == "billing-bot"
    assert agent.mode == "default"
    assert agent.allowed_principals == ""
    assert AuditEntry.objects.filter(action="agent created", object_id=str(agent.pk)).exists()


def test_given_options_update_an_existing_agent_and_others_stay() -> None:
    first = agent_create_or_update(name="bot", principal="alice", mode="prompt")
    again = agent_create_or_update(name="bot", allow_principals=" team-* , ,bob ")
    assert again.pk == first.pk
    assert again.principal == "alice"
    assert again.mode == "prompt"
    assert again.allowed_principals == "team-*,bob"
    assert Agent.objects.count() == 1
    updated = AuditEntry.objects.get(action="agent updated")
    assert '"allowed_principals": ""' in updated.before
    assert '"allowed_principals": "team-*,bob"' in updated.after


def test_reuse_without_options_writes_no_update_entry() -> None:
    agent_create_or_update(name="bot")
    agent_create_or_update(name="bot")
    assert not AuditEntry.objects.filter(action="agent updated").exists()


def test_unknown_mode_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError, match="unknown permission mode") as caught:
        agent_create_or_update(name="bot", mode="ZQXJ77")
    assert "ZQXJ77" not in str(caught.value)
    assert not Agent.objects.exists()


@pytest.mark.parametrize("name", ["", "   ", "x" * 201])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="agent name"):
        agent_create_or_update(name=name)


def test_a_token_is_stored_only_as_its_digest_and_prefix() -> None:
    agent = agent_create_or_update(name="bot")
    token = agent_token_issue(agent=agent)
    assert token.startswith("cs_")
    assert len(token) == 3 + 43
    row = AgentToken.objects.get(agent=agent)
    assert row.digest == hashlib.sha256(token.encode()).hexdigest()
    assert row.prefix == token[:8]
    assert token not in {row.digest, row.prefix}
    entry = AuditEntry.objects.get(action="token issued")
    assert entry.object_id == str(row.pk)
    assert token not in entry.before + entry.after
    assert row.prefix in entry.after


def test_each_token_is_new_and_authenticates_until_revoked() -> None:
    agent = agent_create_or_update(name="bot")
    first = agent_token_issue(agent=agent)
    second = agent_token_issue(agent=agent)
    assert first != second
    assert agent_authenticate(token=first) == agent
    assert agent_authenticate(token=second) == agent
    agent_token_revoke(token_row=AgentToken.objects.get(prefix=first[:8]))
    assert agent_authenticate(token=first) is None
    assert agent_authenticate(token=second) == agent
    assert agent_authenticate(token="cs_not-a-token") is None


def test_revoking_twice_changes_nothing_more() -> None:
    agent = agent_create_or_update(name="bot")
    agent_token_issue(agent=agent)
    row = AgentToken.objects.get()
    agent_token_revoke(token_row=row)
    revoked_at = row.revoked_at
    assert revoked_at is not None
    agent_token_revoke(token_row=row)
    row.refresh_from_db()
    assert row.revoked_at == revoked_at
    assert AuditEntry.objects.filter(action="token revoked").count() == 1


def test_authenticating_notes_the_tokens_last_use_at_most_once_a_minute(db: None) -> None:
    agent = agent_create_or_update(name="bot")
    token = agent_token_issue(agent=agent)
    row = AgentToken.objects.get(agent=agent)
    assert row.last_used_at is None
    assert agent_authenticate(token=token) == agent
    first_use = AgentToken.objects.get(pk=row.pk).last_used_at
    assert first_use is not None
    agent_authenticate(token=token)
    assert AgentToken.objects.get(pk=row.pk).last_used_at == first_use
    AgentToken.objects.filter(pk=row.pk).update(last_used_at=first_use - timedelta(minutes=2))
    agent_authenticate(token=token)
    later = AgentToken.objects.get(pk=row.pk).last_used_at
    assert later is not None
    assert later > first_use - timedelta(minutes=2)
