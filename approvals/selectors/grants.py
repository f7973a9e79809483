"""The grants an agent holds: the ``allow`` rules approvals created (docs/ui.md, "Grants"),
each with what it allows, who granted it, when and until when."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from approvals.models import Agent, PermissionRule

EXACT_ARGUMENTS = "these exact arguments"
ANY_ARGUMENTS = "any arguments"


@dataclass(frozen=True, slots=True)
class Grant:
    """One grant as the agent's admin page lists it. ``run_id`` None: every run; ``until``
    None: no end besides its run's (when it has one) or a revocation."""

    id: int
    tool: str
    arguments: str  # EXACT_ARGUMENTS or ANY_ARGUMENTS
    arguments_sha256: str
    run_id: str | None
    granted_by: str
    granted_at: datetime | None
    until: datetime | None
    call_id: object

    @property
    def runs(self) -> str:
        """Which runs it covers, in words."""
        if self.run_id is None:
            return "every run"
        return f"run {self.run_id}" if self.run_id else "the default run"


def grants_of_agent(*, agent: Agent, now: datetime | None = None) -> list[Grant]:
    """``agent``'s grants still in force at ``now``, the newest first. Expired ones are left
    out: they allow nothing any more."""
    now = now or timezone.now()
    rows = (
        PermissionRule.objects.filter(
            agent=agent, decision=PermissionRule.Decision.ALLOW, granted_at__isnull=False
        )
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .select_related("granted_by")
        .order_by("-granted_at", "-pk")
    )
    return [
        Grant(
            id=row.pk,
            tool=row.pattern,
            arguments=EXACT_ARGUMENTS if row.arguments_sha256 else ANY_ARGUMENTS,
            arguments_sha256=row.arguments_sha256,
            run_id=row.run_id,
            granted_by="" if row.granted_by is None else row.granted_by.get_username(),
            granted_at=row.granted_at,
            until=row.expires_at,
            call_id=row.call_id,
        )
        for row in rows
    ]
