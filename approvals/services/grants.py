"""Revoking a grant (docs/ui.md, "Grants"): the ``allow`` rule an approval created is
deleted and the revocation audited; the policy stamp's triggers make every process see it at
its next call."""

from __future__ import annotations

import json
from datetime import datetime

from django.contrib.auth.models import User
from django.utils import timezone

from approvals import errors
from approvals.models import Agent, AuditEntry, PermissionRule
from approvals.services.audit import audit_record
from config.runtime.sqlite_writers import write_transaction


class GrantNotFound(errors.NotFound):
    """No such grant of this agent (revoked already, or never one)."""


@write_transaction()
def grant_revoke(
    *, agent: Agent, grant_id: int, by_user: User | None, now: datetime | None = None
) -> None:
    """Revoke ``agent``'s grant ``grant_id``: the rule is gone for every later call, and a
    ``standing rule revoked`` entry by ``by_user`` says what it allowed. ``GrantNotFound``,
    changing nothing, when the agent has no such grant."""
    rule = (
        PermissionRule.objects.select_for_update()
        .filter(
            pk=grant_id,
            agent=agent,
            decision=PermissionRule.Decision.ALLOW,
            granted_at__isnull=False,
        )
        .first()
    )
    if rule is None:
        raise GrantNotFound
    before = json.dumps(
        {
            "agent": agent.name,
            "pattern": rule.pattern,
            "decision": rule.decision,
            "run_id": rule.run_id,
            "arguments_sha256": rule.arguments_sha256 or None,
            "expires_at": None if rule.expires_at is None else rule.expires_at.isoformat(),
            "call": None if rule.call_id is None else str(rule.call_id),
            "granted_by": rule.granted_by_id,
        },
        sort_keys=True,
    )
    rule_id = rule.pk
    rule.delete()
    audit_record(
        action=AuditEntry.Action.STANDING_RULE_REVOKED,
        object_type=AuditEntry.ObjectType.PERMISSION_RULE,
        object_id=rule_id,
        user=by_user,
        before=before,
        after="revoked",
        at=now or timezone.now(),
    )
