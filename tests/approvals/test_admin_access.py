"""Changes to users' and groups' access made in admin are audited, without password hashes."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from approvals.models import AuditEntry
from tests.factories import user_make


@pytest.fixture
def root(db: None) -> Client:
    client = Client()
    client.force_login(user_make(username="root", superuser=True))
    return client


def test_granting_decide_call_to_a_user_is_audited(root: Client) -> None:
    alice = user_make(username="alice", decide=False, password="secret-pw")
    decide = Permission.objects.get(codename="decide_call")
    response = root.post(
        f"/admin/auth/user/{alice.pk}/change/",
        {
            "username": "alice",
            "is_active": "on",
            "user_permissions": [str(decide.pk)],
            "date_joined_0": "2026-11-30",
            "date_joined_1": "10:00:00",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    entry = AuditEntry.objects.get(object_type="user", action="admin change")
    assert entry.user is not None
    assert entry.user.username == "root"
    assert json.loads(entry.before)["permissions"] == []
    assert json.loads(entry.after)["permissions"] == ["decide_call"]
    assert "pbkdf2" not in entry.before + entry.after


def test_group_permission_changes_and_deletes_are_audited(root: Client) -> None:
    finance = Group.objects.create(name="finance")
    decide = Permission.objects.get(codename="decide_call")
    url = f"/admin/auth/group/{finance.pk}/change/"
    assert root.post(url, {"name": "finance", "permissions": [str(decide.pk)]}).status_code == 302
    change = AuditEntry.objects.get(object_type="group", action="admin change")
    assert json.loads(change.after) == {"name": "finance", "permissions": ["decide_call"]}
    root.post(
        "/admin/auth/group/",
        {"action": "delete_selected", "_selected_action": [str(finance.pk)], "post": "yes"},
    )
    assert not Group.objects.exists()
    assert AuditEntry.objects.filter(object_type="group", action="admin delete").count() == 1
