"""The audit log's only writer: every change of the application is recorded through here, in
the transaction of the change (docs/reliability.md, "The audit log is append-only").

``audit_record`` saves one entry. ``audit_entry`` builds the same entry unsaved, for the hot
paths that insert their rows together with others (``sql.insert``).
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import Group, User
from django.core import serializers
from django.db import models
from django.utils import timezone

from approvals.models import (
    Agent,
    AgentToken,
    AuditEntry,
    Budget,
    Call,
    CapRule,
    Gate,
    LedgerEntry,
    PermissionRule,
    ToolClass,
)

NO_OBJECT = "an audit entry names its object: obj, or object_type and object_id"
NOT_AUDITED = "no audit object type for this model"

_OBJECT_TYPES: dict[type[models.Model], AuditEntry.ObjectType] = {
    Agent: AuditEntry.ObjectType.AGENT,
    AgentToken: AuditEntry.ObjectType.AGENT_TOKEN,
    Budget: AuditEntry.ObjectType.BUDGET,
    Call: AuditEntry.ObjectType.CALL,
    CapRule: AuditEntry.ObjectType.CAP_RULE,
    Gate: AuditEntry.ObjectType.GATE,
    Group: AuditEntry.ObjectType.GROUP,
    LedgerEntry: AuditEntry.ObjectType.LEDGER_ENTRY,
    PermissionRule: AuditEntry.ObjectType.PERMISSION_RULE,
    ToolClass: AuditEntry.ObjectType.TOOL_CLASS,
    User: AuditEntry.ObjectType.USER,
}


def audit_object_type(model: type[models.Model]) -> AuditEntry.ObjectType:
    """How the log names rows of ``model``; a model the log does not know is a ``KeyError``."""
    try:
        return _OBJECT_TYPES[model]
    except KeyError:
        raise KeyError(NOT_AUDITED) from None


def audit_snapshot(obj: models.Model) -> str:
    """A row as an entry's ``before`` or ``after``: Django's JSON serialization."""
    return str(serializers.serialize("json", [obj]))


def audit_entry(
    *,
    action: AuditEntry.Action,
    obj: models.Model | None = None,
    object_type: AuditEntry.ObjectType | None = None,
    object_id: object = None,
    user: User | None = None,
    agent: Agent | None = None,
    before: str = "",
    after: str = "",
    at: datetime | None = None,
) -> AuditEntry:
    """The entry, unsaved. Its object is ``obj``, or ``object_type`` and ``object_id`` when
    there is no row at hand (a deleted row, a call known by its id); not both."""
    if obj is not None:
        if object_type is not None or object_id is not None:
            raise TypeError(NO_OBJECT)
        object_type, object_id = audit_object_type(type(obj)), obj.pk
    if object_type is None or object_id is None:
        raise TypeError(NO_OBJECT)
    return AuditEntry(
        at=at or timezone.now(),
        user=user,
        agent=agent,
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        before=before,
        after=after,
    )


def audit_record(
    *,
    action: AuditEntry.Action,
    obj: models.Model | None = None,
    object_type: AuditEntry.ObjectType | None = None,
    object_id: object = None,
    user: User | None = None,
    agent: Agent | None = None,
    before: str = "",
    after: str = "",
    at: datetime | None = None,
) -> AuditEntry:
    """Write one entry (``audit_entry``'s arguments), in the caller's transaction."""
    entry = audit_entry(
        action=action,
        obj=obj,
        object_type=object_type,
        object_id=object_id,
        user=user,
        agent=agent,
        before=before,
        after=after,
        at=at,
    )
    entry.save()
    return entry
