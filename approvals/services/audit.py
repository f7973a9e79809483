"""The audit log's only writer: every change of the application is recorded through here, in
the transaction of the change (docs/reliability.md, "The audit log is append-only").

``audit_record`` saves one entry. ``audit_entry`` builds the same entry unsaved, and
``audit_entries_record`` saves several built so, together.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Required, TypedDict, Unpack

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


def _user_access(user: User) -> str:
    """A person's access, never the password or its hash."""
    return json.dumps(
        {
            "username": user.get_username(),
            "is_active": user.is_active,
            "is_staff": user.is_staff,
            "is_superuser": user.is_superuser,
            "groups": sorted(user.groups.values_list("name", flat=True)),
            "permissions": sorted(user.user_permissions.values_list("codename", flat=True)),
        },
        sort_keys=True,
    )


def _group_access(group: Group) -> str:
    permissions = sorted(group.permissions.values_list("codename", flat=True))
    return json.dumps({"name": group.name, "permissions": permissions}, sort_keys=True)


def audit_snapshot(obj: models.Model) -> str:
    """A row as an entry's ``before`` or ``after``: Django's JSON serialization; for a person
    or a group, the access they hold (the password hash is never written)."""
    if isinstance(obj, User):
        return _user_access(obj)
    if isinstance(obj, Group):
        return _group_access(obj)
    return str(serializers.serialize("json", [obj]))


class AuditFields(TypedDict, total=False):
    """What an entry says. Its object is ``obj``, or ``object_type`` and ``object_id`` when
        there is no row at hand (a deleted row, a call known by its id); not both. ``user`` is who
    acted (their username is kept with the link)."""

    action: Required[AuditEntry.Action]
    obj: models.Model | None
    object_type: AuditEntry.ObjectType | None
    object_id: object
    user: User | None
    agent: Agent | None
    before: str
    after: str
    at: datetime | None


def audit_entry(**fields: Unpack[AuditFields]) -> AuditEntry:
    """The entry, unsaved."""
    obj, object_type = fields.get("obj"), fields.get("object_type")
    object_id = fields.get("object_id")
    if obj is not None:
        if object_type is not None or object_id is not None:
            raise TypeError(NO_OBJECT)
        object_type, object_id = audit_object_type(type(obj)), obj.pk
    if object_type is None or object_id is None:
        raise TypeError(NO_OBJECT)
    user = fields.get("user")
    return AuditEntry(
        at=fields.get("at") or timezone.now(),
        user=user,
        username="" if user is None else user.get_username(),
        agent=fields.get("agent"),
        action=fields["action"],
        object_type=object_type,
        object_id=str(object_id),
        before=fields.get("before", ""),
        after=fields.get("after", ""),
    )


def audit_entries_record(entries: Sequence[AuditEntry]) -> None:
    """Write entries built by ``audit_entry``, in one statement, in the caller's transaction."""
    AuditEntry.objects.bulk_create(entries)


def audit_record(**fields: Unpack[AuditFields]) -> AuditEntry:
    """Write one entry, in the caller's transaction."""
    entry = audit_entry(**fields)
    entry.save()
    return entry
