"""Model-level invariants: the audit log is append-only through the ORM too."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import AppendOnly, AuditEntry


@pytest.fixture
def entry(db: None) -> AuditEntry:
    return AuditEntry.objects.create(
        at=timezone.now(), action="call approved", object_type="call", object_id="1"
    )


def test_an_audit_entry_cannot_be_changed_or_deleted(entry: AuditEntry) -> None:
    entry.action = "call denied"
    with pytest.raises(AppendOnly):
        entry.save()
    with pytest.raises(AppendOnly):
        entry.delete()
    with pytest.raises(AppendOnly):
        AuditEntry.objects.filter(pk=entry.pk).update(action="call denied")
    with pytest.raises(AppendOnly):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.get(pk=entry.pk).action == "call approved"


def test_deleting_a_user_keeps_their_entries(entry: AuditEntry) -> None:
    user = User.objects.create_user("gone")
    AuditEntry.objects.create(
        at=timezone.now(), user=user, action="x", object_type="call", object_id="2"
    )
    user.delete()
    assert AuditEntry.objects.count() == 2
