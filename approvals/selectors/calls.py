"""The call as an agent sees it: the call state of the agent API (docs/api.md), sent by the
API, the long-poll and every push, and the agent's own calls."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import capcore
from approvals.models import Agent, Approval, Call


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def call_state(call: Call, *, approvals: Iterable[Approval] | None = None) -> dict[str, Any]:
    """The call state object of the agent API (docs/api.md). ``approvals``: the call's
    approvals with their users, when the caller has read them already; those an edit voided
    are left out."""
    pending = call.status == Call.Status.PENDING
    edited = bool(call.original_arguments_sha256)
    decision = None
    # A held call refused when its approval re-checked its sums was decided too (by nobody).
    if call.status in Call.Status.DECIDED or call.decided_at is not None:
        by = call.decided_by.get_username() if call.decided_by is not None else None
        decision = {"by": by, "comment": call.decision_comment, "at": _iso(call.decided_at)}
    link = f"/api/v1/calls/{call.pk}"
    return {
        "id": str(call.pk),
        "status": call.status,
        "tool": call.tool,
        "principal": call.principal,
        "run_id": call.run_id,
        # The arguments an approver edited the call to (what runs); null when not edited:
        # the agent has its own, and no answer echoes text the model wrote.
        "arguments": call.arguments if edited else None,
        "arguments_sha256": call.arguments_sha256,
        "edited": edited,
        "original_arguments_sha256": call.original_arguments_sha256 or None,
        "reasons": call.reasons,
        # What shadow rules would have said (same objects as reasons): never enforced.
        "shadow": call.shadow,
        "gates": call.gates if pending else [],
        "approvals": []
        if call.status in Call.Status.NEVER_HELD
        else [
            {"by": approval.user.get_username(), "at": _iso(approval.created_at)}
            for approval in (call.approvals.all() if approvals is None else approvals)
            if approval.approve and approval.voided_at is None
        ],
        "decision": decision,
        "created_at": _iso(call.created_at),
        "expires_at": _iso(call.expires_at) if pending else None,
        # The signed receipt of an allowed or approved call (docs/receipts.md); null otherwise.
        "receipt": call.receipt or None,
        "links": {"self": link, "wait": f"{link}/wait", "ws": f"/ws/v1/calls/{call.pk}"},
    }


def call_for_agent(*, agent: Agent, call_id: uuid.UUID | str) -> Call | None:
    """The agent's own call; another agent's call is as absent as a missing one."""
    return (
        Call.objects.select_related("decided_by")
        .prefetch_related("approvals__user")
        .filter(pk=call_id, agent=agent)
        .first()
    )


def calls_for_agent(
    *, agent: Agent, status: str | None, run_id: str | None, limit: int, offset: int
) -> tuple[list[Call], int]:
    """A page of the agent's calls, newest first, and how many there are in all."""
    calls = Call.objects.filter(agent=agent)
    if status is not None:
        calls = calls.filter(status=status)
    if run_id is not None:
        calls = calls.filter(run_id=run_id)
    page = list(
        calls.select_related("decided_by")
        .prefetch_related("approvals__user")
        .order_by("-created_at", "-pk")[offset : offset + limit]
    )
    return page, calls.count()


def call_findings(call: Call) -> list[capcore.Finding]:
    """The stored reasons of a call as capcore findings again."""
    return [
        capcore.Finding(
            capcore.Policy(reason["policy"]),
            reason["rule"],
            capcore.Action(capcore.ActionKind(reason["action"]), reason["gate"]),
            reason["message"],
        )
        for reason in call.reasons
    ]
