"""Django admin: thin. Writes go through the services; every change is audited.

Calls, ledgers and the audit log are read-only. Error messages name a position or a category,
never the text an admin typed or a model wrote; the cap-rule form's caret view, apart from the
message, shows the admin the line they typed themselves.
"""

from __future__ import annotations

import unicodedata
import uuid
from typing import Any

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy

import capcore
from approvals.models import (
    Agent,
    AgentToken,
    AuditEntry,
    Budget,
    Call,
    CapRule,
    DeliveryAttempt,
    Gate,
    Ledger,
    LedgerEntry,
    Notification,
    NotificationChannel,
    PermissionRule,
    ToolClass,
)
from approvals.selectors.ledgers import ledger_spent
from approvals.selectors.rules import stored_rule
from approvals.services.agents import (
    agent_delete,
    agent_save,
    agent_token_issue,
    agent_token_revoke,
    agent_tokens_revoke,
)
from approvals.services.audit import audit_object_type, audit_record, audit_snapshot
from approvals.services.ledgers import VoidRefused, ledger_entry_void
from approvals.services.logins import login_attempts_unlock
from approvals.services.notifications import (
    ChannelInvalid,
    NotRetried,
    channel_audit,
    channel_check,
    channel_delete,
    channel_snapshot,
    masked_target,
    notification_retry,
    webhook_secret_new,
)
from approvals.services.rules import budget_save, cap_rule_save, rules_file_text
from capcore.rules import NAME

RENAME_HELP = (
    "The rule's ledger is kept by its name: editing the limit or window keeps the running "
    "totals, renaming the rule starts a new, empty ledger."
)
BAD_GATE_NAME = "a gate name is a letter or digit, then letters, digits, '_', '.' or '-'"


# --- Audit ----------------------------------------------------------------------------------


def _user(request: HttpRequest) -> User | None:
    user = request.user
    return user if isinstance(user, User) else None


def _stored_snapshot(obj: models.Model) -> str:
    """The row as the database holds it (the form has already changed ``obj`` in memory)."""
    stored = type(obj)._default_manager.filter(pk=obj.pk).first()
    return "" if stored is None else audit_snapshot(stored)


def _saved_action(change: bool) -> AuditEntry.Action:
    return AuditEntry.Action.ADMIN_CHANGE if change else AuditEntry.Action.ADMIN_ADD


def _audit_saved(
    request: HttpRequest, obj: models.Model, change: bool, before: str, after: str
) -> None:
    audit_record(
        action=_saved_action(change), obj=obj, user=_user(request), before=before, after=after
    )


def _audit_deleted(request: HttpRequest, obj: models.Model, object_id: Any, before: str) -> None:
    audit_record(
        action=AuditEntry.Action.ADMIN_DELETE,
        object_type=audit_object_type(type(obj)),
        object_id=object_id,
        user=_user(request),
        before=before,
    )


class AuditedAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Every add, change and delete made here writes one audit entry with who made it and the
    object before and after (as Django's JSON serialization). An admin whose model has a
    service that writes the entry itself overrides ``save_model`` to call it instead."""

    def persist(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Save ``obj``; an admin whose model has a service that does not audit overrides
        this to call it."""
        obj.save()

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        with transaction.atomic():
            before = _stored_snapshot(obj) if change and obj.pk is not None else ""
            self.persist(request, obj, form, change)
            _audit_saved(request, obj, change, before, audit_snapshot(obj))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            object_id, before = obj.pk, audit_snapshot(obj)
            obj.delete()
            _audit_deleted(request, obj, object_id, before)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
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


# --- Cap rules ------------------------------------------------------------------------------


def _money(limit: capcore.Limit) -> str:
    return f"{limit.currency} {capcore.format_amount(limit.minor, limit.exponent, grouping=True)}"


def _clipped(text: str) -> str:
    """A list cell that static/css/admin.css cuts short with an ellipsis; whole in its
    tooltip."""
    return format_html('<span class="cs-clip" title="{}">{}</span>', text, text)


CARET_CONTEXT = 60  # characters of the line shown on each side of the caret


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
        # Through the service: the gates the rule names are created, and it writes the one
        # audit entry of the save.
        cap_rule_save(
            line=form.cleaned_data["line"],
            enabled=obj.enabled,
            description=obj.description,
            rule=obj,
            by_user=_user(request),
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


# --- Agents and tokens ----------------------------------------------------------------------


class AgentTokenInline(admin.TabularInline):  # type: ignore[type-arg]
    model = AgentToken
    fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name = "API token"
    verbose_name_plural = "API tokens (issue one with the 'Issue a token' action of the list)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Agent)
class AgentAdmin(AuditedAdmin):
    list_display = ("name", "principal", "mode", "active", "active_tokens", "created_at")
    list_filter = ("mode", "active")
    search_fields = ("name", "principal")
    fields = ("name", "principal", "allowed_principals", "mode", "active")
    inlines = [AgentTokenInline]
    actions = ["issue_token", "revoke_tokens"]

    @admin.display(description="active tokens")
    def active_tokens(self, obj: Agent) -> int:
        return obj.tokens.filter(revoked_at__isnull=True).count()

    def persist(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        agent_save(agent=obj)  # unticking "active" closes the agent's sockets

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            object_id, before = obj.pk, audit_snapshot(obj)
            agent_delete(agent=obj)  # its tokens go with it: their sockets close
            _audit_deleted(request, obj, object_id, before)

    @admin.action(description="Issue a token (shown once)", permissions=["change"])
    def issue_token(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset:
            token = agent_token_issue(agent=agent, by_user=_user(request))
            # The token is ours, not typed by anyone: shown here once, then only its digest.
            messages.success(
                request,
                f"New token for agent {agent.name}: {token} — copy it now, it will not be "
                "shown again.",
            )

    @admin.action(description="Revoke all tokens", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        revoked = sum(
            agent_tokens_revoke(agent=agent, by_user=_user(request)) for agent in queryset
        )
        messages.success(request, f"Revoked {revoked} token{'' if revoked == 1 else 's'}.")


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("prefix", "agent", "created_at", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("prefix", "agent__name")
    fields = ("agent", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are issued from the agents' list, where they are shown once

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the row stays, for the audit log

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("approvals.change_agenttoken")

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        revoked = 0
        for token_row in queryset.filter(revoked_at__isnull=True):
            agent_token_revoke(token_row=token_row, by_user=_user(request))
            revoked += 1
        messages.success(request, f"Revoked {revoked} token{'' if revoked == 1 else 's'}.")


# --- Gates, tool classes, permission rules, budgets ----------------------------------------


def _gate_name(value: str) -> None:
    """The names a rule's ``-> gate <name>`` accepts (capcore's grammar)."""
    if NAME.fullmatch(value) is None:
        raise ValidationError(BAD_GATE_NAME, code="invalid")


class GateForm(forms.ModelForm):  # type: ignore[type-arg]
    name = forms.CharField(
        required=False,
        max_length=64,
        validators=[_gate_name],
        help_text="Empty is the default gate, which always exists.",
    )

    class Meta:
        model = Gate
        fields = ["name", "group", "required_approvals", "timeout_seconds"]


@admin.register(Gate)
class GateAdmin(AuditedAdmin):
    form = GateForm
    list_display = ("gate_name", "group", "required_approvals", "timeout_seconds")
    search_fields = ("name",)
    ordering = ("name",)

    @admin.display(description="name", ordering="name")
    def gate_name(self, obj: Gate) -> str:
        return str(obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.name == "":
            return False  # the default gate always exists
        return super().has_delete_permission(request, obj)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # one at a time, so the default gate stays
        return actions


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

    def persist(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        budget_save(budget=obj, by_user=_user(request))  # creates the gate it names


# --- Read-only: calls, ledgers, audit log ---------------------------------------------------


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


class LedgerEntryInline(admin.TabularInline):  # type: ignore[type-arg]
    model = LedgerEntry
    fields = ("call", "minor", "recorded_at", "voided_at", "void_reason")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-recorded_at",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _ledger_exponent(ledger: Ledger, rule: capcore.Rule | None) -> int | None:
    limit = rule.limit_for(ledger.currency) if rule is not None else None
    if limit is not None:
        return limit.exponent
    try:
        return capcore.exponent(ledger.currency)
    except capcore.CapcoreError:
        return None


def _ledger_rule(ledger: Ledger) -> capcore.Rule | None:
    line = CapRule.objects.filter(name_folded=ledger.rule).values_list("line", flat=True).first()
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
            entry_id=obj.pk, reason=form.cleaned_data["void_reason"], by_user=_user(request)
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


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The append-only audit log: nobody adds, changes or deletes an entry here."""

    list_display = ("at", "action", "object_type", "object_id", "user", "agent")
    # The values stored, not the choices: older entries keep older spellings ("caprule").
    list_filter = (
        ("action", admin.AllValuesFieldListFilter),
        ("object_type", admin.AllValuesFieldListFilter),
    )
    search_fields = ("object_id", "action")
    date_hierarchy = "at"
    ordering = ("-at", "-pk")


# --- Notifications: channels edited and audited (secrets masked), the outbox read-only ------


class NotificationChannelForm(forms.ModelForm):  # type: ignore[type-arg]
    events = forms.MultipleChoiceField(
        choices=NotificationChannel.Event.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=list(NotificationChannel.Event.values),
    )
    gates = forms.CharField(
        required=False,
        help_text="Comma-separated gate names: only calls held at one of them. Empty = every gate.",
    )
    secret = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"size": 60, "autocomplete": "off"}),
        help_text="Webhook only: 'whsec_' and base64; empty on a new webhook = a new secret.",
    )

    class Meta:
        model = NotificationChannel
        fields = ["name", "kind", "target", "secret", "events", "gates", "enabled"]
        widgets = {"target": forms.TextInput(attrs={"size": 100, "autocomplete": "off"})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["gates"] = ", ".join(self.instance.gates)

    def clean_gates(self) -> list[str]:
        text = self.cleaned_data.get("gates") or ""
        return [gate.strip() for gate in text.split(",") if gate.strip()]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        kind, target = cleaned.get("kind"), cleaned.get("target")
        if kind is None or target is None or "events" not in cleaned:
            return cleaned
        secret = cleaned.get("secret") or ""
        if kind == NotificationChannel.Kind.WEBHOOK and not secret and self.instance.pk is None:
            secret = cleaned["secret"] = webhook_secret_new()
        try:
            channel_check(
                kind=kind,
                target=target,
                events=cleaned["events"],
                gates=cleaned.get("gates") or [],
                secret=secret,
            )
        except ChannelInvalid as error:
            raise ValidationError(str(error)) from None
        return cleaned


class DeliveryAttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = DeliveryAttempt
    fields = ("at", "ok", "status_code", "error", "duration_ms")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-at",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(NotificationChannel)
class NotificationChannelAdmin(AuditedAdmin):
    """Audited like every model, with the secret and the target's credentials masked in the
    entries (``channel_snapshot``); shown whole only here."""

    form = NotificationChannelForm
    list_display = ("__str__", "kind", "masked", "events_shown", "gates_shown", "enabled")
    list_filter = ("kind", "enabled")

    @admin.display(description="target")
    def masked(self, obj: NotificationChannel) -> str:
        return masked_target(obj.kind, obj.target)

    @admin.display(description="events")
    def events_shown(self, obj: NotificationChannel) -> str:
        return ", ".join(obj.events)

    @admin.display(description="gates")
    def gates_shown(self, obj: NotificationChannel) -> str:
        return ", ".join(obj.gates) or "all"

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        with transaction.atomic():
            stored = NotificationChannel.objects.filter(pk=obj.pk).first() if change else None
            before = "" if stored is None else channel_snapshot(stored)
            obj.save()
            channel_audit(channel=obj, user=_user(request), change=change, before=before)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        channel_delete(channel=obj, user=_user(request))


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    """The outbox: each message with its attempts; "Retry now" tries one again at once."""

    list_display = ("created_at", "event", "channel", "call", "status", "attempts", "delivered_at")
    list_filter = ("status", "event", "channel")
    readonly_fields = (
        "id",
        "channel",
        "call",
        "event",
        "status",
        "created_at",
        "next_attempt_at",
        "lease_until",
        "attempts",
        "delivered_at",
        "payload",
    )
    inlines = [DeliveryAttemptInline]
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    actions = ["retry_now"]

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("approvals.change_notification")

    @admin.action(description="Retry now", permissions=["retry"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        retried = 0
        for notification in queryset:
            try:
                notification_retry(notification=notification, user=_user(request))
            except NotRetried:
                continue
            retried += 1
        skipped = queryset.count() - retried
        message = f"{retried} notification(s) to be tried again now."
        if skipped:
            message += f" {skipped} already delivered: left alone."
        self.message_user(request, message, messages.SUCCESS if retried else messages.WARNING)


# --- Users and groups: who may decide is part of the policy, so changes are audited --------


class _AccessAuditedAdmin:
    """Audits after the many-to-many fields are saved (``save_related``), comparing with the
    row as it was before ``save_model`` changed it."""

    snapshot: Any = None

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        stored = type(obj)._default_manager.filter(pk=obj.pk).first() if change else None
        request._audit_before = "" if stored is None else self.snapshot(stored)  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # type: ignore[misc]
        obj = form.instance
        before = getattr(request, "_audit_before", "")
        _audit_saved(request, obj, change, before, self.snapshot(obj))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        object_id, before = obj.pk, self.snapshot(obj)
        super().delete_model(request, obj)  # type: ignore[misc]
        _audit_deleted(request, obj, object_id, before)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)


USER_KEPT = (
    "This person has audit entries, which name them, so they cannot be deleted. "
    "Deactivate them instead: untick “Active” and save."
)
USERS_KEPT = (
    "Nothing was deleted: some of the selected people have audit entries, which name them. "
    "Deactivate them instead: untick “Active” and save."
)


class AuditedUserAdmin(_AccessAuditedAdmin, UserAdmin):  # type: ignore[type-arg]
    """Also audited, with who did it, by the signals of ``approvals/accounts/receivers.py``: the
    admin's password form, and every change of the fields. A person with audit entries is
    kept (the entries protect their actor): deleting one is refused with ``USER_KEPT``."""

    snapshot = staticmethod(audit_snapshot)
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


class AuditedGroupAdmin(_AccessAuditedAdmin, GroupAdmin):
    snapshot = staticmethod(audit_snapshot)


admin.site.unregister(User)
admin.site.unregister(Group)
admin.site.register(User, AuditedUserAdmin)
admin.site.register(Group, AuditedGroupAdmin)


# --- Login lockouts ---------------------------------------------------------------------------


class LoginAttemptAdmin(AccessAttemptAdmin):
    """django-axes' failed logins, one row per username and client address: deleting a row
    lifts its lockout (approvals/accounts/lockouts.py), audited with who did it."""

    def delete_model(self, request: HttpRequest, obj: AccessAttempt) -> None:
        login_attempts_unlock(attempts=[obj], by=_user(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        login_attempts_unlock(attempts=queryset, by=_user(request))


admin.site.unregister(AccessAttempt)
admin.site.register(AccessAttempt, LoginAttemptAdmin)
