"""People and groups are audited however they change (approvals/services/users.py, through the
signals of approvals/accounts/receivers.py): created, deleted, activated or deactivated; a password
set anywhere, never written; groups and permissions, from either side; and a person who may have
lost what lets them watch the pages has their sockets closed."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, Permission, User, update_last_login
from django.core.management import call_command
from django.test import Client

from approvals.models import AuditEntry
from approvals.services import users
from tests.factories import user_make

ROOT = Path(__file__).resolve().parents[2]
Action = AuditEntry.Action


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The people whose sockets the services asked to close."""
    asked: list[int] = []
    monkeypatch.setattr(users, "person_sockets_close", lambda *, user_id: asked.append(user_id))
    return asked


@pytest.fixture
def root(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="root-pw-1234"))
    return client


def _entries(action: AuditEntry.Action) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("pk"))


def _permission(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label="approvals", codename=codename)


def test_a_new_user_is_audited_without_the_password(db: None) -> None:
    alice = User.objects.create_user("alice", password="s3cret-pw-9")
    (created,) = _entries(Action.USER_CREATED)
    assert (created.object_type, created.object_id, created.user) == ("user", str(alice.pk), None)
    assert json.loads(created.after)["username"] == "alice"
    assert "s3cret" not in created.after
    assert alice.password not in created.after


def test_set_password_and_save_anywhere_is_audited_and_closes_their_sockets(
    db: None, closed: list[int]
) -> None:
    alice = user_make(username="alice")
    hash_before = alice.password
    alice.set_password("another-pw-77")
    alice.save()
    (entry,) = _entries(Action.PASSWORD_SET)
    assert (entry.object_id, entry.user) == (str(alice.pk), None)
    assert json.loads(entry.before) == json.loads(entry.after) == {"usable_password": True}
    for text in (hash_before, alice.password, "another-pw-77"):
        assert text not in entry.before + entry.after
    assert closed == [alice.pk]


def test_making_a_password_unusable_is_a_password_set(db: None, closed: list[int]) -> None:
    alice = user_make(username="alice")
    alice.set_unusable_password()
    alice.save()
    (entry,) = _entries(Action.PASSWORD_SET)
    assert json.loads(entry.after) == {"usable_password": False}
    assert closed == [alice.pk]


def test_manage_py_changepassword_is_audited(
    db: None, closed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = user_make(username="alice")
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "a-new-pass-phrase")
    call_command("changepassword", "alice", stdout=io.StringIO())
    (entry,) = _entries(Action.PASSWORD_SET)
    assert (entry.object_id, entry.user, entry.username) == (str(alice.pk), None, "")
    assert closed == [alice.pk]


def test_the_admins_password_form_is_audited_with_the_admin(
    root: Client, closed: list[int]
) -> None:
    alice = user_make(username="alice")
    response = root.post(
        f"/admin/auth/user/{alice.pk}/password/",
        {"password1": "Fresh-pass-2026", "password2": "Fresh-pass-2026", "usable_password": "true"},
    )
    assert response.status_code == 302, response.content[:2000]
    (entry,) = _entries(Action.PASSWORD_SET)
    assert (entry.object_id, entry.username) == (str(alice.pk), "root")
    assert entry.user == User.objects.get(username="root")
    assert closed == [alice.pk]


def test_deactivating_closes_the_sockets_and_activating_does_not(
    db: None, closed: list[int]
) -> None:
    alice = user_make(username="alice")
    alice.is_active = False
    alice.save()
    alice.is_active = True
    alice.save()
    (off,) = _entries(Action.USER_DEACTIVATED)
    (on,) = _entries(Action.USER_ACTIVATED)
    assert (json.loads(off.before)["is_active"], json.loads(off.after)["is_active"]) == (
        True,
        False,
    )
    assert json.loads(on.after)["is_active"] is True
    assert closed == [alice.pk]


def test_deactivating_in_admin_names_the_admin(root: Client, closed: list[int]) -> None:
    alice = user_make(username="alice")
    response = root.post(
        f"/admin/auth/user/{alice.pk}/change/",
        {"username": "alice", "date_joined_0": "2026-11-30", "date_joined_1": "10:00:00"},
    )
    assert response.status_code == 302, response.content[:2000]
    (entry,) = _entries(Action.USER_DEACTIVATED)
    assert entry.username == "root"
    assert alice.pk in closed


def test_losing_superuser_is_audited_and_closes_the_sockets(db: None, closed: list[int]) -> None:
    boss = User.objects.create_superuser("boss", password="boss-pw-1234")
    boss.is_superuser = False
    boss.save()
    (entry,) = _entries(Action.USER_CHANGED)
    assert (json.loads(entry.before)["is_superuser"], json.loads(entry.after)["is_superuser"]) == (
        True,
        False,
    )
    assert closed == [boss.pk]


