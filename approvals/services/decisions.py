"""A human's decision on a held call: who may decide, the quorum, one deny denies
(docs/reliability.md, "Each held call ends exactly once"); an approval may edit the call's
arguments first (docs/ui.md, "Edit, then approve")."""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.utils import timezone

import capcore
from approvals.models import Approval, AuditEntry, Call, Ledger, PermissionRule
from approvals.realtime.pushes import notify_call, pushes_together
from approvals.selectors.calls import call_findings
from approvals.selectors.deciders import decidable_call_ids, required_approvals
from approvals.selectors.gates import gates_required_approvals
from approvals.services.audit import audit_entries_record, audit_entry
from approvals.services.calls import (
    call_end,
    call_evaluate_again,
    call_lock,
    ledger_lock,
    ledger_record,
    records_from_json,
    records_to_json,
)
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


class BadArguments(DecisionError):
    """Edited arguments that are not a strict JSON object; the message is the reader's."""

    status = 400


class EditRefused(DecisionConflict):
    """A policy refuses the edited call; the message names the refusing rules."""


class EditNotEligible(NotEligible):
    """The edited call would be held at a gate the editor may not decide; the message
    names the gates."""


# The messages of an edit that changes nothing. Only rule and gate names (written by
# admins) go into them, never text from the arguments.
EDIT_NOT_STRICT = "the edited arguments are not strict JSON: {category}"
EDIT_REFUSED = "the edit is refused by {rules}: the call is unchanged and still pending"
EDIT_NOT_ELIGIBLE = (
    "the edited call would be held at {gates}, where you may not decide: the call is unchanged"
)


class Conflict(enum.Enum):
    FINAL = "the call is already final"
    STALE = "the arguments changed since the page was shown"
    SECOND = "you have already decided this call"


def user_may_decide(*, user: User, call: Call) -> bool:
    """Active, holds ``approvals.decide_call``, in the group of every gate the call is held
    at (superusers: every gate), and not the call's own principal."""
    return call.pk in decidable_call_ids(user=user, calls=[call])


def _required_approvals(call: Call) -> int:
    return required_approvals(call.gates, gates_required_approvals(names=call.gates))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _rule_names(findings: tuple[capcore.Finding, ...]) -> str:
    refusing = [f for f in findings if f.action.kind is capcore.ActionKind.REFUSE]
    return ", ".join(
        f"{f.policy.value} rule {f.rule}"
        if f.rule is not None
        else "a policy error"
        if f.policy is capcore.Policy.ERROR
        else f"the {f.policy.value} policy"
        for f in refusing
    )


def _gate_names(gates: list[str]) -> str:
    return ", ".join(f"gate {gate}" if gate else "the default gate" for gate in gates)


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


def _approval_add(
    *, call: Call, user: User, approve: bool, comment: str, scope: str, now: datetime
) -> Approval:
    """One user's decision on the call's current version."""
    approval = Approval(
        call=call,
        user=user,
        approve=approve,
        comment=comment,
        scope=scope,
        created_at=now,
        arguments_sha256=call.arguments_sha256,
    )
    approval.save(force_insert=True)
    return approval


def _call_approve(
    *,
    call: Call,
    records: Sequence[capcore.LedgerRecord],
    ledgers: dict[capcore.LedgerKey, Ledger],
    user: User,
    comment: str,
    scope: str,
    now: datetime,
) -> list[AuditEntry]:
    """The quorum met: the amounts in the ledgers, the standing rule an ``always`` scope
    asks for, and the call approved; the audit entries still to write."""
    ledger_record(call=call, records=records, ledgers=ledgers, now=now)
    entries = [] if scope == Approval.Scope.ONCE else [_allow_tool(call, scope, user, now)]
    call_end(call=call, status=Call.Status.APPROVED, comment=comment, now=now, user=user)
    return entries


