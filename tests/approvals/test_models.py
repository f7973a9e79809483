"""Model-level invariants: the audit log is append-only through the ORM too; the vocabulary's
sets agree with each other and the choices capcore reads agree with capcore's enums."""

from __future__ import annotations

import enum

import pytest
from django.contrib.auth.models import User
from django.db import models

import capcore
from approvals.models import (
    Agent,
    AppendOnly,
    AuditEntry,
    Budget,
    Call,
    PermissionRule,
    RunCounter,
    ToolClass,
)
from approvals.services.audit import audit_record

Status = Call.Status


@pytest.fixture
def entry(db: None) -> AuditEntry:
    return audit_record(
        action=AuditEntry.Action.CALL_APPROVED, object_type=AuditEntry.ObjectType.CALL, object_id=1
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


def test_a_user_with_entries_cannot_be_deleted(entry: AuditEntry) -> None:
    user = User.objects.create_user("kept")
    audit_record(
        action=AuditEntry.Action.CALL_DENIED,
        object_type=AuditEntry.ObjectType.CALL,
        object_id=2,
        user=user,
    )
    with pytest.raises(models.ProtectedError):
        user.delete()
    assert AuditEntry.objects.get(action=AuditEntry.Action.CALL_DENIED).username == "kept"


def test_a_status_and_its_stored_value_are_one_key() -> None:
    # The sets hold the values; calls read from the database hold them too.
    assert Status.ALLOWED in Status.FINAL
    assert Call(status="allowed").status in Status.NEVER_HELD


def test_a_verdict_is_a_status_and_only_pending_is_held() -> None:
    verdicts = {status.value for status in capcore.Status}
    assert verdicts <= set(Status.values)
    assert verdicts - {Status.PENDING} == Status.NEVER_HELD


@pytest.mark.parametrize(
    ("choices", "capcore_enum"),
    [
        (Agent.Mode, capcore.Mode),
        (ToolClass.Kind, capcore.ToolClass),
        (PermissionRule.Decision, capcore.Decision),
        (Budget.Scope, capcore.BudgetScope),
        (Budget.Action, capcore.ActionKind),
    ],
)
def test_the_choices_capcore_reads_are_its_values(
    choices: type[models.TextChoices], capcore_enum: type[enum.Enum]
) -> None:
    assert set(choices.values) == {member.value for member in capcore_enum}


def test_stored_fields_take_their_choices_from_the_vocabulary() -> None:
    fields = {
        (Call, "status"): Status,
        (Agent, "mode"): Agent.Mode,
        (RunCounter, "scope"): Budget.Scope,
        (AuditEntry, "action"): AuditEntry.Action,
        (AuditEntry, "object_type"): AuditEntry.ObjectType,
    }
    for (model, name), choices in fields.items():
        field = model._meta.get_field(name)
        assert isinstance(field, models.CharField)
        assert field.choices == choices.choices


def test_every_status_has_its_audit_action() -> None:
    assert [AuditEntry.Action.call(status) for status in Status] == [
        AuditEntry.Action(f"call {status}") for status in Status.values
    ]
