"""What the admin modules share: who is acting, and the bases of audited and read-only admins.

Admin writes nothing itself: every save and delete goes to a service, which audits it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from approvals.services.admin_changes import model_delete, model_save


def signed_in_user(request: HttpRequest) -> User | None:
    """Who the audit entries of this request name."""
    user = request.user
    return user if isinstance(user, User) else None


class AuditedAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Adds, changes and deletes through ``services/admin_changes.py``, each audited with who
    made it and the row before and after. An admin whose model has a service of its own
    overrides ``save_model`` or ``delete_model`` to call it."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        model_save(instance=obj, actor=signed_in_user(request))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        model_delete(instance=obj, actor=signed_in_user(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        # One by one, so that each row is audited by its own service; all or none.
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Shown, searchable, never written through the admin."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    """Rows listed under their parent, every field read-only, none added or deleted here."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
