"""The audit writer: one function names every entry's object the same way, saved or not."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User

from approvals.models import Agent, AuditEntry, Call, CapRule, PermissionRule
from approvals.services.audit import (
    NO_OBJECT,
    audit_entry,
    audit_object_type,
    audit_record,
    audit_snapshot,
)
from approvals.services.decisions import call_decide
from tests.factories import call_make, payment, user_make

APPROVALS = Path(__file__).resolve().parents[2] / "approvals"
NOTIFICATIONS = APPROVALS.parent / "notifications"
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_an_entry_is_built_unsaved_for_a_bulk_insert(db: None) -> None:
    agent = Agent.objects.create(name="bot", principal="carol")
    entry = audit_entry(action=AuditEntry.Action.CALL_PENDING, obj=agent, agent=agent, at=AT)
    assert entry.pk is None
    assert not AuditEntry.objects.exists()
    assert (entry.action, entry.object_type, entry.object_id) == (
        "call pending",
        "agent",
        str(agent.pk),
    )
    assert (entry.agent, entry.at, entry.before, entry.after) == (agent, AT, "", "")


def test_a_recorded_entry_is_saved(db: None) -> None:
    user = User.objects.create_user("alice")
    rule = CapRule.objects.create(name="big", name_folded="big", line="x")
    entry = audit_record(
        action=AuditEntry.Action.CAP_RULE_SAVED, obj=rule, user=user, before="a", after="b"
    )
    stored = AuditEntry.objects.get(action=AuditEntry.Action.CAP_RULE_SAVED)
    assert stored.pk == entry.pk
    assert (stored.object_type, stored.object_id, stored.user) == ("cap rule", str(rule.pk), user)
    assert stored.username == "alice"
    assert (stored.before, stored.after) == ("a", "b")
    assert stored.at is not None


def test_an_object_known_by_its_id_is_named_by_type_and_id(db: None) -> None:
    entry = audit_record(
        action=AuditEntry.Action.CALL_EXPIRED, object_type=AuditEntry.ObjectType.CALL, object_id=7
    )
    assert (entry.object_type, entry.object_id) == ("call", "7")


@pytest.mark.parametrize(
    "names",
    [
        {},
        {"object_type": AuditEntry.ObjectType.CALL},
        {"object_id": 7},
        {"obj": Group(pk=1, name="g"), "object_id": 7},
    ],
)
def test_an_entry_names_its_object_exactly_one_way(names: dict[str, object]) -> None:
    with pytest.raises(TypeError, match=NO_OBJECT):
        audit_entry(action=AuditEntry.Action.ADMIN_DELETE, **names)  # type: ignore[arg-type]


def test_each_model_has_one_spelling() -> None:
    assert audit_object_type(CapRule) == "cap rule"
    assert audit_object_type(User) == "user"
    assert audit_object_type(Call) == AuditEntry.ObjectType.CALL
    with pytest.raises(KeyError):
        audit_object_type(AuditEntry)


def test_a_snapshot_is_the_rows_json(db: None) -> None:
    agent = Agent.objects.create(name="bot", principal="carol")
    assert '"principal": "carol"' in audit_snapshot(agent)


def test_nothing_else_writes_an_audit_entry() -> None:
    """No ``AuditEntry(...)`` or ``AuditEntry.objects.create`` outside ``services/audit.py``."""
    writers = []
    for path in sorted([*APPROVALS.rglob("*.py"), *NOTIFICATIONS.rglob("*.py")]):
        if "migrations" in path.parts or path == APPROVALS / "services" / "audit.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name in {
                "AuditEntry",
                "AuditEntry.objects.create",
                "AuditEntry.objects.bulk_create",
            }:
                writers.append(f"{path.relative_to(APPROVALS)}:{node.lineno}")
    assert writers == []


def test_a_persons_snapshot_is_their_access_never_the_password(db: None) -> None:
    alice = User.objects.create_user("alice", password="never-shown-pw")
    text = audit_snapshot(alice)
    assert json.loads(text) == {
        "username": "alice",
        "is_active": True,
        "is_staff": False,
        "is_superuser": False,
        "groups": [],
        "permissions": [],
    }
    assert alice.password not in text


@pytest.mark.parametrize(("scope", "run_id"), [("always", None), ("run", "r-1")])
def test_an_approval_that_creates_a_standing_rule_records_which_call_approver_and_scope(
    db: None, scope: str, run_id: str | None
) -> None:
    agent = Agent.objects.create(name="bot", principal="carol", mode="default")
    call = call_make(agent=agent, tool="transfer_funds", arguments=payment("1"), run_id="r-1")
    alice = user_make(username="alice")
    call_decide(
        call_id=call.pk,
        user=alice,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
        scope=scope,
    )
    rule = PermissionRule.objects.get()
    entry = AuditEntry.objects.get(action=AuditEntry.Action.STANDING_RULE_CREATED)
    assert (entry.object_type, entry.object_id) == ("permissionrule", str(rule.pk))
    assert (entry.user, entry.username) == (alice, "alice")
    assert json.loads(entry.after) == {
        "call": str(call.pk),
        "scope": scope,
        "agent": "bot",
        "pattern": "transfer_funds",
        "decision": "allow",
        "run_id": run_id,
    }
