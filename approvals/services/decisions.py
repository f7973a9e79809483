"""A human's decision on a held call: who may decide, the quorum, one deny denies
(docs/reliability.md, "Each held call ends exactly once")."""

from __future__ import annotations

import enum
import json
import uuid
from datetime import datetime

from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import Approval, AuditEntry, Call, PermissionRule
from approvals.notify import notify_call
from approvals.queries import sql
from approvals.queries.approvals import approvals_with_users
from approvals.queries.calls import call_read_locked
from approvals.queries.gates import gates_required_approvals
from approvals.selectors.calls import call_findings
from approvals.selectors.deciders import decidable_call_ids, required_approvals
from approvals.services.audit import audit_entry
from approvals.services.calls import call_end, ledger_lock, ledger_record, records_from_json
from capcore.permissions import held_by_mode_only
from config.runtime.sqlite_writers import write_transaction

DEFAULT_DENY_COMMENT = "Denied by a reviewer. Do not retry this call unchanged."


class DecisionError(Exception):
    """A decision that changes nothing; ``status`` is the HTTP answer."""

    status = 400


class CallNotFound(DecisionError):
    status = 404


class NotEligible(DecisionError):
    status = 403


class BadScope(DecisionError):
    status = 400


class DecisionConflict(DecisionError):
    status = 409


class Conflict(enum.Enum):
    FINAL = "the call is already final"
    STALE = "the arguments changed since the page was shown"
    SECOND = "you have already decided this call"


def user_may_decide(*, user: User, call: Call) -> bool:
    """Active, holds ``approvals.decide_call``, in the group of every gate the call is held
    at (superusers: every gate), and not the call's own principal."""
    return call.pk in decidable_call_ids(user=user, calls=[call])


def _required_approvals(call: Call) -> int:
    return required_approvals(call.gates, gates_required_approvals(call.gates))


def _allow_tool(call: Call, scope: str, user: User, now: datetime) -> AuditEntry:
    """The standing ``allow`` rule an approval's scope creates, and its entry: which call,
    which approver (the entry's user), which scope."""
    rule = PermissionRule.objects.create(
        agent=call.agent,
        pattern=call.tool,
        decision="allow",
        run_id=call.run_id if scope == Approval.Scope.RUN else None,
    )
    return audit_entry(
        action=AuditEntry.Action.STANDING_RULE_CREATED,
        obj=rule,
        user=user,
        after=json.dumps(
            {
                "call": str(call.pk),
                "scope": scope,
                "agent": call.agent.name,
                "pattern": rule.pattern,
                "decision": rule.decision,
                "run_id": rule.run_id,
            },
            sort_keys=True,
        ),
        at=now,
    )


@write_transaction()
def call_decide(
    *,
    call_id: uuid.UUID,
    user: User,
    approve: bool,
    comment: str,
    arguments_sha256: str,
    scope: str = Approval.Scope.ONCE,
    now: datetime | None = None,
) -> Call:
    """Record one eligible user's first decision; finish the call when the quorum is met or
    on a deny. Raises a ``DecisionError`` (and changes nothing) otherwise, checked in the
    order 404, 403, 400 (scope), 409."""
    call = call_read_locked(call_id)
    if call is None:
        raise CallNotFound
    if not user_may_decide(user=user, call=call):
        raise NotEligible
    if scope not in Approval.Scope.values or (
        approve and scope != Approval.Scope.ONCE and not held_by_mode_only(call_findings(call))
    ):
        raise BadScope
    now = now or timezone.now()
    if call.status != Call.Status.PENDING or (
        call.expires_at is not None and call.expires_at <= now
    ):
        raise DecisionConflict(Conflict.FINAL.value)
    if arguments_sha256 != call.arguments_sha256:
        raise DecisionConflict(Conflict.STALE.value)
    # Read once: for the second-decision check, the quorum, and the state pushed.
    approvals = approvals_with_users(call)
    if any(approval.user_id == user.pk for approval in approvals):
        raise DecisionConflict(Conflict.SECOND.value)
    approval = Approval(
        call=call, user=user, approve=approve, comment=comment, scope=scope, created_at=now
    )
    sql.insert([approval])
    approvals.append(approval)
    entries: list[AuditEntry] = []
    if not approve:
        call_end(
            call=call,
            status=Call.Status.DENIED,
            comment=comment or DEFAULT_DENY_COMMENT,
            now=now,
            user=user,
        )
    elif sum(approval.approve for approval in approvals) >= _required_approvals(call):
        records = records_from_json(call.pending_records)
        keys = tuple(sorted(record.ledger for record in records))
        ledger_record(call=call, records=records, ledgers=ledger_lock(keys), now=now)
        if scope != Approval.Scope.ONCE:
            entries.append(_allow_tool(call, scope, user, now))
        call_end(call=call, status=Call.Status.APPROVED, comment=comment, now=now, user=user)
    else:
        call.updated_at = now
        sql.update(call, "updated_at")
    entries.append(
        audit_entry(
            action=AuditEntry.Action.CALL_APPROVED if approve else AuditEntry.Action.CALL_DENIED,
            obj=call,
            user=user,
            after=comment,
            at=now,
        )
    )
    sql.insert(entries)
    notify_call(call, approvals=approvals)
    return call
