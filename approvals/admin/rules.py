"""Cap rules, tool classes, permission rules and budgets.

A cap rule is its line, saved through ``cap_rule_save``. Error messages name a position or a
category, never the text an admin typed; the caret view, apart from the message, shows the
admin the line they typed themselves.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html

import capcore
from approvals.admin.base import AuditedAdmin, signed_in_user
from approvals.models import Budget, CapRule, PermissionRule, ToolClass
from approvals.selectors.rules import stored_rule
from approvals.services.rules import budget_save, cap_rule_save, rules_file_text

RENAME_HELP = (
    "The rule's ledger is kept by its name: editing the limit or window keeps the running "
    "totals, renaming the rule starts a new, empty ledger."
)
CARET_CONTEXT = 60  # characters of the line shown on each side of the caret


def _money(limit: capcore.Limit) -> str:
    return f"{limit.currency} {capcore.format_amount(limit.minor, limit.exponent, grouping=True)}"


def _clipped(text: str) -> str:
    """A list cell that static/css/admin.css cuts short with an ellipsis; whole in its
    tooltip."""
    return format_html('<span class="cs-clip" title="{}">{}</span>', text, text)


def _shown(char: str) -> str:
    """A tab as one blank (it counts one column); a character that prints as nothing or as a
    blank no-one can tell apart as U+FFFD, so that it can be seen under the caret."""
    if char == "\t":
        return " "
    return char if char.isprintable() else "\ufffd"


def _cells(char: str) -> int:
    """How many cells of a monospace font ``char`` takes, so the caret lands under it."""
    if unicodedata.category(char) in ("Mn", "Me"):  # combining marks sit on the one before
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def rule_line_caret(line: str, column: int) -> str:
    """The admin's own line, ``CARET_CONTEXT`` characters either side of ``column``, with a
    ``^`` under that column (docs/rules.md, "Error messages")."""
    index = column - 1
    start = max(0, index - CARET_CONTEXT)
    end = index + CARET_CONTEXT
    shown = [_shown(char) for char in line[start:end]]
    prefix = "…" if start else ""
    suffix = "…" if end < len(line) else ""
    pad = len(prefix) + sum(_cells(char) for char in shown[: index - start])
    return format_html("<pre>{}\n{}^</pre>", prefix + "".join(shown) + suffix, " " * pad)


class CapRuleForm(forms.ModelForm):  # type: ignore[type-arg]
    line = forms.CharField(
        strip=False,  # the grammar decides which blanks are allowed, not the form
        widget=forms.TextInput(attrs={"size": 120, "spellcheck": "false", "autocomplete": "off"}),
        help_text="One cap rule, e.g. big-payment: pay,transfer arg=amount max USD 500.00 "
        "-> gate finance. " + RENAME_HELP,
    )

    class Meta:
        model = CapRule
        fields = ["line", "enabled", "description"]
        help_texts = {"description": RENAME_HELP}

    def clean_line(self) -> str:
        line: str = self.cleaned_data["line"]
        try:
            rule = capcore.parse_rule(line)
        except capcore.RuleError as error:
            # The message holds a position and an expectation, never typed text; the caret
            # view under it shows the admin their own line, escaped by format_html.
            raise ValidationError(
                [
                    ValidationError(f"column {error.column}: {error.message}", code="rule"),
                    ValidationError(rule_line_caret(line, error.column), code="rule"),
                ]
            ) from None
        taken = CapRule.objects.filter(name_folded=rule.name.casefold())
        if self.instance.pk is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise ValidationError(
                "another rule already has this name (names match ignoring case)", code="taken"
            )
        return line


class ParsesFilter(admin.SimpleListFilter):
    title = "parses"
    parameter_name = "parses"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "yes"), ("no", "no: every call is refused")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in {"yes", "no"}:
            return queryset
        broken = [
            pk for pk, line in queryset.values_list("pk", "line") if stored_rule(line) is None
        ]
        if self.value() == "no":
            return queryset.filter(pk__in=broken)
        return queryset.exclude(pk__in=broken)


@admin.register(CapRule)
class CapRuleAdmin(AuditedAdmin):
    form = CapRuleForm
    # Few columns, so that the action stays on screen at 1280 px; a long tools list or cap is
    # cut short with an ellipsis (static/css/admin.css), whole in its tooltip and in the line.
    list_display = ("name", "enabled", "parses", "tools", "cap", "rule_action", "updated_at")
    list_filter = ("enabled", ParsesFilter)
    search_fields = ("name", "line", "description")
    ordering = ("name_folded",)
    actions = ["export_rules_file"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # The service creates the gates the rule names and writes the one entry of the save.
        cap_rule_save(
            line=form.cleaned_data["line"],
            enabled=obj.enabled,
            description=obj.description,
            rule=obj,
            by_user=signed_in_user(request),
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        if request.method == "GET":
            broken = sum(
                1
                for line in CapRule.objects.filter(enabled=True).values_list("line", flat=True)
                if stored_rule(line) is None
            )
            if broken:
                messages.error(
                    request,
                    f"{broken} enabled rule{'s' if broken != 1 else ''} no longer "
                    f"parse{'s' if broken == 1 else ''}: every call is refused "
                    "('policy error') until it is fixed or disabled.",
                )
        # The widest list: without the admin's side navigation (the breadcrumbs stay), all
        # its columns, the action last, fit a 1280 px screen.
        extra_context = {**(extra_context or {}), "is_nav_sidebar_enabled": False}
        return super().changelist_view(request, extra_context)

    @admin.display(description="parses")
    def parses(self, obj: CapRule) -> str:
        if stored_rule(obj.line) is not None:
            return "✓"
        # Classes of static/css/admin.css: the Content-Security-Policy blocks inline styles.
        if obj.enabled:
            return format_html(
                '<strong class="cs-broken cs-broken-enabled">{}</strong>',
                "✖ NO LONGER PARSES: calls are refused",
            )
        return format_html('<strong class="cs-broken">{}</strong>', "✖ no longer parses")

    @admin.display(description="tools")
    def tools(self, obj: CapRule) -> str:
        rule = stored_rule(obj.line)
        return "—" if rule is None else _clipped(", ".join(rule.tools))

    @admin.display(description="cap")
    def cap(self, obj: CapRule) -> str:
        """The argument, kind, limits, window and whose total, in one short column."""
        rule = stored_rule(obj.line)
        if rule is None:
            return "—"
        text = f"arg={'.'.join(rule.arg)}"
        if rule.unit is capcore.Unit.MINOR:
            text += " (minor units)"
        if rule.currency_arg is not None:
            text += f" (currency from {'.'.join(rule.currency_arg)})"
        text += f" {rule.kind.value} " + ", ".join(_money(limit) for limit in rule.limits)
        if rule.kind is capcore.Kind.SUM:
            text += " all time" if rule.window is None else f" {rule.window.to_text()}"
            text += ", one total" if rule.key is None else f" {rule.key.to_text()}"
        return _clipped(text)

    @admin.display(description="action")
    def rule_action(self, obj: CapRule) -> str:
        rule = stored_rule(obj.line)
        if rule is None:
            return "—"
        if rule.action.kind is capcore.ActionKind.REFUSE:
            return "refuse"
        return f"gate {rule.action.gate}" if rule.action.gate else "gate (default)"

    @admin.action(description="Export as rules file")
    def export_rules_file(self, request: HttpRequest, queryset: QuerySet[CapRule]) -> HttpResponse:
        response = HttpResponse(
            rules_file_text(rules=queryset), content_type="text/plain; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="cap-rules.txt"'
        return response


@admin.register(ToolClass)
class ToolClassAdmin(AuditedAdmin):
    list_display = ("pattern", "tool_class")
    list_filter = ("tool_class",)
    search_fields = ("pattern",)


@admin.register(PermissionRule)
class PermissionRuleAdmin(AuditedAdmin):
    list_display = ("decision", "pattern", "agent", "run_id", "expires_at", "created_at")
    list_filter = ("decision",)
    search_fields = ("pattern", "agent__name")


@admin.register(Budget)
class BudgetAdmin(AuditedAdmin):
    list_display = (
        "__str__",
        "scope",
        "max_calls",
        "max_tokens",
        "max_cost",
        "cost_currency",
        "max_duration",
        "action",
        "gate",
    )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        budget_save(budget=obj, by_user=signed_in_user(request))  # creates the gate it names
