"""``User`` rows and their permissions, read on every approver's request."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType

from approvals.queries import sql

_EVERY_PERMISSION = sql.statement(
    "SELECT ct.{T.app_label}, p.{P.codename} FROM {P} p"
    " JOIN {T} ct ON ct.{T.id} = p.{P.content_type}",
    P=Permission,
    T=ContentType,
)
_PERMISSIONS_OF = _EVERY_PERMISSION + sql.statement(
    """
WHERE p.{P.id} IN (
    SELECT {UP.permission} FROM {UP} WHERE {UP.user} = %s
    UNION
    SELECT gp.{GP.permission} FROM {GP} gp
    JOIN {UG} ug ON ug.{UG.group} = gp.{GP.group}
    WHERE ug.{UG.user} = %s
)
""",
    P=Permission,
    UP=User.user_permissions.through,
    GP=Group.permissions.through,
    UG=User.groups.through,
)
_PERSON = "SELECT {columns} FROM " + sql.statement("{U} WHERE {U.id} = %s", U=User)


def user_permissions(*, user_id: Any, superuser: bool) -> set[str]:
    """``app_label.codename`` of every permission the user holds, their own and their
    groups' (every permission there is, for a superuser), in one query."""
    if superuser:
        found = sql.rows(_EVERY_PERMISSION, [])
    else:
        found = sql.rows(_PERMISSIONS_OF, [user_id, user_id])
    return {f"{app_label}.{codename}" for app_label, codename in found}


def user_read(user_id: Any) -> User | None:
    of = sql.fields(User)
    found = sql.fetch(_PERSON.format(columns=sql.columns(of)), [user_id], of)
    return sql.instance(User, of, found[0]) if found else None
