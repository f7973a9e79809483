"""The call page's view model: one call as one person sees it (docs/ui.md)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.utils import timezone

import capcore
from approvals import jsontext
from approvals.models import Approval, AuditEntry, Call, Gate
from approvals.realtime.presence import Waiting, presence_of
from approvals.selectors.audit import decision_passkey_kept
from approvals.selectors.calls import call_findings
from approvals.selectors.caps import CapLine, call_amounts, cap_assessments, cap_line
from approvals.selectors.deciders import decidable_call_ids, required_approvals
from approvals.selectors.ledgers import LedgerShown, keys_shown
from approvals.selectors.rules import stored_rules
from capcore.permissions import held_by_mode_only
from identity.models import Passkey

# How many of the held calls reserving in a ledger the page links to.
RESERVED_LINKS = 5

# The heading of the call's reasons, by what became of it: a refused call was never held.
WHY_HEADINGS = {
    Call.Status.PENDING: "Why it is held",
    Call.Status.REFUSED: "Why it was refused",
    Call.Status.ALLOWED: "Why it was allowed",
}
WHY_HELD = "Why it was held"  # approved, denied, expired or cancelled: held, then ended


@dataclass(frozen=True, slots=True)
class GateProgress:
    name: str
    group: str
    approvals: int
    required: int
    # No such gate (renamed or deleted behind the rules' back): only a superuser may decide.
    # The default gate always exists, with the defaults when it has no row.
    missing: bool = False


@dataclass(frozen=True, slots=True)
class TrailLine:
    """One audit entry as the trail says it: ``said``, its text (a decision made with a
    passkey keeps its comment beside the assertion); ``passkey``, whether it was."""

    entry: AuditEntry
    said: str
    passkey: bool


def _trail_line(entry: AuditEntry) -> TrailLine:
    if entry.user_id is not None and entry.after.startswith("{"):
        kept = decision_passkey_kept(entry=entry)
        if kept is not None:
            return TrailLine(entry, kept.comment, passkey=True)
    return TrailLine(entry, entry.after, passkey=False)


@dataclass(frozen=True, slots=True)
class CallPage:
    """What the call page shows one person: the call, its arguments for people, its caps,
    its gates and approvals, their own decision if any, and the call's audit trail."""

    call: Call
    arguments_pretty: str
    arguments_readable: bool
    audit: list[AuditEntry]
    amounts: tuple[capcore.Limit, ...]
    caps: tuple[CapLine, ...]
    gates: tuple[GateProgress, ...]
    approvals: tuple[Approval, ...]
    required: int
    may_decide: bool
    my_decision: Approval | None
    scope_choice: bool
    now: datetime
    # Whether an agent waits for the call (a pending one; None: not pending, or unknown).
    waiting: Waiting | None = None
    # The agent's original arguments for people, when an approver edited them ("" if not).
    original_pretty: str = ""
    # A gate of the call requires a passkey, and whether this person has one.
    passkey_required: bool = False
    has_passkey: bool = False

    @property
    def trail(self) -> list[TrailLine]:
        return [_trail_line(entry) for entry in self.audit]

    @property
    def edited_by(self) -> str:
        """Who last edited the call's arguments ("" when nobody did), from its audit trail."""
        edits = [e for e in self.audit if e.action == AuditEntry.Action.CALL_EDITED]
        return edits[-1].username if edits else ""

    @property
    def pending(self) -> bool:
        return self.call.status == Call.Status.PENDING

    @property
    def why_heading(self) -> str:
        return WHY_HEADINGS.get(Call.Status(self.call.status), WHY_HELD)

    @property
    def approved_count(self) -> int:
        return sum(1 for approval in self.approvals if approval.approve)

    @property
    def show_form(self) -> bool:
        return self.pending and self.may_decide and self.my_decision is None

    @property
    def may_extend(self) -> bool:
        return self.pending and self.may_decide and not self.call.extended


def _totals(
    call: Call, assessments: tuple[capcore.CapAssessment, ...], *, now: datetime
) -> dict[capcore.LedgerKey, LedgerShown]:
    """The totals of the ledgers of the ``sum`` rules that could read the call: recorded,
    and reserved by the other held calls."""
    windows = {
        a.ledger: a.rule.window
        for a in assessments
        if a.ledger is not None and a.amount is not None and a.limit is not None
    }
    return keys_shown(windows=windows, now=now, leave_out=call.pk, first=RESERVED_LINKS)


def call_page(*, call_id: uuid.UUID, user: User, now: datetime | None = None) -> CallPage | None:
    call = (
        Call.objects.select_related("agent", "decided_by")
        .prefetch_related("approvals__user")
        .filter(pk=call_id)
        .first()
    )
    if call is None:
        return None
    now = now or timezone.now()
    try:
        pretty, readable = jsontext.pretty(capcore.parse_arguments(call.arguments)), True
    except capcore.ArgsNotStrict:
        # Shown as received (escaped by the template), and marked as not strict JSON.
        pretty, readable = call.arguments, False
    original = ""
    if call.original_arguments_sha256:  # only a held call is edited: its original was read
        try:
            original = jsontext.pretty(capcore.parse_arguments(call.original_arguments))
        except capcore.ArgsNotStrict:
            original = call.original_arguments
    audit = list(
        AuditEntry.objects.filter(object_type="call", object_id=str(call.pk))
        .select_related("user", "agent")
        .order_by("at", "pk")
    )
    assessments = cap_assessments(call, stored_rules())
    totals = _totals(call, assessments, now=now) if call.status == Call.Status.PENDING else None
    gates = {
        gate.name: gate for gate in Gate.objects.filter(name__in=call.gates).select_related("group")
    }
    required = {name: gate.required_approvals for name, gate in gates.items()}
    passkey_required = any(gate.require_passkey for gate in gates.values())
    # Those given to an earlier version of the arguments (before an edit) are void.
    current = (a for a in call.approvals.all() if a.voided_at is None)
    approvals = tuple(sorted(current, key=lambda a: (a.created_at, a.pk)))
    # Each approval counts at the gates the call was held at when it was given.
    progress = tuple(
        GateProgress(
            name=name,
            group=gate.group.name if gate is not None and gate.group is not None else "",
            approvals=sum(1 for a in approvals if a.approve and name in a.gates),
            required=required_approvals([name], required),
            missing=gate is None and name != "",
        )
        for name in call.gates
        for gate in [gates.get(name)]
    )
    return CallPage(
        call=call,
        arguments_pretty=pretty,
        arguments_readable=readable,
        audit=audit,
        amounts=call_amounts(assessments),
        caps=tuple(cap_line(a, totals=totals) for a in assessments),
        gates=progress,
        approvals=approvals,
        required=required_approvals(call.gates, required),
        may_decide=call.pk in decidable_call_ids(user=user, calls=[call]),
        my_decision=next((a for a in approvals if a.user_id == user.pk), None),
        scope_choice=held_by_mode_only(call_findings(call)),
        now=now,
        waiting=presence_of([call]).get(call.pk) if call.status == Call.Status.PENDING else None,
        original_pretty=original,
        passkey_required=passkey_required,
        has_passkey=passkey_required and Passkey.objects.filter(user=user).exists(),
    )
