"""Combining findings into one verdict: any refusal refuses, else any hold holds, else the call
is allowed."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from capcore.errors import ArgsNotStrict
from capcore.findings import REFUSE, ActionKind, Finding, Policy

POLICY_ERROR = "policy error"


class Status(enum.Enum):
    ALLOWED = "allowed"
    REFUSED = "refused"
    PENDING = "pending"  # held for a human


@dataclass(frozen=True, slots=True)
class Verdict:
    """The status, the findings that refused or held the call, and (held only) its gates."""

    status: Status
    reasons: tuple[Finding, ...]
    gates: tuple[str, ...]


def combine_findings(findings: Iterable[Finding]) -> Verdict:
    """Any refusal refuses; else any hold holds at the union of the gates; else allow."""
    reasons = tuple(findings)
    if any(f.action.kind is ActionKind.REFUSE for f in reasons):
        return Verdict(Status.REFUSED, reasons, ())
    if reasons:
        gates = tuple(dict.fromkeys(f.action.gate for f in reasons))
        return Verdict(Status.PENDING, reasons, gates)
    return Verdict(Status.ALLOWED, (), ())


def refusal_of_arguments(error: ArgsNotStrict) -> Finding:
    return Finding(
        Policy.ARGUMENTS, None, REFUSE, f"arguments are not strict JSON: {error.category}"
    )


def policy_error() -> Verdict:
    """The verdict when evaluation failed unexpectedly: refused, and no detail shown."""
    return Verdict(Status.REFUSED, (Finding(Policy.ERROR, None, REFUSE, POLICY_ERROR),), ())
