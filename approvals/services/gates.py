"""Writes on gates beyond creating them (``rules.gate_ensure``): a gate that rules, budgets
or held calls name keeps its name, since renaming or deleting it would drop its group and
quorum for them (docs/policies.md, "Gates and quorum")."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from approvals.errors import Conflict
from approvals.models import Gate
from approvals.selectors.gates import GateNamedBy, gate_named_by
from approvals.services.admin_changes import model_delete, model_save

DEFAULT_GATE_STAYS = "The default gate always exists, with an empty name."
GATE_IN_USE = (
    "{gate} is named by {what}. Renaming or deleting it would drop its group and quorum for "
    "them: change those first."
)


class GateInUse(Conflict):
    """The gate is the default one, or something names it; the message lists what."""


def gate_in_use_message(*, name: str, named_by: GateNamedBy) -> str:
    """Why the gate ``name`` keeps its name, listing what names it."""
    what = []
    if named_by.rules:
        what.append(f"cap rule{'s' if len(named_by.rules) > 1 else ''} {', '.join(named_by.rules)}")
    what += named_by.budgets
    if named_by.held_calls:
        what.append(f"{named_by.held_calls} held call{'s' if named_by.held_calls > 1 else ''}")
    return GATE_IN_USE.format(gate=f"Gate {name!r}", what="; ".join(what))


def gate_name_free(*, name: str) -> None:
    """Raise ``GateInUse`` unless the gate ``name`` may be renamed or deleted."""
    if name == "":
        raise GateInUse(DEFAULT_GATE_STAYS)
    named_by = gate_named_by(name=name)
    if named_by:
        raise GateInUse(gate_in_use_message(name=name, named_by=named_by))


@transaction.atomic
def gate_save(*, gate: Gate, by_user: User | None = None) -> Gate:
    """Save a gate, audited as an admin add or change; a rename is refused with
    ``GateInUse`` while anything names the stored name."""
    if gate.pk is not None:
        stored = Gate.objects.select_for_update().filter(pk=gate.pk).first()
        if stored is not None and stored.name != gate.name:
            gate_name_free(name=stored.name)
    model_save(instance=gate, actor=by_user)
    return gate


@transaction.atomic
def gate_delete(*, gate: Gate, by_user: User | None = None) -> None:
    """Delete a gate, audited as an admin delete; refused with ``GateInUse`` for the default
    gate and while anything names it."""
    stored = Gate.objects.select_for_update().filter(pk=gate.pk).first()
    gate_name_free(name=gate.name if stored is None else stored.name)
    model_delete(instance=gate, actor=by_user)
