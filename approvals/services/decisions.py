"""A human's decision on a held call: who may decide, the quorum, one deny denies
(docs/reliability.md, "Each held call ends exactly once"), the call's sums checked again when
the quorum is met (docs/rules.md, "Approval re-checks the sums"); an approval may edit the
call's arguments first (docs/ui.md, "Edit, then approve")."""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.utils import timezone

import capcore
from approvals import errors
from approvals.models import Approval, AuditEntry, Call, Ledger, PermissionRule
from approvals.realtime.pushes import notify_call, pushes_together
from approvals.receipts.issue import receipt_issue
from approvals.selectors.calls import call_findings
from approvals.selectors.deciders import (
    calls_decidable,
    decidable_value,
    gates_read_for_user,
    required_approvals,
)
from approvals.services.audit import audit_deferred, audit_entries_record, audit_entry
from approvals.services.calls import (
    CallNotFound,
    call_end,
    call_evaluate_again,
    call_sums_recheck,
    cap_rules_held_for,
    ledger_record,
    records_to_json,
)
from approvals.services.ledgers import ledger_reservations_release, ledger_reserve
from approvals.services.statements import policy_stamp_read
from approvals.stepup import VerifiedPasskey
from capcore.permissions import held_by_mode_only
from config.runtime.sqlite_writers import write_transaction
from notifications.outbox import notifications_enqueue

DEFAULT_DENY_COMMENT = "Denied by a reviewer. Do not retry this call unchanged."
RECHECK_REFUSED = "Refused when approved: {rules} refuses it now."
# An approval that did not end the call, as its audit entry (``call pending``) and the
# batch's report say it: how far the quorum has come, never approval while the call waits.
APPROVAL_RECORDED = "approval recorded ({given} of {required})"
HELD_AT_RECHECK = "{recorded}; the re-check of its sums holds it at {gates} too"


class NotEligible(errors.NotPermitted):
    """The user may not decide this call."""


class BadScope(errors.Invalid):
    """A scope that does not exist, or a scope granting more than the call for a call not
    held by its mode alone; the message says which, never echoing what was sent."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or SCOPE_UNKNOWN)


class DecisionConflict(errors.Conflict):
    """The call is final, changed since it was shown, or decided by this user already."""


class BadArguments(errors.Invalid):
    """Edited arguments that are not a strict JSON object; the message is the reader's."""


class PasskeyRequired(errors.NotPermitted):
    """The call is held at a gate that requires a passkey, and the decision carries no
    assertion made for it (this call, its digest and this verb)."""


class EditRefused(DecisionConflict):
    """A policy refuses the edited call; the message names the refusing rules."""


class EditNotEligible(NotEligible):
    """The edited call would be held at a gate the editor may not decide; the message
    names the gates."""


SCOPE_UNKNOWN = (
    "scope must be one of " + ", ".join(Approval.Scope.values) + ": the decision was not recorded"
)
SCOPE_NOT_GRANTABLE = (
    "only a call held by its permission mode alone may grant more than this call: approve it "
    "with scope once; the decision was not recorded"
)
PASSKEY_REQUIRED = (
    "This call is held at a gate that requires a passkey: approve or deny it with your "
    "passkey. The decision was not recorded."
)
PASSKEY_NOT_FOR_THIS = (
    "The passkey assertion was not made for this decision. The decision was not recorded."
)
# How long an ``hour`` grant lasts from the approval.
HOUR_GRANT = timedelta(hours=1)

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
    """Whether ``user`` may decide ``call`` as it is stored (``deciders.calls_decidable``)."""
    return calls_decidable(user=user).filter(pk=call.pk).exists()


@dataclass(frozen=True, slots=True)
class _Deciding:
    """A call locked for a decision by ``user``: whether they may decide it as stored, and
    every gate's required approvals, and the gates that require a passkey."""

    call: Call
    may_decide: bool
    required: dict[str, int]
    passkey_gates: frozenset[str]