def test_a_login_writes_no_entry(db: None, closed: list[int]) -> None:
    alice = user_make(username="alice")
    before = AuditEntry.objects.count()
    update_last_login(User, alice)  # as the user_logged_in signal calls it
    assert AuditEntry.objects.count() == before
    assert closed == []


def test_group_membership_changes_from_either_side_are_audited(db: None, closed: list[int]) -> None:
    finance = Group.objects.create(name="finance")
    alice = user_make(username="alice")
    alice.groups.add(finance)
    alice.groups.add(finance)  # already a member: no change, no entry
    finance.user_set.remove(alice)
    alice.groups.set([finance])
    finance.user_set.clear()
    entries = _entries(Action.USER_GROUPS_CHANGED)
    assert [(json.loads(e.before)["groups"], json.loads(e.after)["groups"]) for e in entries] == [
        ([], ["finance"]),
        (["finance"], []),
        ([], ["finance"]),
        (["finance"], []),
    ]
    assert {e.object_id for e in entries} == {str(alice.pk)}
    assert closed == [alice.pk, alice.pk]  # each time a group was lost


def test_direct_permission_changes_are_audited_and_a_lost_one_closes(
    db: None, closed: list[int]
) -> None:
    alice = user_make(username="alice", decide=False)
    decide = _permission("decide_call")
    alice.user_permissions.add(decide)
    alice.user_permissions.remove(_permission("view_call"))  # not held: nothing changes
    decide.user_set.remove(alice)
    entries = _entries(Action.USER_PERMISSIONS_CHANGED)
    assert [json.loads(e.after)["permissions"] for e in entries] == [["decide_call"], []]
    assert closed == [alice.pk]


def test_a_group_losing_view_closes_its_members_sockets(db: None, closed: list[int]) -> None:
    readers = Group.objects.create(name="readers")
    alice = user_make(username="alice", decide=False, groups=[readers])
    bob = user_make(username="bob", decide=False, groups=[readers])
    view = _permission("view_call")
    readers.permissions.add(view, _permission("add_agent"))
    readers.permissions.remove(_permission("add_agent"))  # not a page permission
    assert closed == []
    view.group_set.remove(readers)
    entries = _entries(Action.GROUP_PERMISSIONS_CHANGED)
    assert [json.loads(e.after)["permissions"] for e in entries] == [
        ["add_agent", "view_call"],
        ["view_call"],
        [],
    ]
    assert sorted(closed) == sorted([alice.pk, bob.pk])


def test_groups_created_and_deleted_are_audited_with_their_members(
    db: None, closed: list[int]
) -> None:
    readers = Group.objects.create(name="readers")
    readers.permissions.add(_permission("view_call"))
    alice = user_make(username="alice", decide=False, groups=[readers])
    group_id = readers.pk
    readers.delete()
    (created,) = _entries(Action.GROUP_CREATED)
    (deleted,) = _entries(Action.GROUP_DELETED)
    assert created.object_id == deleted.object_id == str(group_id)
    assert json.loads(deleted.before) == {
        "name": "readers",
        "permissions": ["view_call"],
        "members": ["alice"],
    }
    assert closed == [alice.pk]


def test_a_user_who_never_acted_can_be_deleted_and_that_is_audited(
    db: None, closed: list[int]
) -> None:
    alice = user_make(username="alice")
    user_id = alice.pk
    alice.delete()
    (entry,) = _entries(Action.USER_DELETED)
    assert (entry.object_type, entry.object_id) == ("user", str(user_id))
    assert json.loads(entry.before)["permissions"] == ["decide_call"]
    assert closed == [user_id]


# Writes that send no model signal, and so would pass unaudited.
UNSIGNALLED = re.compile(
    r"\b(User|Group|user_set|group_set)\b[^\n]*\.(update|bulk_create|bulk_update|_raw_delete)\("
)


def test_nothing_writes_people_or_groups_past_their_signals() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("approvals", "notifications", "config")
        for path in (ROOT / folder).rglob("*.py")
        if "/migrations/" not in path.as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if UNSIGNALLED.search(line)
    ]
    assert offenders == []


def test_the_unsignalled_finder_finds_them() -> None:
    assert UNSIGNALLED.search("User.objects.filter(pk=1).update(is_active=False)")
    assert UNSIGNALLED.search("Group.objects.bulk_create([Group(name='x')])")
    assert UNSIGNALLED.search("User.groups.through.objects.bulk_create(rows)")
    assert not UNSIGNALLED.search("audit_record(action=..., user=user)")
