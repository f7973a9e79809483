"""The audit log against an admin who wants to leave no trace (issue 13, item 5), over a real
server: deleting an approver to null their entries is refused; a password an admin sets is
recorded before the approval made with it; an approval that creates a standing allow rule
names the rule; and the database refuses raw UPDATE and DELETE of the entries the server
wrote (docs/reliability.md, "The audit log is append-only")."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction

from approvals.admin.people import USER_KEPT
from approvals.models import AUDIT_NOT_CHANGED, AUDIT_NOT_DELETED, AuditEntry, PermissionRule
from tests.factories import user_make
from tests.live import CSRF_INPUT, Approver, LiveServer
from tests.scale.servers import APPROVER, PASSWORD, agent_create, bearer, workers

ROOT_USER = "root"
ARGUMENTS = '{"amount": "1"}'  # a mode hold: the "default" mode holds transfer_funds
Action = AuditEntry.Action


def _held_by_mode(server: LiveServer) -> str:
    _, token = agent_create("bot", mode="default")
    response = httpx.post(
        f"{server.url}/api/v1/calls",
        json={"tool": "transfer_funds", "arguments": ARGUMENTS},
        headers=bearer(token),
        timeout=10,
    )
    assert response.status_code == 201
    assert response.json()["status"] == "pending"
    return str(response.json()["id"])


def _form_token(http: httpx.Client, path: str) -> str:
    page = http.get(path)
    assert page.status_code == 200, page.status_code
    token = CSRF_INPUT.search(page.text)
    assert token is not None, f"no CSRF token on {path}"
    return token[1]


def _raw(statement: str, params: list[int | str]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)


@pytest.mark.django_db(transaction=True)
def test_an_approvers_entries_survive_every_way_of_removing_them(approver: User) -> None:
    user_make(username=ROOT_USER, superuser=True, password=PASSWORD)
    with workers(1) as (server,):
        call_id = _held_by_mode(server)
        person = Approver(server, APPROVER, PASSWORD)
        assert person.decide(call_id, approve=True, scope="always") == 303
        person.close()

        # The standing rule the approval created is in the log: which call, who, which scope.
        rule = PermissionRule.objects.get(pattern="transfer_funds")
        standing = AuditEntry.objects.get(action=Action.STANDING_RULE_CREATED)
        assert (standing.object_type, standing.object_id) == ("permissionrule", str(rule.pk))
        assert standing.username == APPROVER
        assert json.loads(standing.after)["call"] == call_id
        assert json.loads(standing.after)["scope"] == "always"
        theirs = list(AuditEntry.objects.filter(user=approver).values_list("pk", "action"))
        assert {action for _, action in theirs} >= {
            Action.CALL_APPROVED,
            Action.STANDING_RULE_CREATED,
        }

        # Admin: deleting the approver (to null their entries) is refused, naming the reason.
        root = Approver(server, ROOT_USER, PASSWORD).http
        path = f"/admin/auth/user/{approver.pk}/delete/"
        for response in (
            root.get(path, follow_redirects=True),
            root.post(
                path,
                data={"post": "yes", "csrfmiddlewaretoken": _form_token(root, "/admin/auth/user/")},
                follow_redirects=True,
            ),
        ):
            assert response.status_code == 200
            assert response.url.path == f"/admin/auth/user/{approver.pk}/change/"
            assert USER_KEPT in response.text.replace("&#x27;", "'").replace("&quot;", '"')
        root.close()
    assert User.objects.filter(pk=approver.pk).exists()

    # Raw SQL against the database the server wrote: refused, every entry as it was.
    table = f'"{AuditEntry._meta.db_table}"'
    ids = [pk for pk, _ in theirs]
    for statement, message in (
        (f'UPDATE {table} SET "user_id" = NULL WHERE "user_id" = %s', AUDIT_NOT_CHANGED),
        (f'UPDATE {table} SET "after" = %s WHERE "user_id" = %s', AUDIT_NOT_CHANGED),
        (f'DELETE FROM {table} WHERE "user_id" = %s', AUDIT_NOT_DELETED),
    ):
        params: list[int | str] = [approver.pk] if statement.count("%s") == 1 else ["", approver.pk]
        with pytest.raises(IntegrityError, match=message):
            _raw(statement, params)
    still = AuditEntry.objects.filter(pk__in=ids, user=approver, username=APPROVER)
    assert sorted(still.values_list("pk", "action")) == sorted(theirs)


@pytest.mark.django_db(transaction=True)
def test_a_password_an_admin_sets_is_in_the_log_before_what_was_done_with_it(
    approver: User,
) -> None:
    """The attack: an admin sets a second approver's password in admin, signs in as them and
    completes a quorum. The log now shows who set it, before the approval made with it."""
    user_make(username=ROOT_USER, superuser=True, password=PASSWORD)
    bob = user_make(username="bob", password="bobs-own-pass-phrase")
    with workers(1) as (server,):
        root = Approver(server, ROOT_USER, PASSWORD).http
        path = f"/admin/auth/user/{bob.pk}/password/"
        response = root.post(
            path,
            data={
                "csrfmiddlewaretoken": _form_token(root, path),
                "usable_password": "true",
                "password1": "taken-over-pass-2026",
                "password2": "taken-over-pass-2026",
            },
        )
        assert response.status_code == 302, response.text[:2000]
        root.close()

        call_id = _held_by_mode(server)
        as_bob = Approver(server, "bob", "taken-over-pass-2026")
        assert as_bob.decide(call_id, approve=True) == 303
        as_bob.close()

    password = AuditEntry.objects.get(action=Action.PASSWORD_SET)
    assert (password.object_id, password.username) == (str(bob.pk), ROOT_USER)
    assert "taken-over" not in password.before + password.after
    assert not re.search(r"pbkdf2|argon2|bcrypt", password.before + password.after)
    approved = AuditEntry.objects.get(action=Action.CALL_APPROVED, object_id=call_id)
    assert approved.username == "bob"
    assert (password.at, password.pk) < (approved.at, approved.pk)
