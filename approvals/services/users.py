"""Changes to people and groups, audited whatever made them: admin, ``manage.py
changepassword`` or ``createsuperuser``, a password reset, ``set_password`` and ``save`` in a
shell (docs/reliability.md, "The audit log is append-only").

Django's models are written by Django's own code, so these are called from the model signals
(``approvals/accounts/receivers.py``), with the row as it was read before the change. Each records
its entries in the transaction of the change where it has one (admin and every view do; a bare
``save()`` in autocommit has committed its row before its entry is written) and, where a
person may have lost the access that lets them watch the pages (deactivated, a new password,
a group or a permission gone), closes their open sockets after commit
(``notify.person_sockets_close``). A password is never written, nor its hash: only whether a
usable one is set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import Group, Permission, User
from django.db import transaction
from django.db.models import Q

from approvals.models import AuditEntry
from approvals.realtime.pushes import person_sockets_close
from approvals.selectors.deciders import VIEW_PERMISSIONS
from approvals.services.audit import audit_object_type, audit_record, audit_snapshot


@dataclass(frozen=True, slots=True)
class Access:
    """What a person or a group holds, as an entry shows it (``snapshot``) and as far as it
    lets someone watch the pages (``keeps``: a person's groups and the view and decide
    permissions they hold, a group's view and decide permissions). Losing any of ``keeps``
    closes the sockets of whoever lost it."""

    snapshot: str
    keeps: frozenset[str]


def _person_keeps(user: User) -> frozenset[str]:
    # Read whether or not the person is active (ModelBackend's own reads none for an inactive
    # one), so that deactivating someone shows as losing what they held.
    permissions = Permission.objects.all()
    if not user.is_superuser:
        permissions = permissions.filter(Q(user=user) | Q(group__user=user))
    held = {
        f"{app}.{code}"
        for app, code in permissions.values_list("content_type__app_label", "codename")
    }
    groups = user.groups.values_list("name", flat=True)
    return frozenset(held & set(VIEW_PERMISSIONS)) | {f"group {name}" for name in groups}


def _group_keeps(group: Group) -> frozenset[str]:
    held = group.permissions.values_list("content_type__app_label", "codename")
    return frozenset(f"{app}.{code}" for app, code in held) & set(VIEW_PERMISSIONS)


def users_access(*, user_ids: Iterable[int]) -> dict[int, Access]:
    """The access of each of these people, read now (before a change)."""
    return {
        user.pk: Access(audit_snapshot(user), _person_keeps(user))
        for user in User.objects.filter(pk__in=list(user_ids))
    }


def groups_access(*, group_ids: Iterable[int]) -> dict[int, Access]:
    return {
        group.pk: Access(audit_snapshot(group), _group_keeps(group))
        for group in Group.objects.filter(pk__in=list(group_ids))
    }


def _standing(user: User) -> tuple[str, bool, bool]:
    return user.get_username(), user.is_staff, user.is_superuser


def _usable(user: User) -> str:
    return json.dumps({"usable_password": user.has_usable_password()})


@transaction.atomic
def user_saved(*, user: User, stored: User | None, by: User | None) -> None:
    """Audit a saved person against ``stored``, the row as it was (None: just created): one
    entry per fact — created; activated or deactivated; a password set (also when it is the
    same one, or made unusable); username, staff or superuser changed."""
    if stored is None:
        audit_record(
            action=AuditEntry.Action.USER_CREATED, obj=user, user=by, after=audit_snapshot(user)
        )
        return
    before, after = audit_snapshot(stored), audit_snapshot(user)
    if stored.is_active != user.is_active:
        action = (
            AuditEntry.Action.USER_ACTIVATED
            if user.is_active
            else AuditEntry.Action.USER_DEACTIVATED
        )
        audit_record(action=action, obj=user, user=by, before=before, after=after)
    password_set = stored.password != user.password
    if password_set:
        audit_record(
            action=AuditEntry.Action.PASSWORD_SET,
            obj=user,
            user=by,
            before=_usable(stored),
            after=_usable(user),
        )
    if _standing(stored) != _standing(user):
        audit_record(
            action=AuditEntry.Action.USER_CHANGED, obj=user, user=by, before=before, after=after
        )
    # A new password ends every other session (Django's session hash follows the password).
    lost = (stored.is_active and not user.is_active) or (
        stored.is_superuser and not user.is_superuser
    )
    if password_set or lost:
        person_sockets_close(user_id=user.pk)


@transaction.atomic
def user_deleted(*, user: User, by: User | None) -> None:
    """Audit a person about to be deleted (only one who never acted can be: entries protect
    their actor). Called before the row goes, so the entry shows their groups; a person
    deleting themselves is recorded with no actor, since the link would dangle."""
    actor = None if by is not None and by.pk == user.pk else by
    audit_record(
        action=AuditEntry.Action.USER_DELETED,
        object_type=audit_object_type(User),
        object_id=user.pk,
        user=actor,
        before=audit_snapshot(user),
    )
    person_sockets_close(user_id=user.pk)


@transaction.atomic
def group_created(*, group: Group, by: User | None) -> None:
    audit_record(
        action=AuditEntry.Action.GROUP_CREATED, obj=group, user=by, after=audit_snapshot(group)
    )


@transaction.atomic
def group_deleted(*, group: Group, by: User | None) -> None:
    """Audit a group about to be deleted, with its members (their memberships go with it,
    without a signal of their own); members who got view or decide through it lose their
    sockets."""
    members = list(group.user_set.order_by("username").values_list("pk", "username"))
    before = json.loads(audit_snapshot(group)) | {"members": [name for _, name in members]}
    audit_record(
        action=AuditEntry.Action.GROUP_DELETED,
        object_type=audit_object_type(Group),
        object_id=group.pk,
        user=by,
        before=json.dumps(before, sort_keys=True),
    )
    if _group_keeps(group):
        for pk, _ in members:
            person_sockets_close(user_id=pk)


@transaction.atomic
def users_access_changed(
    *, before: dict[int, Access], action: AuditEntry.Action, by: User | None
) -> None:
    """Audit people whose groups or permissions were changed (``action``), against their
    access ``before``; one entry per person whose access differs."""
    after = users_access(user_ids=before)
    for pk, was in before.items():
        now = after.get(pk)
        if now is None or now.snapshot == was.snapshot:
            continue
        audit_record(
            action=action,
            object_type=audit_object_type(User),
            object_id=pk,
            user=by,
            before=was.snapshot,
            after=now.snapshot,
        )
        if was.keeps - now.keeps:
            person_sockets_close(user_id=pk)


@transaction.atomic
def groups_access_changed(*, before: dict[int, Access], by: User | None) -> None:
    """Audit groups whose permissions were changed, against their access ``before``; the
    members of a group that lost view or decide lose their sockets."""
    after = groups_access(group_ids=before)
    for pk, was in before.items():
        now = after.get(pk)
        if now is None or now.snapshot == was.snapshot:
            continue
        audit_record(
            action=AuditEntry.Action.GROUP_PERMISSIONS_CHANGED,
            object_type=audit_object_type(Group),
            object_id=pk,
            user=by,
            before=was.snapshot,
            after=now.snapshot,
        )
        if was.keeps - now.keeps:
            for member in User.objects.filter(groups=pk).values_list("pk", flat=True):
                person_sockets_close(user_id=member)
