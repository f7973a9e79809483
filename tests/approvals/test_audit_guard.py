"""Nothing changes an audit entry: the database refuses UPDATE and DELETE on the audit table
(triggers, migration 0009_audit_guard) whatever sends them, and the people and agents
entries name cannot be deleted (PROTECT; admin says to deactivate instead)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.models import ProtectedError
from django.test import Client

from approvals.admin.people import USER_KEPT, USERS_KEPT
from approvals.models import AUDIT_NOT_CHANGED, AUDIT_NOT_DELETED, Agent, AuditEntry
from approvals.services.audit import audit_record

ROOT = Path(__file__).resolve().parents[2]
TABLE = f'"{AuditEntry._meta.db_table}"'
GUARD = importlib.import_module("approvals.migrations.0009_audit_guard")


@pytest.fixture
def entry(db: None) -> AuditEntry:
    alice = User.objects.create_user("alice")
    return audit_record(
        action=AuditEntry.Action.CALL_APPROVED,
        object_type=AuditEntry.ObjectType.CALL,
        object_id=1,
        user=alice,
        after="fine",
    )


def _raw(statement: str, params: list[int | str]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)


def _stored(entry: AuditEntry) -> tuple[str, str, int | None, str]:
    fields = ("action", "after", "user_id", "username")
    return AuditEntry.objects.values_list(*fields).get(pk=entry.pk)  # type: ignore[no-any-return]


def test_the_guard_is_installed_on_the_migrated_database(db: None) -> None:
    if connection.vendor == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s"
    else:
        query = "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass"
    with connection.cursor() as cursor:
        cursor.execute(query, [AuditEntry._meta.db_table])
        found = {name for (name,) in cursor.fetchall()}
    assert set(GUARD.TRIGGERS[connection.vendor]) <= found


def test_the_database_refuses_a_raw_update_and_a_raw_delete(entry: AuditEntry) -> None:
    before = _stored(entry)
    with pytest.raises(IntegrityError, match=AUDIT_NOT_CHANGED):
        _raw(f'UPDATE {TABLE} SET "after" = %s WHERE "id" = %s', ["forged", entry.pk])
    with pytest.raises(IntegrityError, match=AUDIT_NOT_CHANGED):
        _raw(f'UPDATE {TABLE} SET "user_id" = NULL WHERE "id" = %s', [entry.pk])
    with pytest.raises(IntegrityError, match=AUDIT_NOT_DELETED):
        _raw(f'DELETE FROM {TABLE} WHERE "id" = %s', [entry.pk])
    with pytest.raises(IntegrityError, match=AUDIT_NOT_DELETED):
        _raw(f"DELETE FROM {TABLE}", [])
    assert _stored(entry) == before


def test_the_base_manager_the_delete_collector_uses_is_refused_too(entry: AuditEntry) -> None:
    """Django's collector nulls and deletes through ``_base_manager``, past the append-only
    queryset: the database stops it there."""
    before = _stored(entry)
    with pytest.raises(IntegrityError, match=AUDIT_NOT_CHANGED), transaction.atomic():
        AuditEntry._base_manager.filter(pk=entry.pk).update(user=None)
    with pytest.raises(IntegrityError, match=AUDIT_NOT_DELETED), transaction.atomic():
        AuditEntry._base_manager.filter(pk=entry.pk)._raw_delete(connection.alias)
    assert _stored(entry) == before


def test_a_person_or_agent_with_entries_cannot_be_deleted(entry: AuditEntry) -> None:
    agent = Agent.objects.create(name="bot", principal="carol")
    audit_record(
        action=AuditEntry.Action.CALL_PENDING,
        object_type=AuditEntry.ObjectType.CALL,
        object_id=2,
        agent=agent,
    )
    with pytest.raises(ProtectedError), transaction.atomic():
        User.objects.get(username="alice").delete()
    with pytest.raises(ProtectedError), transaction.atomic():
        agent.delete()
    assert _stored(entry) == ("call approved", "fine", entry.user_id, "alice")


def test_the_entry_keeps_the_username_it_was_written_with(entry: AuditEntry) -> None:
    alice = User.objects.get(username="alice")
    alice.username = "alice-renamed"
    alice.save()
    assert _stored(entry)[3] == "alice"


def test_dropping_the_guard_is_the_only_way_past_it(entry: AuditEntry) -> None:
    """What migration 0009's reverse does; created again, it refuses again."""
    with transaction.atomic():
        GUARD.guard_drop(connection)
        _raw(f'UPDATE {TABLE} SET "after" = %s WHERE "id" = %s', ["changed", entry.pk])
        GUARD.guard_create(connection)
        with pytest.raises(IntegrityError, match=AUDIT_NOT_CHANGED):
            _raw(f'UPDATE {TABLE} SET "after" = %s WHERE "id" = %s', ["again", entry.pk])
        transaction.set_rollback(True)


