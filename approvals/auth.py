"""The authentication backends: the login throttle, then Django's ``ModelBackend``, reading a
person in SQL written out.

``LoginThrottle`` is django-axes' backend, first in ``AUTHENTICATION_BACKENDS``: a username
locked out from the client's address is refused before any password is hashed
(approvals/logins.py), and the request says so, so that a lockout is audited once, when it
begins, and not again for each attempt it refuses.

``ModelBackend`` reads a person's permissions in two queries (their own, their groups'), each
built by the ORM from querysets it copies, and the person in a third: together a fifth of an
approver's decision (docs/performance.md). This backend reads the same permission set in one
query and the person in one plain one (approvals/queries/users.py), cached on the user
object as ``ModelBackend`` caches its own. Everything else, logging in included, is
``ModelBackend``'s.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest

from approvals.queries.users import user_permissions, user_read

# Kept on the person for the request, as ModelBackend keeps its own; a name of ours, so that
# nothing relies on ModelBackend's private one.
PERMISSIONS_CACHE = "_countersign_permissions"
# Set on a request whose login the throttle refused unchecked (a name of ours, as above).
REFUSED_LOCKED_OUT = "countersign_refused_locked_out"


def refused_locked_out(request: HttpRequest) -> bool:
    """Whether the throttle refused this request's login because it was locked out already."""
    return bool(getattr(request, REFUSED_LOCKED_OUT, False))


class LoginThrottle(AxesStandaloneBackend):
    """Without a request there is no client address to count by (code calling ``authenticate``
    itself, as the test client's ``login`` does): the throttle stands aside. Every login form
    of the site passes its request."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return
        try:
            super().authenticate(request, username, password, **kwargs)
        except AxesBackendPermissionDenied:
            setattr(request, REFUSED_LOCKED_OUT, True)
            raise


class PermissionBackend(ModelBackend):
    def get_all_permissions(self, user_obj: User | AnonymousUser, obj: Any = None) -> set[str]:
        """As ``ModelBackend``: none for an inactive or anonymous person or for an object;
        every permission for a superuser; else their own and their groups'."""
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        cached: set[str] | None = getattr(user_obj, PERMISSIONS_CACHE, None)
        if cached is None:
            cached = user_permissions(user_id=user_obj.pk, superuser=user_obj.is_superuser)
            setattr(user_obj, PERMISSIONS_CACHE, cached)
        return cached

    def get_user(self, user_id: Any) -> User | None:
        user = user_read(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None
