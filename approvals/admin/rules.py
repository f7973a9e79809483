"""Cap rules, tool classes, permission rules and budgets.

A cap rule is its line, saved through ``cap_rule_save``. Error messages name a position or a
category, never the text an admin typed; the caret view, apart from the message, shows the
admin the line they typed themselves.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.html import format_html

import capcore
from approvals.admin.base import AuditedAdmin, signed_in_user
from approvals.admin.caret import rule_line_caret
from approvals.admin.lab import rules_lab
from approvals.models import Budget, CapRule, PermissionRule, ToolClass
from approvals.selectors.rules import stored_rule
from approvals.services.rules import (
    GATE_CREATED,
    GateCreated,
    budget_save,
    cap_rule_save,
    rules_file_text,
)
from capcore.budgets import COST_EXPONENT, parse_cost

RENAME_HELP = (
    "The rule's ledger is kept by its name: editing the limit or window keeps the running "
    "totals, renaming the rule starts a new, empty ledger."
)
SHADOW_HELP = (
    "A shadow rule (the box below, or 'shadow' before the name) is evaluated and recorded on "
    "every call, in ledgers of its own, and never holds or refuses one; clearing the box "
    "enforces it (audited)."
)


def _money(limit: capcore.Limit) -> str:
    return f"{limit.currency} {capcore.format_amount(limit.minor, limit.exponent, grouping=True)}"


def _clipped(text: str) -> str:
    """A list cell that static/css/admin.css cuts short with an ellipsis; whole in its
    tooltip."""
    return format_html('<span class="cs-clip" title="{}">{}</span>', text, text)


def gate_created_warning(request: HttpRequest) -> GateCreated:
    """Says, on the next page, that a save created a gate: a misspelt name makes one."""
    return lambda name: messages.warning(request, GATE_CREATED.format(name=name))


class CapRuleForm(forms.ModelForm):  # type: ignore[type-arg]
    line = forms.CharField(
        strip=False,  # the grammar decides which blanks are allowed, not the form
        widget=forms.TextInput(attrs={"size": 120, "spellcheck": "false", "autocomplete": "off"}),
        help_text="One cap rule, e.g. big-payment: pay,transfer arg=amount max USD 500.00 "
        "-> gate finance. " + RENAME_HELP + " " + SHADOW_HELP,
    )

    class Meta:
        model = CapRule
        fields = ["line", "enabled", "shadow", "description"]
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
    list_display = ("name", "state", "parses", "tools", "cap", "rule_action", "updated_at")
    list_filter = ("enabled", "shadow", ParsesFilter)
    search_fields = ("name", "line", "description")
    ordering = ("name_folded",)
    actions = ["export_rules_file"]

    def get_urls(self) -> list[URLPattern]:
        # Before the model's own, whose "<path:object_id>/" would take "lab" for an id.
        lab = path(
            "lab/",
            self.admin_site.admin_view(self.lab_view),
            name="approvals_caprule_lab",
        )
        return [lab, *super().get_urls()]

    def lab_view(self, request: HttpRequest) -> HttpResponse:
        return rules_lab(request, admin_site=self.admin_site)  # type: ignore[arg-type]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # The service creates the gates the rule names and writes the one entry of the save.
        cap_rule_save(
            line=form.cleaned_data["line"],
            enabled=obj.enabled,
            shadow=obj.shadow,
            description=obj.description,
            rule=obj,
            by_user=signed_in_user(request),
            on_gate_created=gate_created_warning(request),
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        if request.method == "GET":
            broken = sum(
                1
                for line in CapRule.objects.filter(enabled=True, shadow=False).values_list(
                    "line", flat=True
                )
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

    @admin.display(description="state", ordering="enabled")
    def state(self, obj: CapRule) -> str:
        """Enabled and shadow in one column, so that the action stays on screen."""
        if not obj.enabled:
            return "off"
        return "shadow" if obj.shadow else "enforced"

    @admin.display(description="parses")
    def parses(self, obj: CapRule) -> str:
        if stored_rule(obj.line) is not None:
            return "✓"
        # Classes of static/css/admin.css: the Content-Security-Policy blocks inline styles.
        # A shadow rule that no longer parses is left out, never a reason to refuse.
        if obj.enabled and not obj.shadow:
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
    # A grant's origin is the approval's (docs/ui.md, "Grants"), never typed here; shown, not
    # offered as a list of every call and person.
    readonly_fields = ("call", "granted_by", "granted_at")


# A budget's cost ceiling is typed as a decimal and stored as an integer of 10⁻⁹ units
# (docs/policies.md, "Budgets"); each refusal says what to type, never what was typed.
COST_HELP = (
    "The most the run (or the day) may cost, in the cost currency, as a decimal with at most "
    "9 decimal places: 0.25 is a quarter of a unit. Empty: no cost ceiling."
)
COST_SYNTAX = "Type the cost as a decimal such as 0.25 or 12: digits and at most one '.'."
COST_FRACTION = "A cost has at most 9 decimal places (0.000000001 is the smallest)."
COST_NEGATIVE = "A cost ceiling cannot be negative."
COST_TOO_BIG = "A cost ceiling is at most 9223372036.854775807."
COST_CURRENCY = "A cost ceiling needs its currency: an upper-case ISO 4217 code such as USD."
COST_CURRENCY_UNKNOWN = "Not an ISO 4217 currency code with a minor unit: write one such as USD."


def cost_text(units: int) -> str:
    """10⁻⁹ units as the shortest decimal that says them exactly: ``250000000`` → ``0.25``."""
    text = capcore.format_amount(units, COST_EXPONENT)
    return text.rstrip("0").rstrip(".")


def cost_units(text: str) -> int:
    """The decimal an admin typed, in 10⁻⁹ units, exactly (no float on the way)."""
    try:
        return parse_cost(text)
    except capcore.FractionDigits:
        raise ValidationError(COST_FRACTION, code="cost_fraction") from None
    except capcore.NegativeAmount:
        raise ValidationError(COST_NEGATIVE, code="cost_negative") from None
    except capcore.AmountOverflow:
        raise ValidationError(COST_TOO_BIG, code="cost_too_big") from None
    except capcore.NotAssessable:
        raise ValidationError(COST_SYNTAX, code="cost_syntax") from None


class BudgetForm(forms.ModelForm):  # type: ignore[type-arg]
    max_cost = forms.CharField(
        required=False,
        label="Max cost",
        help_text=COST_HELP,
        widget=forms.TextInput(
            attrs={"inputmode": "decimal", "autocomplete": "off", "spellcheck": "false"}
        ),
    )

    class Meta:
        model = Budget
        fields = [
            "agent",
            "max_calls",
            "max_tokens",
            "max_cost",
            "cost_currency",
            "max_duration",
            "scope",
            "action",
            "gate",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.max_cost is not None:
            self.initial["max_cost"] = cost_text(self.instance.max_cost)

    def clean_max_cost(self) -> int | None:
        text: str = self.cleaned_data["max_cost"]
        return None if not text else cost_units(text)

    def clean_cost_currency(self) -> str:
        code: str = self.cleaned_data["cost_currency"]
        if code:
            try:
                capcore.exponent(code)
            except capcore.UnknownCurrency:
                raise ValidationError(COST_CURRENCY_UNKNOWN, code="cost_currency") from None
        return code

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        no_currency = not cleaned.get("cost_currency") and "cost_currency" not in self.errors
        if cleaned.get("max_cost") is not None and no_currency:
            self.add_error("cost_currency", ValidationError(COST_CURRENCY, code="cost"))
        return cleaned


@admin.register(Budget)
class BudgetAdmin(AuditedAdmin):
    form = BudgetForm
    list_display = (
        "__str__",
        "scope",
        "max_calls",
        "max_tokens",
        "cost_ceiling",
        "max_duration",
        "action",
        "gate",
    )

    @admin.display(description="max cost")
    def cost_ceiling(self, obj: Budget) -> str:
        if obj.max_cost is None:
            return "—"
        return f"{obj.cost_currency} {cost_text(obj.max_cost)}"

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        budget_save(  # creates the gate it names
            budget=obj,
            by_user=signed_in_user(request),
            on_gate_created=gate_created_warning(request),
        )
