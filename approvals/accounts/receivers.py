"""Model signals on Django's ``User`` and ``Group``, handed to ``services/users.py``.

Every other write of this project goes through a service that audits it. People and groups
are written by Django's own code as well (admin's forms, ``changepassword``, the password
reset views, ``set_password`` anywhere): their signals are the one place each such write
passes, so that is where they are audited (docs/architecture.md, "Choices made here"). Each
receiver only reads the row as it was before the change and calls a service. Connected in
``ApprovalsConfig.ready``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.db.models import Model
from django.db.models.signals import m2m_changed, post_save, pre_delete, pre_save

from approvals.accounts.actor import acting_user
from approvals.models import AuditEntry
from approvals.services import users

# Saves that change nothing audited: Django's login stamps ``last_login``.
_UNAUDITED_FIELDS = frozenset({"last_login"})
_STORED = "_countersign_stored"
_BEFORE = "_countersign_access_before"

# Each many-to-many table whose rows are someone's access: the holder's column there, the
# other side's, and the action of a person's entry (None: the holder is a group).
_ACCESS_TABLES: dict[type[Model], tuple[str, str, AuditEntry.Action | None]] = {
    User.groups.through: ("user", "group", AuditEntry.Action.USER_GROUPS_CHANGED),
    User.user_permissions.through: (
        "user",
        "permission",
        AuditEntry.Action.USER_PERMISSIONS_CHANGED,
    ),
    Group.permissions.through: ("group", "permission", None),
}


def _user_pre_save(
    sender: type[User], instance: User, update_fields: frozenset[str] | None, **kwargs: Any
) -> None:
    if update_fields is not None and update_fields <= _UNAUDITED_FIELDS:
        return
    stored = None if instance.pk is None else User.objects.filter(pk=instance.pk).first()
    setattr(instance, _STORED, stored)


def _user_post_save(sender: type[User], instance: User, **kwargs: Any) -> None:
    if not hasattr(instance, _STORED):
        return
    stored = instance.__dict__.pop(_STORED)
    users.user_saved(user=instance, stored=stored, by=acting_user())


def _user_pre_delete(sender: type[User], instance: User, **kwargs: Any) -> None:
    users.user_deleted(user=instance, by=acting_user())


def _group_post_save(sender: type[Group], instance: Group, created: bool, **kwargs: Any) -> None:
    if created:
        users.group_created(group=instance, by=acting_user())


def _group_pre_delete(sender: type[Group], instance: Group, **kwargs: Any) -> None:
    users.group_deleted(group=instance, by=acting_user())


def _holders(
    sender: type[Model], instance: Model, reverse: bool, pk_set: set[int] | None
) -> list[int]:
    """Whose access a change of ``sender``'s rows touches: ``instance`` itself, or from the
    other side (``group.user_set.add(...)``) the rows named or, for a clear, all of them."""
    holder, other, _ = _ACCESS_TABLES[sender]
    if not reverse:
        return [instance.pk]
    if pk_set is not None:
        return list(pk_set)
    rows = sender._default_manager.filter(**{other: instance.pk})
    return list(rows.values_list(holder, flat=True))


def _access_changed(
    sender: type[Model],
    instance: Model,
    action: str,
    reverse: bool,
    pk_set: set[int] | None,
    **kwargs: Any,
) -> None:
    holder, _, entry_action = _ACCESS_TABLES[sender]
    if action.startswith("pre_"):
        ids = _holders(sender, instance, reverse, pk_set)
        if holder == "user":
            before = users.users_access(user_ids=ids)
        else:
            before = users.groups_access(group_ids=ids)
        instance.__dict__.setdefault(_BEFORE, {})[sender] = before
        return
    before = instance.__dict__.get(_BEFORE, {}).pop(sender, None)
    if before is None:
        return
    if entry_action is None:
        users.groups_access_changed(before=before, by=acting_user())
    else:
        users.users_access_changed(before=before, action=entry_action, by=acting_user())


def connect() -> None:
    pre_save.connect(_user_pre_save, sender=User, dispatch_uid="countersign-user-pre-save")
    post_save.connect(_user_post_save, sender=User, dispatch_uid="countersign-user-post-save")
    pre_delete.connect(_user_pre_delete, sender=User, dispatch_uid="countersign-user-delete")
    post_save.connect(_group_post_save, sender=Group, dispatch_uid="countersign-group-save")
    pre_delete.connect(_group_pre_delete, sender=Group, dispatch_uid="countersign-group-delete")
    for through in _ACCESS_TABLES:
        m2m_changed.connect(
            _access_changed, sender=through, dispatch_uid=f"countersign-access-{through.__name__}"
        )
