"""The receipt of a call that ends ``allowed`` or ``approved``: its claims, signed once, in the
transaction that decides it (docs/receipts.md, "The receipt").

Built from what the deciding service holds already — the call, its agent, the approvals read
for the quorum, what the cap rules read of the arguments — so that issuing one costs a
signature and no query.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings

import capcore
from approvals.models import Approval, Call
from approvals.receipts.keys import RECEIPT_TYPE, sign_jws

DEFAULT_GATE = ""
ISSUED_TWICE = "a call's receipt is issued once"
NOT_A_GO = "only an allowed or approved call has a receipt"
GO = frozenset({Call.Status.ALLOWED, Call.Status.APPROVED})


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def receipt_approvals(approvals: Iterable[Approval]) -> list[dict[str, str]]:
    """Who approved, at which gate, when: one item per gate each standing approval counts at
    (``Approval.gates``), in the order given; the default gate is ``""``."""
    return [
        {"by": approval.user.get_username(), "gate": gate, "at": _iso(approval.created_at)}
        for approval in approvals
        if approval.approve and approval.voided_at is None
        for gate in approval.gates or [DEFAULT_GATE]
    ]


def receipt_amounts(assessments: Iterable[capcore.CapAssessment]) -> list[dict[str, str]]:
    """What each cap rule read of the arguments, in the rule's currency and major units, as
    exact decimal text (``"1250.00"``); a rule that read nothing is left out."""
    return [
        {
            "rule": assessment.rule.name,
            "amount": capcore.format_amount(assessment.amount, assessment.limit.exponent),
            "currency": assessment.limit.currency,
        }
        for assessment in assessments
        if assessment.amount is not None and assessment.limit is not None
    ]


def receipt_claims(
    *,
    call: Call,
    status: Call.Status,
    approvals: Iterable[Approval],
    assessments: Iterable[capcore.CapAssessment],
    now: datetime,
) -> dict[str, Any]:
    """The receipt's claims, every one of them required (docs/receipts.md)."""
    issued = int(now.timestamp())
    return {
        "iss": settings.COUNTERSIGN_PUBLIC_URL,
        "sub": str(call.pk),
        "jti": str(call.pk),
        "iat": issued,
        "exp": issued + settings.COUNTERSIGN_RECEIPT_TTL,
        "agent": call.agent.name,
        "principal": call.principal,
        "run_id": call.run_id,
        "tool": call.tool,
        "arguments": call.arguments,
        "arguments_sha256": call.arguments_sha256,
        "status": str(status),
        "approvals": receipt_approvals(approvals),
        "amounts": receipt_amounts(assessments),
        "edited": bool(call.original_arguments_sha256),
    }


def receipt_issue(
    *,
    call: Call,
    status: Call.Status,
    approvals: Iterable[Approval],
    assessments: Iterable[capcore.CapAssessment],
    now: datetime,
) -> None:
    """Sign the receipt of ``call`` as it ends ``status`` (allowed or approved) and set it on
    the call, for the caller to save with the rest of the call's end."""
    if status not in GO:
        raise ValueError(NOT_A_GO)
    if call.receipt:
        raise ValueError(ISSUED_TWICE)
    claims = receipt_claims(
        call=call, status=status, approvals=approvals, assessments=assessments, now=now
    )
    call.receipt = sign_jws(claims, RECEIPT_TYPE)
