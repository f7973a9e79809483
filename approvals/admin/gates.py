"""Gates: where held calls wait, and who decides there. The default gate is never deleted,
and a gate that rules, budgets or held calls name is neither renamed nor deleted
(``services.gates``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest

from approvals.admin.base import AuditedAdmin, signed_in_user
from approvals.models import Gate
from approvals.services.gates import GateInUse, gate_delete, gate_name_free, gate_save
from capcore.rules import NAME

BAD_GATE_NAME = "a gate name is a letter or digit, then letters, digits, '_', '.' or '-'"


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
        fields = ["name", "group", "required_approvals", "timeout_seconds", "require_passkey"]

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        stored = self.instance.name if self.instance.pk is not None else None
        if stored is not None and stored != name:
            try:
                gate_name_free(name=stored)
            except GateInUse as refused:
                raise ValidationError(refused.message, code="in_use") from None
        return name


@admin.register(Gate)
class GateAdmin(AuditedAdmin):
    form = GateForm
    list_display = (
        "gate_name",
        "group",
        "required_approvals",
        "timeout_seconds",
        "require_passkey",
    )
    search_fields = ("name",)
    ordering = ("name",)

    @admin.display(description="name", ordering="name")
    def gate_name(self, obj: Gate) -> str:
        return str(obj)

    def save_model(self, request: HttpRequest, obj: Gate, form: Any, change: bool) -> None:
        gate_save(gate=obj, by_user=signed_in_user(request))

    def delete_model(self, request: HttpRequest, obj: Gate) -> None:
        gate_delete(gate=obj, by_user=signed_in_user(request))

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[str]]:
        """What names a gate is shown as protecting it: the page then refuses the delete."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        gates = objs if isinstance(objs, QuerySet) else list(objs)
        for gate in gates:
            try:
                gate_name_free(name=gate.name)
            except GateInUse as refused:
                protected = [*protected, refused.message]
        return deleted, counts, perms_needed, protected

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.name == "":
            return False  # the default gate always exists
        return super().has_delete_permission(request, obj)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # one at a time, so the default gate stays
        return actions