def _calls_lock_deciding(
    *, call_ids: Sequence[uuid.UUID], user: User
) -> dict[uuid.UUID, _Deciding]:
    """The calls found among ``call_ids``, locked with their agents, and who-may-decide
    answered in the same statement (``deciders.decidable_value``). The gates are read just
    before: a gate change committed while the decision waits for the locks is ordered after
    the decision. Several calls are locked in the order of their keys, as no other
    transaction locks more than one: two batches never wait on each other in a cycle."""
    gates = gates_read_for_user(user=user)
    locked = (
        Call.objects.select_for_update(of=("self",))
        .select_related("agent")
        .annotate(may_decide=decidable_value(user=user, closed=gates.closed))
        .filter(pk__in=call_ids)
    )
    if len(call_ids) > 1:
        locked = locked.order_by("pk")
    return {
        call.pk: _Deciding(
            call=call,
            may_decide=bool(call.may_decide),
            required=gates.required,
            passkey_gates=gates.passkey,
        )
        for call in locked
    }


def _passkey_check(
    *,
    call: Call,
    user: User,
    approve: bool,
    passkey_gates: frozenset[str],
    passkey: VerifiedPasskey | None,
) -> None:
    """At a gate that requires a passkey, the decision needs an assertion made by ``user``
    for this call, its current digest and this verb; else ``PasskeyRequired``."""
    if not passkey_gates.intersection(call.gates):
        return
    if passkey is None:
        raise PasskeyRequired(PASSKEY_REQUIRED)
    if (
        passkey.user_id != user.pk
        or passkey.call_id != call.pk
        or passkey.arguments_sha256 != call.arguments_sha256
        or passkey.approve != approve
    ):
        raise PasskeyRequired(PASSKEY_NOT_FOR_THIS)


