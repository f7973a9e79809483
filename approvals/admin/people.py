"""People, groups and login lockouts: who may decide is part of the policy, so every change
is audited.

Django's own code writes people and groups too: the signals of
``approvals/accounts/receivers.py`` audit each such write as well (the password form, a
change of any field), beside the admin's entry written here through the service.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext_lazy

from approvals.admin.base import AuditedAdmin, signed_in_user
from approvals.models import AuditEntry
from approvals.services.admin_changes import model_save
from approvals.services.logins import login_attempts_unlock

USER_KEPT = (
    "This person has audit entries, which name them, so they cannot be deleted. "
    "Deactivate them instead: untick “Active” and save."
)
USERS_KEPT = (
    "Nothing was deleted: some of the selected people have audit entries, which name them. "
    "Deactivate them instead: untick “Active” and save."
)


class AccessAuditedAdmin(AuditedAdmin):
    """Saves the row with its many-to-many fields (groups, permissions) in one service call,
    so that the one entry compares the access held before and after."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Nothing yet: ``save_related``, which Django calls next, saves the row too."""

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        model_save(
            instance=form.instance,
            actor=signed_in_user(request),
            save_related=partial(super().save_related, request, form, formsets, change),
        )


class AuditedUserAdmin(AccessAuditedAdmin, UserAdmin):  # type: ignore[type-arg]
    """A person with audit entries is kept (the entries protect their actor): deleting one is
    refused with ``USER_KEPT``."""

    actions = ["delete_selected"]

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        user = self.get_object(request, unquote(object_id))
        if user is not None and AuditEntry.objects.filter(user=user).exists():
            messages.error(request, USER_KEPT)
            return redirect("admin:auth_user_change", user.pk)
        return super().delete_view(request, object_id, extra_context)

    @admin.action(
        description=gettext_lazy("Delete selected %(verbose_name_plural)s"),
        permissions=["delete"],
    )
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[User]
    ) -> HttpResponse | None:
        if AuditEntry.objects.filter(user__in=queryset).exists():
            messages.error(request, USERS_KEPT)
            return None
        return django_delete_selected(self, request, queryset)


class AuditedGroupAdmin(AccessAuditedAdmin, GroupAdmin):
    pass


class LoginAttemptAdmin(AccessAttemptAdmin):
    """django-axes' failed logins, one row per username and client address: deleting a row
    lifts its lockout (approvals/accounts/lockouts.py), audited with who did it."""

    def delete_model(self, request: HttpRequest, obj: AccessAttempt) -> None:
        login_attempts_unlock(attempts=[obj], by=signed_in_user(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        login_attempts_unlock(attempts=queryset, by=signed_in_user(request))


admin.site.unregister(User)
admin.site.unregister(Group)
admin.site.unregister(AccessAttempt)
admin.site.register(User, AuditedUserAdmin)
admin.site.register(Group, AuditedGroupAdmin)
admin.site.register(AccessAttempt, LoginAttemptAdmin)
