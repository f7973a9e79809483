"""The audit log's only writer: every change of the application is recorded through here, in
the transaction of the change (docs/reliability.md, "The audit log is append-only").

``audit_record`` saves one entry. ``audit_entry`` builds the same entry unsaved, and
``audit_entries_record`` saves several built so, together.

Every entry is linked into the audit chain as it is written (approvals/audit_chain.py): the
writer locks the chain's head row, numbers its entries after it, hashes each onto the one
before and moves the head on. The lock is held until the commit, so writers take turns from
there and ``seq`` follows the order of the commits: a reader never sees an entry before one
with a smaller ``seq`` is visible. Write an entry as the last write of its transaction, or
inside ``audit_deferred()``, which writes a block's entries as it ends: the head is then the
last lock the transaction takes, and holding it never waits for another.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Required, TypedDict, Unpack

from django.contrib.auth.models import Group, User
from django.core import serializers
from django.db import models, transaction
from django.utils import timezone

from approvals.audit_chain import GENESIS_HASH, audit_entry_hash
from approvals.models import (
    AUDIT_CHAIN_HEAD,
    Agent,
    AgentToken,
    AuditChainHead,
    AuditEntry,
    Budget,
    Call,
    CapRule,
    Gate,
    LedgerEntry,
    PermissionRule,
    ToolClass,
)
from approvals.services.statements import deferred_constraints_check

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


# The entries of the innermost ``audit_deferred`` block, None outside any.
_deferred: ContextVar[list[AuditEntry] | None] = ContextVar("audit_deferred", default=None)


def _head_locked() -> tuple[int, str]:
    """The chain's head, locked until the commit (SQLite: the transaction holds the write
    lock already). A database whose tables were emptied has no head row: it is made again
    from the last entry, or from the genesis."""
    head = AuditChainHead.objects.select_for_update().filter(pk=AUDIT_CHAIN_HEAD)
    try:
        return head.values_list("seq", "hash").get()
    except AuditChainHead.DoesNotExist:
        pass
    last = AuditEntry.objects.order_by("-seq").values_list("seq", "hash").first()
    seq, hash_ = last or (0, GENESIS_HASH)
    # Two first writers at once: one row is made, the other waits for it and locks it.
    AuditChainHead.objects.bulk_create(
        [AuditChainHead(pk=AUDIT_CHAIN_HEAD, seq=seq, hash=hash_)], ignore_conflicts=True
    )
    return head.values_list("seq", "hash").get()


def _chain_write(entries: Sequence[AuditEntry]) -> None:
    """Link ``entries`` after the chain's head, in order, and write them with the head moved
    on: in the caller's transaction, or in one of their own outside any."""
    if not entries:
        return
    with transaction.atomic(savepoint=False):
        deferred_constraints_check()
        seq, prev_hash = _head_locked()
        for entry in entries:
            seq += 1
            entry.seq, entry.prev_hash = seq, prev_hash
            entry.hash = prev_hash = audit_entry_hash(entry)
        AuditEntry.objects.bulk_create(entries)
        AuditChainHead.objects.filter(pk=AUDIT_CHAIN_HEAD).update(seq=seq, hash=prev_hash)


@contextmanager
def audit_deferred() -> Iterator[None]:
    """Entries recorded inside the block are written when it ends, all together and in the
    order recorded, so that the chain's head is locked as late as the block allows; if it
    raises, they are dropped with it. Enter it inside the transaction, around the code whose
    savepoints end with it: an entry recorded in a savepoint rolled back while the block
    goes on would still be written. A block inside another hands its entries to the outer
    one. Until then ``audit_record`` returns them unsaved."""
    outer = _deferred.get()
    entries: list[AuditEntry] = []
    token = _deferred.set(entries)
    try:
        yield
    finally:
        _deferred.reset(token)
    if outer is not None:
        outer.extend(entries)
    else:
        _chain_write(entries)


def audit_entries_record(entries: Sequence[AuditEntry]) -> None:
    """Write entries built by ``audit_entry``, in one statement, in the caller's transaction
    (in an ``audit_deferred`` block: as it ends)."""
    deferred = _deferred.get()
    if deferred is not None:
        deferred.extend(entries)
    else:
        _chain_write(entries)


def audit_record(**fields: Unpack[AuditFields]) -> AuditEntry:
    """Write one entry, in the caller's transaction (in an ``audit_deferred`` block: as it
    ends)."""
    entry = audit_entry(**fields)
    audit_entries_record([entry])
    return entry
