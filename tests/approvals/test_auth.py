"""The authentication backend gives the same people and permissions as Django's ModelBackend,
in fewer queries."""

from __future__ import annotations

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.test import Client
from pytest_django import DjangoAssertNumQueries

from approvals.auth import PermissionBackend
from tests.factories import user_make

pytestmark = pytest.mark.django_db


def _permission(codename: str) -> Permission:
    return Permission.objects.get(codename=codename)


def _fresh(user: User) -> User:
    """The user as a new request sees them, without the permission caches."""
    return User.objects.get(pk=user.pk)


@pytest.fixture
def approver() -> User:
    reviewers = Group.objects.create(name="reviewers")
    reviewers.permissions.add(_permission("decide_call"), _permission("view_call"))
    user = user_make(username="ann", decide=False, view=True, groups=[reviewers])
    Group.objects.create(name="others").permissions.add(_permission("change_caprule"))
    return user


def test_own_and_group_permissions_are_modelbackends(approver: User) -> None:
    ours = PermissionBackend().get_all_permissions(_fresh(approver))
    assert ours == ModelBackend().get_all_permissions(_fresh(approver))
    assert ours == {"approvals.view_call", "approvals.decide_call"}


def test_a_superuser_holds_every_permission() -> None:
    boss = user_make(username="boss", superuser=True)
    ours = PermissionBackend().get_all_permissions(_fresh(boss))
    assert ours == ModelBackend().get_all_permissions(_fresh(boss))
    assert len(ours) == Permission.objects.count()


def test_inactive_anonymous_and_object_permissions_are_none(approver: User) -> None:
    backend = PermissionBackend()
    assert backend.get_all_permissions(AnonymousUser()) == set()
    assert backend.get_all_permissions(_fresh(approver), obj=approver) == set()
    User.objects.filter(pk=approver.pk).update(is_active=False)
    assert backend.get_all_permissions(_fresh(approver)) == set()
    assert not _fresh(approver).has_perm("approvals.view_call")


def test_permissions_are_read_once_per_request(
    approver: User, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    user = _fresh(approver)
    with django_assert_num_queries(1):
        assert user.has_perm("approvals.decide_call")
        assert user.has_perm("approvals.view_call")
        assert not user.has_perm("approvals.change_caprule")


def test_get_user_is_the_person_or_none(approver: User) -> None:
    backend = PermissionBackend()
    found = backend.get_user(approver.pk)
    assert found == approver
    assert found is not None
    assert (found.username, found.is_active, found.date_joined) == (
        approver.username,
        True,
        approver.date_joined,
    )
    assert backend.get_user(approver.pk + 1000) is None
    User.objects.filter(pk=approver.pk).update(is_active=False)
    assert backend.get_user(approver.pk) is None


def test_logging_in_and_the_pages_use_it(approver: User) -> None:
    client = Client()
    assert client.login(username="ann", password="pw")
    assert client.session["_auth_user_backend"] == "approvals.auth.PermissionBackend"
    assert client.get("/").status_code == 200
    User.objects.filter(pk=approver.pk).update(is_active=False)
    assert client.get("/").status_code == 302  # to the login page