def _quorum_met(call: Call, approvals: Sequence[Approval], required: dict[str, int]) -> bool:
    """Whether every gate the call is held at has its ``required`` approvals, each approval
    counting at the gates the call was held at when it was given (``Approval.gates``)."""
    given = [a for a in approvals if a.approve and a.voided_at is None]
    if not call.gates:
        return bool(given)
    return all(sum(gate in a.gates for a in given) >= required.get(gate, 1) for gate in call.gates)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision recorded: the call as it now stands, and ``outcome``, what became of it
    in words for the person who decided (``approved``, ``approval recorded (1 of 2)``, …)."""

    call: Call
    outcome: str


def _approval_recorded(given: int, gates: list[str], required: dict[str, int]) -> str:
    """``approval recorded (1 of 2)``: ``given`` approvals counted at ``gates``."""
    return APPROVAL_RECORDED.format(given=given, required=required_approvals(gates, required))


def _decision_entry(
    *,
    call: Call,
    user: User,
    approve: bool,
    comment: str,
    recorded: str,
    now: datetime,
    passkey: VerifiedPasskey | None = None,
) -> AuditEntry:
    """The decider's own entry. An approval that left the call pending (a quorum still to
    meet, or a re-check that held it again or refused it, in entries of their own) is
    ``call pending`` with how far the quorum came, not ``call approved``. A decision made
    with a passkey keeps the assertion: ``{"comment": …, "passkey": …}``."""
    if approve and call.status != Call.Status.APPROVED:
        after = f"{recorded}: {comment}" if comment else recorded
        action = AuditEntry.Action.CALL_PENDING
    else:
        after = comment
        action = AuditEntry.Action.CALL_APPROVED if approve else AuditEntry.Action.CALL_DENIED
    if passkey is not None:
        after = json.dumps({"comment": after, "passkey": passkey.evidence()}, sort_keys=True)
    return audit_entry(action=action, obj=call, user=user, after=after, at=now)


def _outcome(call: Call, *, recorded: str, gates: list[str]) -> str:
    """What became of a call just decided: its status once it ended (a refusal with why),
    else the approval ``recorded`` and any gate a re-check added to ``gates``."""
    if call.status == Call.Status.REFUSED:
        return call.decision_comment
    if call.status != Call.Status.PENDING:
        return Call.Status(call.status).label
    added = [gate for gate in call.gates if gate not in gates]
    if added:
        return HELD_AT_RECHECK.format(recorded=recorded, gates=_gate_names(added))
    return recorded


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
    """The grant an approval's scope creates (docs/ui.md, "Grants"), an ``allow`` rule for
    this agent and this exact tool name: ``run_same`` this run and the call's digest (as
    approved, after any edit), ``run`` this run, ``hour`` every run until an hour after the
    approval, ``always`` every run. Its entry names the call, the approver (the entry's
    user), the scope and what the rule allows."""
    same_run = scope in (Approval.Scope.RUN_SAME, Approval.Scope.RUN)
    rule = PermissionRule.objects.create(
        agent=call.agent,
        pattern=call.tool,
        decision="allow",
        run_id=call.run_id if same_run else None,
        arguments_sha256=call.arguments_sha256 if scope == Approval.Scope.RUN_SAME else "",
        expires_at=now + HOUR_GRANT if scope == Approval.Scope.HOUR else None,
        call=call,
        granted_by=user,
        granted_at=now,
    )
    after: dict[str, object] = {
        "call": str(call.pk),
        "scope": scope,
        "agent": call.agent.name,
        "pattern": rule.pattern,
        "decision": rule.decision,
        "run_id": rule.run_id,
    }
    if rule.arguments_sha256:
        after["arguments_sha256"] = rule.arguments_sha256
    if rule.expires_at is not None:
        after["expires_at"] = rule.expires_at.isoformat()
    return audit_entry(
        action=AuditEntry.Action.STANDING_RULE_CREATED,
        obj=rule,
        user=user,
        after=json.dumps(after, sort_keys=True),
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
        gates=list(call.gates),
    )
    approval.save(force_insert=True)
    return approval


def _call_approve(
    *,
    call: Call,
    evaluation: capcore.Evaluation,
    ledgers: dict[capcore.LedgerKey, Ledger],
    approvals: Sequence[Approval],
    user: User,
    comment: str,
    scope: str,
    now: datetime,
    stamp: int | None,
) -> list[AuditEntry]:
    """The quorum met: the amounts in the ledgers (its reservations become entries), the
    grant a scope other than ``once`` asks for, and the call approved with its receipt,
    signed by the approvals standing and what the caps read (``evaluation.caps``); the
    audit entries still to write."""
    ledger_record(call=call, records=evaluation.records, ledgers=ledgers, now=now)
    entries = [] if scope == Approval.Scope.ONCE else [_allow_tool(call, scope, user, now)]
    receipt_issue(
        call=call,
        status=Call.Status.APPROVED,
        approvals=approvals,
        assessments=evaluation.caps,
        now=now,
    )
    call_end(
        call=call, status=Call.Status.APPROVED, comment=comment, now=now, user=user, stamp=stamp
    )
    return entries


def _hold_again(
    *,
    call: Call,
    recheck: capcore.Evaluation,
    ledgers: dict[capcore.LedgerKey, Ledger],
    approvals: Sequence[Approval],
    now: datetime,
    stamp: int | None,
) -> AuditEntry:
    """The re-check found rules newly over that hold: the call stays pending at their gates
    too. The approvals given so far keep counting at their gates, but not at these, whose
    findings they did not see; one left counting nowhere is void, so its approver may
    decide again. Its reservations are made again as the call now stands."""
    findings = recheck.verdict.reasons
    added = list(recheck.verdict.gates)
    call.reasons = [*call.reasons, *(f.as_reason() for f in findings)]
    call.gates = list(dict.fromkeys([*call.gates, *added]))
    call.pending_records = records_to_json(recheck.records)
    call.updated_at = now
    call.save(update_fields=["reasons", "gates", "pending_records", "updated_at"])
    for approval in approvals:
        kept = [gate for gate in approval.gates if gate not in added]
        if approval.voided_at is None and kept != approval.gates:
            approval.gates = kept
            if not kept:
                approval.voided_at = now
            approval.save(update_fields=["gates", "voided_at"])
    ledger_reservations_release(call_id=call.pk)
    ledger_reserve(
        call=call,
        records=recheck.records,
        ledgers=ledgers,
        held_for=cap_rules_held_for(call_findings(call)),
        now=now,
    )
    notifications_enqueue(call=call, now=now, stamp=stamp)
    return audit_entry(
        action=AuditEntry.Action.CALL_PENDING,
        obj=call,
        after=json.dumps(
            {"reasons": [f.as_reason() for f in findings], "gates": call.gates},
            ensure_ascii=False,
        ),
        at=now,
    )


def _refuse_at_recheck(
    *, call: Call, verdict: capcore.Verdict, now: datetime, stamp: int | None
) -> AuditEntry:
    """The re-check found a rule newly over that refuses (or could not decide): the call is
    refused, its reservations released."""
    call.reasons = [*call.reasons, *(f.as_reason() for f in verdict.reasons)]
    call.save(update_fields=["reasons"])
    comment = RECHECK_REFUSED.format(rules=_rule_names(verdict.reasons))
    call_end(call=call, status=Call.Status.REFUSED, comment=comment, now=now, stamp=stamp)
    return audit_entry(action=AuditEntry.Action.CALL_REFUSED, obj=call, after=comment, at=now)


def _approve_rechecked(
    *,
    call: Call,
    approvals: Sequence[Approval],
    user: User,
    comment: str,
    scope: str,
    now: datetime,
    stamp: int | None,
) -> tuple[list[AuditEntry], list[AuditEntry]]:
    """The quorum met: the call's sums checked again under their ledgers' locks. Nothing
    newly over: approved. A rule newly over: held at its gate too, or refused. The audit
    entries to write before the approver's own, and after it."""
    recheck, ledgers = call_sums_recheck(call=call, now=now, stamp=stamp)
    verdict = recheck.verdict
    if verdict.status is capcore.Status.ALLOWED:
        before = _call_approve(
            call=call,
            evaluation=recheck,
            ledgers=ledgers,
            approvals=approvals,
            user=user,
            comment=comment,
            scope=scope,
            now=now,
            stamp=stamp,
        )
        return before, []
    if verdict.status is capcore.Status.PENDING:
        held = _hold_again(
            call=call, recheck=recheck, ledgers=ledgers, approvals=approvals, now=now, stamp=stamp
        )
        return [], [held]
    return [], [_refuse_at_recheck(call=call, verdict=verdict, now=now, stamp=stamp)]


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
    passkey: VerifiedPasskey | None = None,
) -> Call:
    """Record one eligible user's first decision; finish the call when the quorum is met or
    on a deny. Otherwise raises, changing nothing, in this order: ``CallNotFound``,
    ``NotEligible``, ``BadScope`` or ``BadArguments``, ``DecisionConflict``,
    ``PasskeyRequired``.

    ``passkey``: the assertion verified for this decision, needed when a gate of the call
    requires a passkey (``stepup``); kept in the decision's audit entry.

    ``arguments``: the approver's edit of the call's arguments (an approval only). Absent
    or byte-identical to the call's current arguments, it is an ordinary approval;
    otherwise see ``_edit_and_approve``."""
    # At most one call: the one found, whatever form of its key the caller gave.
    locked = _calls_lock_deciding(call_ids=[call_id], user=user)
    decided = _decide(
        deciding=next(iter(locked.values()), None),
        user=user,
        approve=approve,
        comment=comment,
        arguments_sha256=arguments_sha256,
        scope=scope,
        arguments=arguments,
        now=now,
        passkey=passkey,
    )
    return decided.call


