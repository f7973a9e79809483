"""The authentication backend: Django's ``ModelBackend``, reading a person in SQL written out.

``ModelBackend`` reads a person's permissions in two queries (their own, their groups'), each
built by the ORM from querysets it copies, and the person in a third: together a fifth of an
approver's decision (docs/performance.md). This backend reads the same permission set in one
query and the person in one plain one (approvals/sql.py), cached on the user object as
``ModelBackend`` caches it. Everything else, logging in included, is ``ModelBackend``'s.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, User

from approvals import sql

_EVERY_PERMISSION = """
SELECT ct.app_label, p.codename FROM auth_permission p
JOIN django_content_type ct ON ct.id = p.content_type_id
"""
# A constant added to a constant: nothing here comes in.
_PERMISSIONS_OF = (
    _EVERY_PERMISSION  # noqa: S608
    + """
WHERE p.id IN (
    SELECT permission_id FROM auth_user_user_permissions WHERE user_id = %s
    UNION
    SELECT gp.permission_id FROM auth_group_permissions gp
    JOIN auth_user_groups ug ON ug.group_id = gp.group_id
    WHERE ug.user_id = %s
)
"""
)
_PERSON = "SELECT {columns} FROM auth_user WHERE id = %s"


class PermissionBackend(ModelBackend):
    def get_all_permissions(self, user_obj: User | AnonymousUser, obj: Any = None) -> set[str]:
        """As ``ModelBackend``: none for an inactive or anonymous person or for an object;
        every permission for a superuser; else their own and their groups'."""
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        cached: set[str] | None = getattr(user_obj, "_perm_cache", None)
        if cached is None:
            if user_obj.is_superuser:
                rows = sql.rows(_EVERY_PERMISSION, [])
            else:
                rows = sql.rows(_PERMISSIONS_OF, [user_obj.pk, user_obj.pk])
            cached = {f"{app_label}.{codename}" for app_label, codename in rows}
            user_obj._perm_cache = cached  # type: ignore[attr-defined]
        return cached

    def get_user(self, user_id: Any) -> User | None:
        of = sql.fields(User)
        found = sql.fetch(_PERSON.format(columns=sql.columns(of)), [user_id], of)
        if not found:
            return None
        user: User = sql.instance(User, of, found[0])
        return user if self.user_can_authenticate(user) else None
