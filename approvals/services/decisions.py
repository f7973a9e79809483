"""A human's decision on a held call (``policies.md``, "Gates, approvers, quorum")."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

import capcore
from approvals import selectors, sql
from approvals.models import Approval, AuditEntry, Call, PermissionRule
from approvals.notify import notify_call
from approvals.services.calls import ledger_lock, ledger_record, records_from_json
from approvals.services.transactions import write_transaction

DEFAULT_DENY_COMMENT = "Denied by a reviewer. Do not retry this call unchanged."
SCOPES = ("once", "run", "always")


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
    return call.pk in selectors.decidable_call_ids(user=user, calls=[call])


# The statements every decision runs, in SQL (approvals/sql.py says why).
_REQUIRED_APPROVALS = "SELECT max(required_approvals) FROM approvals_gate WHERE name IN ({names})"
_APPROVALS_READ = """
SELECT {approval_columns}, {user_columns} FROM approvals_approval a
JOIN auth_user u ON u.id = a.user_id
WHERE a.call_id = %s ORDER BY a.created_at, a.id
"""
_CALL_READ = "SELECT {columns} FROM approvals_call WHERE id = %s"


def _required_approvals(call: Call) -> int:
    # Every approver is eligible at every gate of the call, so each approval counts at each.
    if not call.gates:
        return 1
    names = ", ".join(["%s"] * len(call.gates))
    ((required,),) = sql.rows(_REQUIRED_APPROVALS.format(names=names), call.gates)
    return 1 if required is None else int(required)  # None: no gate configured


def _call_key(call_id: uuid.UUID) -> Any:
    return sql.prepared(sql.fields(Call, "id")[0], call_id)


def _call_locked(call_id: uuid.UUID) -> Call | None:
    of = sql.fields(Call)
    found = sql.fetch(
        sql.locking(_CALL_READ.format(columns=sql.columns(of))), [_call_key(call_id)], of
    )
    return sql.instance(Call, of, found[0]) if found else None


def _approvals(call: Call) -> list[Approval]:
    """The call's approvals, oldest first, with their users."""
    approval_fields, user_fields = sql.fields(Approval), sql.fields(User)
    read = _APPROVALS_READ.format(
        approval_columns=sql.columns(approval_fields, "a"),
        user_columns=sql.columns(user_fields, "u"),
    )
    approvals, split = [], len(approval_fields)
    for values in sql.fetch(read, [_call_key(call.pk)], approval_fields + user_fields):
        approval: Approval = sql.instance(Approval, approval_fields, values[:split])
        approval.user = sql.instance(User, user_fields, values[split:])
        approvals.append(approval)
    return approvals


def _finish(call: Call, status: str, user: User, comment: str, now: datetime) -> None:
    call.status = status
    call.decided_at = now
    call.decided_by = user
    call.decision_comment = comment
    call.updated_at = now
    sql.update(call, "status", "decided_at", "decided_by", "decision_comment", "updated_at")


def _allow_tool(call: Call, scope: str) -> None:
    PermissionRule.objects.create(
        agent=call.agent,
        pattern=call.tool,
        decision="allow",
        run_id=call.run_id if scope == "run" else None,
    )


@write_transaction()
def call_decide(
    *,
    call_id: uuid.UUID,
    user: User,
    approve: bool,
    comment: str,
    arguments_sha256: str,
    scope: str = "once",
    now: datetime | None = None,
) -> Call:
    """Record one eligible user's first decision; finish the call when the quorum is met or
    on a deny. Raises a ``DecisionError`` (and changes nothing) otherwise, checked in the
    order 404, 403, 400 (scope), 409."""
    call = _call_locked(call_id)
    if call is None:
        raise CallNotFound
    if not user_may_decide(user=user, call=call):
        raise NotEligible
    if scope not in SCOPES or (
        approve and scope != "once" and not capcore.mode_hold_only(selectors.call_findings(call))
    ):
        raise BadScope
    now = now or timezone.now()
    if call.status != "pending" or (call.expires_at is not None and call.expires_at <= now):
        raise DecisionConflict(Conflict.FINAL.value)
    if arguments_sha256 != call.arguments_sha256:
        raise DecisionConflict(Conflict.STALE.value)
    # Read once: for the second-decision check, the quorum, and the state pushed.
    approvals = _approvals(call)
    if any(approval.user_id == user.pk for approval in approvals):
        raise DecisionConflict(Conflict.SECOND.value)
    approval = Approval(
        call=call, user=user, approve=approve, comment=comment, scope=scope, created_at=now
    )
    sql.insert([approval])
    approvals.append(approval)
    if not approve:
        _finish(call, "denied", user, comment or DEFAULT_DENY_COMMENT, now)
    elif sum(approval.approve for approval in approvals) >= _required_approvals(call):
        records = records_from_json(call.pending_records)
        keys = tuple(sorted(record.ledger for record in records))
        ledger_record(call=call, records=records, ledgers=ledger_lock(keys), now=now)
        if scope != "once":
            _allow_tool(call, scope)
        _finish(call, "approved", user, comment, now)
    else:
        call.updated_at = now
        sql.update(call, "updated_at")
    sql.insert(
        [
            AuditEntry(
                at=now,
                user_id=user.pk,
                action="call approved" if approve else "call denied",
                object_type="call",
                object_id=str(call.pk),
                after=comment,
            )
        ]
    )
    notify_call(call, approvals=approvals)
    return call
