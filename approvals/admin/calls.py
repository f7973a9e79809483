"""Calls, ledgers and ledger entries: read-only, except that an entry can be voided once."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils import timezone

import capcore
from approvals.admin.base import ReadOnlyAdmin, ReadOnlyInline, signed_in_user
from approvals.models import Call, CapRule, Ledger, LedgerEntry
from approvals.selectors.ledgers import ledger_spent
from approvals.selectors.rules import stored_rule
from approvals.services.ledgers import VoidRefused, ledger_entry_void
from capcore.caps import SHADOW_LEDGER_PREFIX


@admin.register(Call)
class CallAdmin(ReadOnlyAdmin):
    list_display = ("id", "tool", "principal", "agent", "status", "created_at", "expires_at")
    list_filter = ("status",)
    search_fields = ("tool", "principal")
    search_help_text = "Tool, principal, or a call's id."
    date_hierarchy = "created_at"
    ordering = ("-created_at",)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        results, duplicates = super().get_search_results(request, queryset, search_term)
        try:
            call_id = uuid.UUID(search_term.strip())
        except ValueError:
            return results, duplicates
        return results | queryset.filter(pk=call_id), duplicates


class LedgerEntryInline(ReadOnlyInline):
    model = LedgerEntry
    fields = ("call", "minor", "recorded_at", "voided_at", "void_reason")
    readonly_fields = fields
    ordering = ("-recorded_at",)


def _ledger_exponent(ledger: Ledger, rule: capcore.Rule | None) -> int | None:
    limit = rule.limit_for(ledger.currency) if rule is not None else None
    if limit is not None:
        return limit.exponent
    try:
        return capcore.exponent(ledger.currency)
    except capcore.CapcoreError:
        return None


def _ledger_rule(ledger: Ledger) -> capcore.Rule | None:
    # A shadow rule's ledgers are "shadow <name>" (capcore.caps.ledger_rule).
    folded = ledger.rule.removeprefix(SHADOW_LEDGER_PREFIX)
    rows = CapRule.objects.filter(name_folded=folded, shadow=folded != ledger.rule)
    line = rows.values_list("line", flat=True).first()
    return None if line is None else stored_rule(line)


def _ledger_amount(ledger: Ledger, rule: capcore.Rule | None, minor: int) -> str:
    exp = _ledger_exponent(ledger, rule)
    if exp is None:
        return f"{minor} minor units"
    return f"{ledger.currency} {capcore.format_amount(minor, exp, grouping=True)}"


@admin.register(Ledger)
class LedgerAdmin(ReadOnlyAdmin):
    list_display = ("rule", "currency", "key", "window_total", "all_time_total")
    list_filter = ("currency",)
    search_fields = ("rule",)
    inlines = [LedgerEntryInline]

    @admin.display(description="key (digest)")
    def key(self, obj: Ledger) -> str:
        return obj.key_digest[:12] + "…" if obj.key_digest else "one total"

    @admin.display(description="spent in the rule's window")
    def window_total(self, obj: Ledger) -> str:
        rule = _ledger_rule(obj)
        if rule is None:
            return "— (no such rule, or it no longer parses)"
        spent = ledger_spent(ledger=obj, window=rule.window, now=timezone.now())
        window = "all time" if rule.window is None else rule.window.to_text()
        return f"{_ledger_amount(obj, rule, spent)} ({window})"

    @admin.display(description="all time")
    def all_time_total(self, obj: Ledger) -> str:
        total = ledger_spent(ledger=obj, window=None, now=timezone.now())
        return _ledger_amount(obj, _ledger_rule(obj), total)


class VoidForm(forms.ModelForm):  # type: ignore[type-arg]
    void_reason = forms.CharField(
        required=True,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Why this amount no longer counts (e.g. the payment failed). Required.",
    )

    class Meta:
        model = LedgerEntry
        fields = ("void_reason",)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Read-only, except that an entry can be voided once, with a reason (audited)."""

    form = VoidForm
    list_display = ("ledger", "call", "minor", "recorded_at", "voided_at")
    list_filter = (("voided_at", admin.EmptyFieldListFilter),)
    search_fields = ("ledger__rule",)
    readonly_fields = ("ledger", "call", "minor", "recorded_at", "voided_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or obj.voided_at is None)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        ledger_entry_void(
            entry_id=obj.pk,
            reason=form.cleaned_data["void_reason"],
            by_user=signed_in_user(request),
        )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # A void refused (another admin voided it first, or its hour has no total) has
        # changed nothing: admin's own transaction is rolled back too. Back to the entry.
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except VoidRefused as refused:
            self.message_user(request, str(refused), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
