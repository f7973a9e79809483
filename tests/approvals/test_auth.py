"""Who may see the pages follows their own and their groups' permissions, read afresh on each
request, and a deactivated person is signed out."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from tests.factories import PASSWORD, user_make

pytestmark = pytest.mark.django_db


def _permission(codename: str) -> Permission:
    return Permission.objects.get(codename=codename)


@pytest.fixture
def approver() -> User:
    reviewers = Group.objects.create(name="reviewers")
    reviewers.permissions.add(_permission("view_call"))
    return user_make(username="ann", decide=False, view=False, groups=[reviewers])


def test_a_groups_permission_lets_its_member_see_the_queue(approver: User) -> None:
    client = Client()
    assert client.login(username="ann", password=PASSWORD)
    assert client.get("/").status_code == 200


def test_losing_the_group_takes_the_queue_away_at_the_next_request(approver: User) -> None:
    client = Client()
    assert client.login(username="ann", password=PASSWORD)
    approver.groups.clear()
    assert client.get("/").status_code in (302, 403)


def test_a_superuser_holds_every_permission() -> None:
    boss = User.objects.get(pk=user_make(username="boss", superuser=True).pk)
    assert boss.has_perm("approvals.decide_call")
    assert boss.has_perm("approvals.change_caprule")


def test_a_deactivated_person_is_signed_out(approver: User) -> None:
    client = Client()
    assert client.login(username="ann", password=PASSWORD)
    assert client.get("/").status_code == 200
    User.objects.filter(pk=approver.pk).update(is_active=False)
    assert client.get("/").status_code == 302  # to the login page
