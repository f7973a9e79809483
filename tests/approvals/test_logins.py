"""Failed logins are throttled per username and client address (django-axes): the fifth
failure locks the pair out with a message of ours, the right password is refused while it
lasts, the lockout is audited once, and the demo admin lifts it in admin (audited too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from prometheus_client import REGISTRY

from approvals.accounts.lockouts import LOCKED_OUT_STATUS, locked_out_message
from approvals.models import AuditEntry
from approvals.services.demo import DEMO_ADMIN, DEMO_PASSWORD, demo_ensure
from config.runtime.pooled_handler import configured_path_pools
from tests.factories import user_make

pytestmark = pytest.mark.django_db

RULES = Path(__file__).resolve().parents[2] / "examples" / "rules.txt"
LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"
RIGHT = "the right password"
ELSEWHERE = "192.0.2.7"  # another client address (TEST-NET-1, never dialled)


@pytest.fixture
def ann() -> User:
    return user_make(username="ann", password=RIGHT)


def _log_in(client: Client, password: str, *, path: str = LOGIN) -> int:
    response = client.post(path, {"username": "ann", "password": password})
    return response.status_code


def _lock_out(client: Client, path: str = LOGIN) -> list[int]:
    return [_log_in(client, f"wrong {attempt}", path=path) for attempt in range(5)]


def _lockouts_counted() -> float:
    return REGISTRY.get_sample_value("countersign_login_lockouts_total") or 0.0


def _lockouts() -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=AuditEntry.Action.LOGIN_LOCKED_OUT))


def test_the_fifth_failure_locks_the_pair_out_and_the_right_password_is_refused(
    ann: User,
) -> None:
    client = Client()
    assert _lock_out(client) == [200, 200, 200, 200, LOCKED_OUT_STATUS]
    refused = client.post(LOGIN, {"username": "ann", "password": RIGHT})
    assert refused.status_code == LOCKED_OUT_STATUS
    assert locked_out_message() in refused.content.decode()
    assert refused["Retry-After"] == "900"
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302  # still sent to the login page


def test_the_admin_login_is_locked_out_with_the_same_message(ann: User) -> None:
    ann.is_staff = True
    ann.save()
    client = Client()
    assert _lock_out(client, ADMIN_LOGIN)[-1] == LOCKED_OUT_STATUS
    refused = client.post(ADMIN_LOGIN, {"username": "ann", "password": RIGHT})
    assert refused.status_code == LOCKED_OUT_STATUS
    assert locked_out_message() in refused.content.decode()
    assert client.get("/admin/").status_code == 302


def test_the_lockout_is_per_username_and_address(ann: User) -> None:
    user_make(username="bob", password=RIGHT)
    _lock_out(Client())
    # The same person from another address, and another person from the same one, log in.
    assert _log_in(Client(REMOTE_ADDR=ELSEWHERE), RIGHT) == 302
    other = Client().post(LOGIN, {"username": "bob", "password": RIGHT})
    assert other.status_code == 302


def test_a_lockout_is_audited_once_with_its_username_and_address(
    ann: User, django_capture_on_commit_callbacks: Any
) -> None:
    before = _lockouts_counted()
    client = Client()
    with django_capture_on_commit_callbacks(execute=True):
        _lock_out(client)
        for _ in range(5):
            _log_in(client, "still wrong")
    [entry] = _lockouts()
    attempt = AccessAttempt.objects.get(username="ann")
    assert (entry.object_type, entry.object_id) == (AuditEntry.ObjectType.LOGIN, str(attempt.pk))
    assert json.loads(entry.after) == {"username": "ann", "ip_address": "127.0.0.1", "failures": 5}
    assert entry.user is None
    assert _lockouts_counted() == before + 1


def test_the_page_repeats_nothing_the_client_sent() -> None:
    client = Client()
    sent = "<b>mallory</b>"
    for _ in range(5):
        response = client.post(LOGIN, {"username": sent, "password": "x"})
    assert response.status_code == LOCKED_OUT_STATUS
    page = response.content.decode()
    assert "mallory" not in page
    assert "Too many failed logins" in page


def test_the_demo_admin_unlocks_in_admin_and_the_login_then_works(ann: User) -> None:
    client = Client()
    _lock_out(client)
    demo_ensure(rules_file=RULES)
    admin = Client()
    assert (
        admin.post(ADMIN_LOGIN, {"username": DEMO_ADMIN, "password": DEMO_PASSWORD}).status_code
        == 302
    )
    listing = admin.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200
    attempt = AccessAttempt.objects.get(username="ann")
    delete = f"/admin/axes/accessattempt/{attempt.pk}/delete/"
    assert admin.get(delete).status_code == 200
    assert admin.post(delete, {"post": "yes"}).status_code == 302
    assert not AccessAttempt.objects.filter(username="ann").exists()
    [unlocked] = AuditEntry.objects.filter(action=AuditEntry.Action.LOGIN_UNLOCKED)
    assert unlocked.user == User.objects.get(username=DEMO_ADMIN)
    assert unlocked.object_id == str(attempt.pk)
    assert json.loads(unlocked.before)["failures"] == 5
    assert _log_in(client, RIGHT) == 302


def test_unlocking_several_at_once_audits_each(ann: User) -> None:
    user_make(username="root", superuser=True, password=RIGHT)
    _lock_out(Client())
    _lock_out(Client(REMOTE_ADDR=ELSEWHERE))
    root = Client()
    root.force_login(User.objects.get(username="root"))
    chosen = [str(pk) for pk in AccessAttempt.objects.values_list("pk", flat=True)]
    response = root.post(
        "/admin/axes/accessattempt/",
        {"action": "delete_selected", "_selected_action": chosen, "post": "yes"},
    )
    assert response.status_code == 302
    assert not AccessAttempt.objects.exists()
    unlocked = AuditEntry.objects.filter(action=AuditEntry.Action.LOGIN_UNLOCKED)
    assert sorted(entry.object_id for entry in unlocked) == sorted(chosen)


def test_the_login_views_are_on_the_login_threads() -> None:
    """COUNTERSIGN_PATH_POOLS names the paths; these are where the login views are."""
    [login_pool] = [pool for pool in configured_path_pools() if pool.name == "login"]
    assert login_pool.paths == {reverse("login"), reverse("admin:login")}