def _decide(
    *,
    deciding: _Deciding | None,
    user: User,
    approve: bool,
    comment: str,
    arguments_sha256: str,
    scope: str,
    arguments: str | None,
    now: datetime | None,
    passkey: VerifiedPasskey | None = None,
) -> Decided:
    """``call_decide``'s work in the caller's transaction, on the call it has locked
    (``deciding``; None: there is no such call), with what became of the call."""
    clock = now
    if deciding is None:
        raise CallNotFound
    if not deciding.may_decide:
        raise NotEligible
    call, required = deciding.call, deciding.required
    # Read after the lock, once: for the re-check's policy and the notifications written.
    stamp = policy_stamp_read()
    edit = arguments if approve and arguments != call.arguments else None
    if scope not in Approval.Scope.values:
        raise BadScope(SCOPE_UNKNOWN)
    if (
        edit is None
        and approve
        and scope != Approval.Scope.ONCE
        and not held_by_mode_only(call_findings(call))
    ):
        raise BadScope(SCOPE_NOT_GRANTABLE)
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
    _passkey_check(
        call=call,
        user=user,
        approve=approve,
        passkey_gates=deciding.passkey_gates,
        passkey=passkey,
    )
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
            call=call,
            user=user,
            arguments=edit,
            comment=comment,
            scope=scope,
            clock=clock,
            required=required,
            stamp=stamp,
            passkey_gates=deciding.passkey_gates,
            passkey=passkey,
        )
    approvals.append(
        _approval_add(call=call, user=user, approve=approve, comment=comment, scope=scope, now=now)
    )
    # Counted before a re-check may void any: how far this approval brought the quorum.
    held_at = list(call.gates)
    given = sum(1 for approval in approvals if approval.approve and approval.voided_at is None)
    entries: list[AuditEntry] = []
    after: list[AuditEntry] = []
    if not approve:
        call_end(
            call=call,
            status=Call.Status.DENIED,
            comment=comment or DEFAULT_DENY_COMMENT,
            now=now,
            user=user,
            stamp=stamp,
        )
    elif _quorum_met(call, approvals, required):
        entries, after = _approve_rechecked(
            call=call,
            approvals=approvals,
            user=user,
            comment=comment,
            scope=scope,
            now=now,
            stamp=stamp,
        )
    else:
        call.updated_at = now
        call.save(update_fields=["updated_at"])
    ended = not approve or call.status == Call.Status.APPROVED
    recorded = "" if ended else _approval_recorded(given, held_at, required)
    entries.append(
        _decision_entry(
            call=call,
            user=user,
            approve=approve,
            comment=comment,
            recorded=recorded,
            now=now,
            passkey=passkey,
        )
    )
    audit_entries_record([*entries, *after])
    notify_call(call, approvals=approvals)
    return Decided(call, _outcome(call, recorded=recorded, gates=held_at))