@write_transaction()
def call_decide(
    *,
    call_id: uuid.UUID,
    user: User,
    approve: bool,
    comment: str,
    arguments_sha256: str,
    scope: str = Approval.Scope.ONCE,
    arguments: str | None = None,
    now: datetime | None = None,
) -> Call:
    """Record one eligible user's first decision; finish the call when the quorum is met or
    on a deny. Raises a ``DecisionError`` (and changes nothing) otherwise, checked in the
    order 404, 403, 400 (scope, edited arguments), 409.

    ``arguments``: the approver's edit of the call's arguments (an approval only). Absent
    or byte-identical to the call's current arguments, it is an ordinary approval;
    otherwise see ``_edit_and_approve``."""
    clock = now
    call = call_lock(call_id=call_id)
    if call is None:
        raise CallNotFound
    if not user_may_decide(user=user, call=call):
        raise NotEligible
    edit = arguments if approve and arguments != call.arguments else None
    if scope not in Approval.Scope.values or (
        edit is None
        and approve
        and scope != Approval.Scope.ONCE
        and not held_by_mode_only(call_findings(call))
    ):
        raise BadScope
    if edit is not None:
        try:
            capcore.parse_arguments(edit)
        except capcore.ArgsNotStrict as error:
            raise BadArguments(EDIT_NOT_STRICT.format(category=error.category)) from None
    now = now or timezone.now()
    if call.status != Call.Status.PENDING or (
        call.expires_at is not None and call.expires_at <= now
    ):
        raise DecisionConflict(Conflict.FINAL.value)
    if arguments_sha256 != call.arguments_sha256:
        raise DecisionConflict(Conflict.STALE.value)
    # Read once: for the second-decision check, the quorum, and the state pushed. Only the
    # approvals of the current version count: an edit voids the earlier ones.
    approvals = list(
        call.approvals.filter(voided_at__isnull=True)
        .select_related("user")
        .order_by("created_at", "pk")
    )
    if any(approval.user_id == user.pk for approval in approvals):
        raise DecisionConflict(Conflict.SECOND.value)
    if edit is not None:
        return _edit_and_approve(
            call=call, user=user, arguments=edit, comment=comment, scope=scope, clock=clock
        )
    approvals.append(
        _approval_add(call=call, user=user, approve=approve, comment=comment, scope=scope, now=now)
    )
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
        ledgers = ledger_lock(tuple(sorted(record.ledger for record in records)))
        entries += _call_approve(
            call=call,
            records=records,
            ledgers=ledgers,
            user=user,
            comment=comment,
            scope=scope,
            now=now,
        )
    else:
        call.updated_at = now
        call.save(update_fields=["updated_at"])
    entries.append(
        audit_entry(
            action=AuditEntry.Action.CALL_APPROVED if approve else AuditEntry.Action.CALL_DENIED,
            obj=call,
            user=user,
            after=comment,
            at=now,
        )
    )
    audit_entries_record(entries)
    notify_call(call, approvals=approvals)
    return call


def _edit_and_approve(
    *, call: Call, user: User, arguments: str, comment: str, scope: str, clock: datetime | None
) -> Call:
    """The edit of a pending call's arguments, and the editor's approval of the edited call
    (the caller holds the call's lock and has checked the rest of the decision).

    The edited call is evaluated by every policy again (``call_evaluate_again``). Refused:
    ``EditRefused``; held at a gate the editor may not decide: ``EditNotEligible``; both
    change nothing. Otherwise the edit stands: the call's arguments and digest become the
    edited ones (the agent's original is kept, also over a second edit), the approvals of
    the earlier version are void, the reasons, gates and pending amounts are the new
    evaluation's, the deadline stays, and the editor's approval is the first of the new
    version. When the new evaluation allows the call, or that approval meets the new
    quorum, the call is approved at once with the edited amounts in the ledgers."""
    evaluation, ledgers, now = call_evaluate_again(call=call, arguments=arguments, clock=clock)
    verdict = evaluation.verdict
    if verdict.status is capcore.Status.REFUSED:
        raise EditRefused(EDIT_REFUSED.format(rules=_rule_names(verdict.reasons)))
    before = {"arguments": call.arguments, "arguments_sha256": call.arguments_sha256}
    call.gates = list(verdict.gates)
    if verdict.status is capcore.Status.PENDING and not user_may_decide(user=user, call=call):
        raise EditNotEligible(EDIT_NOT_ELIGIBLE.format(gates=_gate_names(call.gates)))
    if scope != Approval.Scope.ONCE and not held_by_mode_only(verdict.reasons):
        raise BadScope
    if not call.original_arguments_sha256:
        call.original_arguments = call.arguments
        call.original_arguments_sha256 = call.arguments_sha256
    call.arguments = arguments
    call.arguments_sha256 = _digest(arguments)
    call.reasons = [finding.as_reason() for finding in verdict.reasons]
    call.pending_records = records_to_json(evaluation.records)
    call.updated_at = now
    call.save(
        update_fields=[
            "arguments",
            "arguments_sha256",
            "original_arguments",
            "original_arguments_sha256",
            "reasons",
            "gates",
            "pending_records",
            "updated_at",
        ]
    )
    Approval.objects.filter(call=call, voided_at__isnull=True).update(voided_at=now)
    approval = _approval_add(
        call=call, user=user, approve=True, comment=comment, scope=scope, now=now
    )
    entries = [
        audit_entry(
            action=AuditEntry.Action.CALL_EDITED,
            obj=call,
            user=user,
            before=json.dumps(before, ensure_ascii=False),
            after=json.dumps(
                {
                    "arguments": call.arguments,
                    "arguments_sha256": call.arguments_sha256,
                    "original_arguments_sha256": call.original_arguments_sha256,
                    "verdict": verdict.status.value,
                    "gates": call.gates,
                },
                ensure_ascii=False,
            ),
            at=now,
        )
    ]
    if verdict.status is capcore.Status.ALLOWED or _required_approvals(call) <= 1:
        entries += _call_approve(
            call=call,
            records=evaluation.records,
            ledgers=ledgers,
            user=user,
            comment=comment,
            scope=scope,
            now=now,
        )
    entries.append(
        audit_entry(
            action=AuditEntry.Action.CALL_APPROVED, obj=call, user=user, after=comment, at=now
        )
    )
    audit_entries_record(entries)
    notify_call(call, approvals=[approval])
    return call