@pytest.fixture
def root(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="root-pw-1234"))
    return client


def test_admin_refuses_to_delete_a_person_with_entries_and_says_deactivate(
    root: Client, entry: AuditEntry
) -> None:
    alice = User.objects.get(username="alice")
    for method in (root.get, root.post):
        response = method(f"/admin/auth/user/{alice.pk}/delete/", {"post": "yes"}, follow=True)
        assert response.redirect_chain[0] == (f"/admin/auth/user/{alice.pk}/change/", 302)
        assert USER_KEPT in response.content.decode()
    response = root.post(
        "/admin/auth/user/",
        {"action": "delete_selected", "_selected_action": [str(alice.pk)], "post": "yes"},
        follow=True,
    )
    assert USERS_KEPT in response.content.decode()
    assert User.objects.filter(pk=alice.pk).exists()
    assert _stored(entry) == ("call approved", "fine", alice.pk, "alice")


def test_admin_deletes_a_person_without_entries(root: Client) -> None:
    bob = User.objects.create_user("bob")
    response = root.post(
        "/admin/auth/user/",
        {"action": "delete_selected", "_selected_action": [str(bob.pk)], "post": "yes"},
    )
    assert response.status_code == 302
    assert not User.objects.filter(pk=bob.pk).exists()
    deleted = AuditEntry.objects.get(action=AuditEntry.Action.USER_DELETED)
    assert (deleted.object_id, deleted.username) == (str(bob.pk), "root")


@pytest.mark.django_db(transaction=True)
def test_migrating_fills_in_usernames_and_back_removes_the_guard() -> None:
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("approvals")
    before_guard = [("approvals", "0007_audit_actions")]
    try:
        executor.migrate(before_guard)
        old = MigrationExecutor(connection).loader.project_state(before_guard).apps
        person = old.get_model("auth", "User").objects.create(username="early")
        old.get_model("approvals", "AuditEntry").objects.create(
            at="2026-01-01T00:00:00Z",
            user=person,
            action="call approved",
            object_type="call",
            object_id="1",
        )
        # Back before 0009 there is no guard: an entry can be changed.
        _raw(f'UPDATE {TABLE} SET "after" = %s', ["before the guard"])
    finally:
        MigrationExecutor(connection).migrate(latest)
    (entry,) = AuditEntry.objects.filter(after="before the guard")
    assert entry.username == "early"
    with pytest.raises(IntegrityError, match=AUDIT_NOT_CHANGED):
        _raw(f'UPDATE {TABLE} SET "after" = %s', ["after the guard"])


def test_manage_py_flush_is_refused_on_sqlite(tmp_path: Path) -> None:
    """A production ``flush`` on SQLite deletes row by row: the guard refuses it and nothing
    is deleted (on PostgreSQL it is a TRUNCATE, which the guard lets through: see migration
    0009_audit_guard)."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path}/flush.sqlite3",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_SUPERUSER_PASSWORD": "flush-pw-1234",
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert manage("migrate", "-v0").returncode == 0
    created = manage("createsuperuser", "--noinput", "--username", "op", "--email", "op@x.test")
    assert created.returncode == 0, created.stderr
    flushed = manage("flush", "--noinput")
    assert flushed.returncode != 0
    assert "couldn't be flushed" in flushed.stderr  # Django's message, hiding the trigger's
    count = "from approvals.models import AuditEntry as A; print(A.objects.count())"
    assert manage("shell", "-v0", "-c", count).stdout.strip() == "1"