def _edit_and_approve(
    *,
    call: Call,
    user: User,
    arguments: str,
    comment: str,
    scope: str,
    clock: datetime | None,
    required: dict[str, int],
    stamp: int | None,
    passkey_gates: frozenset[str] = frozenset(),
    passkey: VerifiedPasskey | None = None,
) -> Decided:
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
    # Checked once the edit is stored, where the database can answer for the new gates; a
    # refusal rolls the edit back with the rest of the decision.
    if verdict.status is capcore.Status.PENDING and not user_may_decide(user=user, call=call):
        raise EditNotEligible(EDIT_NOT_ELIGIBLE.format(gates=_gate_names(call.gates)))
    if scope != Approval.Scope.ONCE and not held_by_mode_only(verdict.reasons):
        raise BadScope(SCOPE_NOT_GRANTABLE)
    # An edit that moves the call to a passkey gate needs the approver's passkey too (the
    # assertion made for the call as shown to them).
    if passkey is None and passkey_gates.intersection(call.gates):
        raise PasskeyRequired(PASSKEY_REQUIRED)
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
    if verdict.status is capcore.Status.ALLOWED or required_approvals(call.gates, required) <= 1:
        entries += _call_approve(
            call=call,
            evaluation=evaluation,
            ledgers=ledgers,
            approvals=[approval],
            user=user,
            comment=comment,
            scope=scope,
            now=now,
            stamp=stamp,
        )
    else:  # still held: its reservations as the edited call stands
        ledger_reservations_release(call_id=call.pk)
        ledger_reserve(
            call=call,
            records=evaluation.records,
            ledgers=ledgers,
            held_for=cap_rules_held_for(verdict.reasons),
            now=now,
        )
    # Still held (a quorum of more than one): the editor's is the first approval of the edit.
    recorded = (
        "" if call.status == Call.Status.APPROVED else _approval_recorded(1, call.gates, required)
    )
    entries.append(
        _decision_entry(
            call=call,
            user=user,
            approve=True,
            comment=comment,
            recorded=recorded,
            now=now,
            passkey=passkey,
        )
    )
    audit_entries_record(entries)
    notify_call(call, approvals=[approval])
    return Decided(call, _outcome(call, recorded=recorded, gates=list(call.gates)))