# --- Many at once (docs/ui.md, "Decide many at once") -----------------------------------------

DECIDED = "decided"
# Why one call of a batch was not decided, besides the ``Conflict`` values (409) and the
# messages of the other ``DecisionError``s.
BATCH_NOT_FOUND = "no such call"
BATCH_NOT_ELIGIBLE = "you may not decide this call"
BATCH_MALFORMED = "not a call id and the digest of its arguments"
BATCH_FAILED = "the decision could not be recorded"
# The most calls one batch may name: a queue section shows at most 50 rows.
BATCH_LIMIT = 100

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """One call of a batch: ``status`` 200 and ``reason`` ``DECIDED``, or the status the
    single decision would have answered and why not. ``field`` is the value as posted."""

    field: str
    call_id: uuid.UUID | None
    status: int
    reason: str
    call: Call | None = None

    @property
    def decided(self) -> bool:
        return self.reason == DECIDED


def _batch_field(field: str) -> tuple[uuid.UUID, str] | None:
    """``<call id>:<arguments_sha256>`` read, or None."""
    call_id, colon, digest = field.strip().partition(":")
    if not colon:
        return None
    try:
        return uuid.UUID(call_id), digest
    except ValueError:
        return None


def _refusal(error: DecisionError) -> str:
    if isinstance(error, CallNotFound):
        return BATCH_NOT_FOUND
    if isinstance(error, NotEligible):
        return BATCH_NOT_ELIGIBLE
    return str(error) or BATCH_FAILED


def calls_decide(
    *,
    user: User,
    approve: bool,
    comment: str,
    calls: Sequence[str],
    now: datetime | None = None,
) -> list[BatchOutcome]:
    """Decide each of ``calls`` (``<call id>:<arguments_sha256 shown>``) with one comment,
    scope ``once``: each through ``call_decide``, checked and recorded exactly as if decided
    alone. One outcome per distinct call, in the order given; a call that cannot be decided
    is reported and the others are decided all the same.

    The batch is one transaction, each call a savepoint in it (a call that fails rolls back
    alone), and its pushes go out together after the commit: one commit and one hop to the
    event loop for the batch, not one per call (docs/performance.md)."""
    outcomes: list[BatchOutcome] = []
    seen: set[uuid.UUID] = set()
    with pushes_together(), write_transaction():
        for field in calls:
            parsed = _batch_field(field)
            if parsed is None:
                outcomes.append(BatchOutcome(field, None, 400, BATCH_MALFORMED))
                continue
            call_id, digest = parsed
            if call_id in seen:
                continue
            seen.add(call_id)
            outcomes.append(_batch_decide(field, call_id, digest, user, approve, comment, now))
    return outcomes


def _batch_decide(
    field: str,
    call_id: uuid.UUID,
    digest: str,
    user: User,
    approve: bool,
    comment: str,
    now: datetime | None,
) -> BatchOutcome:
    try:
        call = call_decide(
            call_id=call_id,
            user=user,
            approve=approve,
            comment=comment,
            arguments_sha256=digest,
            now=now,
        )
    except DecisionError as error:
        return BatchOutcome(field, call_id, error.status, _refusal(error))
    except Exception:
        logger.exception("deciding call %s of a batch failed", call_id)
        return BatchOutcome(field, call_id, 500, BATCH_FAILED)
    return BatchOutcome(field, call_id, 200, DECIDED, call)
