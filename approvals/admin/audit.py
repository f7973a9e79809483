"""The audit log, shown and searched: nobody adds, changes or deletes an entry here."""

from __future__ import annotations

from django.contrib import admin

from approvals.admin.base import ReadOnlyAdmin
from approvals.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("seq", "at", "action", "object_type", "object_id", "user", "agent")
    # The values stored, not the choices: older entries keep older spellings ("caprule").
    list_filter = (
        ("action", admin.AllValuesFieldListFilter),
        ("object_type", admin.AllValuesFieldListFilter),
    )
    search_fields = ("object_id", "action")
    date_hierarchy = "at"
    ordering = ("-at", "-pk")
