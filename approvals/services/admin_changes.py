"""Saves and deletes made in admin of rows that have no service of their own, each audited in
its transaction with who made it and the row before and after (``audit_snapshot``).

Services of rows with more to do (agents, budgets) write through these too.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import User
from django.db import models, transaction

from approvals.models import AuditEntry
from approvals.services.audit import audit_object_type, audit_record, audit_snapshot


def _stored_snapshot(instance: models.Model) -> str | None:
    """The row as the database holds it (a form has already changed ``instance`` in memory);
    None for a row not stored yet."""
    if instance.pk is None:
        return None
    stored = type(instance)._default_manager.filter(pk=instance.pk).first()
    return None if stored is None else audit_snapshot(stored)


@transaction.atomic
def model_save(
    *,
    instance: models.Model,
    actor: User | None,
    save_related: Callable[[], object] | None = None,
) -> None:
    """Save ``instance``, then ``save_related`` (what a form saves beside the row: its
    many-to-many fields), audited as one admin add or change."""
    before = _stored_snapshot(instance)
    instance.save()
    if save_related is not None:
        save_related()
    audit_record(
        action=AuditEntry.Action.ADMIN_ADD if before is None else AuditEntry.Action.ADMIN_CHANGE,
        obj=instance,
        user=actor,
        before=before or "",
        after=audit_snapshot(instance),
    )


@transaction.atomic
def model_delete(*, instance: models.Model, actor: User | None) -> None:
    """Delete ``instance``, audited as an admin delete with the row as it was."""
    object_id, before = instance.pk, audit_snapshot(instance)
    instance.delete()
    audit_record(
        action=AuditEntry.Action.ADMIN_DELETE,
        object_type=audit_object_type(type(instance)),
        object_id=object_id,
        user=actor,
        before=before,
    )