# --- Many at once (docs/ui.md, "Decide many at once") -----------------------------------------

DECIDED = "decided"
# Why one call of a batch was not decided, besides the ``Conflict`` values and the messages
# of the other refusals of ``call_decide``.
BATCH_NOT_FOUND = "no such call"
BATCH_NOT_ELIGIBLE = "you may not decide this call"
BATCH_MALFORMED = "not a call id and the digest of its arguments"
BATCH_FAILED = "the decision could not be recorded"
# The most calls one batch may name: a queue section shows at most 50 rows.
BATCH_LIMIT = 100

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """One call of a batch: ``reason`` ``DECIDED``, or why the call was not decided.
    ``field`` is the value as posted; ``outcome``, what became of a decided call
    (``Decided.outcome``)."""

    field: str
    call_id: uuid.UUID | None
    reason: str
    call: Call | None = None
    outcome: str = ""

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


def _refusal(error: errors.ApplicationError) -> str:
    if isinstance(error, CallNotFound):
        return BATCH_NOT_FOUND
    if isinstance(error, NotEligible):
        return BATCH_NOT_ELIGIBLE
    return error.message or BATCH_FAILED


def calls_decide(
    *,
    user: User,
    approve: bool,
    comment: str,
    calls: Sequence[str],
    now: datetime | None = None,
    passkeys: Mapping[uuid.UUID, VerifiedPasskey] | None = None,
) -> list[BatchOutcome]:
    """Decide each of ``calls`` (``<call id>:<arguments_sha256 shown>``) with one comment,
    scope ``once``: each as ``call_decide`` does, checked and recorded exactly as if decided
    alone. One outcome per distinct call, in the order given; a call that cannot be decided
    is reported and the others are decided all the same. A call at a passkey gate needs its
    own assertion in ``passkeys`` (by call id), else it is refused with the reason.

    The batch is one transaction, each call a savepoint in it (a call that fails rolls back
    alone), and its pushes go out together after the commit: one commit and one hop to the
    event loop for the batch, not one per call (docs/performance.md)."""
    named: list[tuple[str, uuid.UUID, str] | str] = []  # (field, id, digest), or a bad field
    seen: set[uuid.UUID] = set()
    for field in calls:
        parsed = _batch_field(field)
        if parsed is None:
            named.append(field)
        elif parsed[0] not in seen:
            seen.add(parsed[0])
            named.append((field, *parsed))
    outcomes: list[BatchOutcome] = []
    # Every call's audit entries are written together at the end: a batch holding the
    # chain's head while it locks the next call's ledgers would deadlock with a submission
    # holding one of them and waiting for the head.
    with pushes_together(), write_transaction(), audit_deferred():
        locked = _calls_lock_deciding(call_ids=list(seen), user=user)
        for item in named:
            if isinstance(item, str):
                outcomes.append(BatchOutcome(item, None, BATCH_MALFORMED))
                continue
            field, call_id, digest = item
            outcomes.append(
                _batch_decide(
                    field,
                    locked.get(call_id),
                    call_id,
                    digest,
                    user,
                    approve,
                    comment,
                    now,
                    (passkeys or {}).get(call_id),
                )
            )
    return outcomes


def _batch_decide(
    field: str,
    deciding: _Deciding | None,
    call_id: uuid.UUID,
    digest: str,
    user: User,
    approve: bool,
    comment: str,
    now: datetime | None,
    passkey: VerifiedPasskey | None,
) -> BatchOutcome:
    try:
        # A call that fails rolls back alone (its savepoint), and its audit entries with it.
        with audit_deferred(), write_transaction():
            decided = _decide(
                deciding=deciding,
                user=user,
                approve=approve,
                comment=comment,
                arguments_sha256=digest,
                scope=Approval.Scope.ONCE,
                arguments=None,
                now=now,
                passkey=passkey,
            )
    except errors.ApplicationError as error:
        return BatchOutcome(field, call_id, _refusal(error))
    except Exception:
        logger.exception("deciding call %s of a batch failed", call_id)
        return BatchOutcome(field, call_id, BATCH_FAILED)
    return BatchOutcome(field, call_id, DECIDED, decided.call, decided.outcome)
