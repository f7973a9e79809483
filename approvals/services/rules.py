"""Writes on cap rules: the line is the rule; its gates exist as soon as it does."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

import capcore
from approvals.models import AuditEntry, CapRule, Gate


@transaction.atomic
def cap_rule_save(*, line: str, enabled: bool = True, description: str = "") -> CapRule:
    """Create or update the rule named in ``line`` (names match under casefold; the line's
    spelling wins). Refuses a line that does not parse with ``capcore.RuleError``."""
    rule = capcore.parse_rule(line)
    if rule.action.kind is capcore.ActionKind.GATE:
        Gate.objects.get_or_create(name=rule.action.gate)
    existing = CapRule.objects.filter(name_folded=rule.name.casefold()).first()
    before = existing.line if existing is not None else ""
    row = existing or CapRule(name_folded=rule.name.casefold())
    row.name = rule.name
    row.line = line.strip(" \t")
    row.enabled = enabled
    row.description = description
    row.save()
    AuditEntry.objects.create(
        at=timezone.now(),
        action="cap rule saved",
        object_type="cap rule",
        object_id=str(row.pk),
        before=before,
        after=row.line,
    )
    return row
