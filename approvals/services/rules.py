"""Writes on cap rules and budgets: the line is the rule; its gates exist as soon as it does.

Also the rules file: ``rules_import`` (all or nothing, docs/rules.md "Rules files") and
``rules_export`` (canonical lines).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

import capcore
from approvals.errors import Conflict, Invalid
from approvals.models import AuditEntry, Budget, CapRule, Gate
from approvals.services.admin_changes import model_save
from approvals.services.audit import audit_record, audit_snapshot
from capcore.rules import SHADOW, check_rules

_BLANKS = " \t"  # the grammar's blanks; any other character is the parser's to refuse
FILE_REFUSED = "{count} line(s) of the rules file are refused: nothing was changed"
REPLACE_REFUSED = (
    "replacing would disable every enabled rule ({count}), as the file names none of them: "
    "nothing was changed"
)
# Said wherever a rule or budget creates its gate (admin, import_rules): a misspelt name
# otherwise makes a new gate, with the defaults, without a word. The name is the grammar's
# (letters, digits, '_', '.', '-'), written by an admin.
GATE_CREATED = (
    "Created gate {name}: no gate had that name. It has no group yet, so anyone who may "
    "decide calls can approve the calls held there, one approval enough, until an admin "
    "sets its group and required approvals under Approvals › Gates. If you meant an "
    "existing gate, correct the name."
)

# Told the name of each gate a save creates, when the caller wants to say so.
GateCreated = Callable[[str], None]


class CapRuleNameTaken(Conflict):
    """Another rule already has this name (names match under casefold)."""


class RulesFileRefused(Invalid):
    """Lines of a rules file were refused: ``errors`` holds every one, in file order, each
    with its line and column. Nothing was changed."""

    def __init__(self, errors: list[capcore.RuleError]) -> None:
        super().__init__(FILE_REFUSED.format(count=len(errors)))
        self.errors = tuple(errors)


class RulesReplaceRefused(Conflict):
    """``replace`` would disable every enabled rule (``enabled`` of them), and ``force`` was
    not given: the file names none of them, most likely the wrong or an empty file."""

    def __init__(self, enabled: int) -> None:
        super().__init__(REPLACE_REFUSED.format(count=enabled))
        self.enabled = enabled


@dataclass(frozen=True, slots=True)
class RulesImported:
    """What an import did, by rule name: the file's spelling for the rules it names, the
    stored one for those it disabled. A rule whose stored line and state already were the
    file's is ``unchanged`` and not saved again."""

    created: tuple[str, ...]
    updated: tuple[str, ...]
    unchanged: tuple[str, ...]
    disabled: tuple[str, ...]
    gates_created: tuple[str, ...] = ()  # the gates the rules named that did not exist


def gate_ensure(
    *, name: str, by_user: User | None = None, on_created: GateCreated | None = None
) -> Gate:
    """The gate called ``name``, created with the defaults (docs/rules.md, "Gates") if missing
    (in the caller's transaction), so a rule can never hold a call at a gate nobody set up.
    ``on_created`` is told its name when it is created."""
    gate, created = Gate.objects.get_or_create(name=name)
    if created:
        audit_record(
            action=AuditEntry.Action.GATE_CREATED,
            obj=gate,
            user=by_user,
            after=f"name={gate.name!r} required_approvals={gate.required_approvals}",
        )
        if on_created is not None:
            on_created(gate.name)
    return gate


def stored_line(line: str, parsed: capcore.Rule) -> str:
    """The line as stored: its outer blanks and a leading ``shadow`` word left out (the row's
    ``shadow`` says it)."""
    text = line.strip(_BLANKS)
    if parsed.shadow:
        text = text[len(SHADOW) :].lstrip(_BLANKS)
    return text


@transaction.atomic
def cap_rule_save(
    *,
    line: str,
    enabled: bool = True,
    shadow: bool | None = None,
    description: str | None = None,
    rule: CapRule | None = None,
    by_user: User | None = None,
    on_gate_created: GateCreated | None = None,
) -> CapRule:
    """Create or update the rule named in ``line`` (names match under casefold; the line's
    spelling wins). Refuses a line that does not parse with ``capcore.RuleError``.

    A line that starts with ``shadow`` saves a shadow rule (evaluated and recorded, never
    enforced; the word is not stored), as does ``shadow`` True (the admin's checkbox);
    ``shadow`` None: the line decides. The flag changing either way is in the audit entry.
    ``description`` None keeps the stored one. With ``rule`` (the row an admin is editing)
    that row is updated even when the line renames it — a new name starts a new ledger — and
    a name another rule already has is refused with ``CapRuleNameTaken``. The gate the rule
    names is created if missing, and ``on_gate_created`` told so (``GATE_CREATED``).
    """
    parsed = capcore.parse_rule(line)
    folded = parsed.name.casefold()
    holder = CapRule.objects.select_for_update().filter(name_folded=folded).first()
    if rule is None:
        row = holder or CapRule()
    elif holder is not None and holder.pk != rule.pk:
        raise CapRuleNameTaken
    else:
        row = rule
    if parsed.action.kind is capcore.ActionKind.GATE:
        gate_ensure(name=parsed.action.gate, by_user=by_user, on_created=on_gate_created)
    # The row as stored: an admin's form has already changed ``rule`` in memory.
    stored = None if row.pk is None else CapRule.objects.filter(pk=row.pk).first()
    row.name = parsed.name
    row.name_folded = folded
    row.line = stored_line(line, parsed)
    row.enabled = enabled
    row.shadow = parsed.shadow or bool(shadow)
    if description is not None:
        row.description = description
    row.save()
    audit_record(
        action=AuditEntry.Action.CAP_RULE_SAVED,
        obj=row,
        user=by_user,
        before="" if stored is None else audit_snapshot(stored),
        after=audit_snapshot(row),
    )
    return row


def rules_import(
    *, text: str, replace: bool = False, force: bool = False, by_user: User | None = None
) -> RulesImported:
    """Load a rules file: every line is checked first (``RulesFileRefused`` with every bad
    line, nothing changed), then all are created or updated by casefolded name in one
    transaction, enabled, the file's spelling winning (a line with ``shadow`` makes the rule a
    shadow rule, one without an enforced rule). ``replace`` also disables every enabled
    rule the file does not name — refused with ``RulesReplaceRefused`` when that is every
    enabled rule, unless ``force``. The gates the rules name are created if missing, and
    reported (``gates_created``)."""
    parsed, errors = check_rules(text)
    if errors:
        raise RulesFileRefused(errors)
    named = {line.rule.name.casefold() for line in parsed}
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    disabled: list[str] = []
    gates_created: list[str] = []
    with transaction.atomic():
        enabled = list(CapRule.objects.select_for_update().filter(enabled=True))
        unnamed = [row for row in enabled if row.name_folded not in named] if replace else []
        if unnamed and len(unnamed) == len(enabled) and not force:
            raise RulesReplaceRefused(len(enabled))
        stored = {row.name_folded: row for row in CapRule.objects.filter(name_folded__in=named)}
        for line in parsed:
            row = stored.get(line.rule.name.casefold())
            if (
                row is not None
                and row.enabled
                and row.shadow == line.rule.shadow
                and row.line == stored_line(line.text, line.rule)
            ):
                # Nothing to save; the gate is still made sure of, as on every import.
                if line.rule.action.kind is capcore.ActionKind.GATE:
                    gate_ensure(
                        name=line.rule.action.gate,
                        by_user=by_user,
                        on_created=gates_created.append,
                    )
                unchanged.append(line.rule.name)
                continue
            cap_rule_save(
                line=line.text,
                enabled=True,
                shadow=line.rule.shadow,
                description=None,
                by_user=by_user,
                on_gate_created=gates_created.append,
            )
            (created if row is None else updated).append(line.rule.name)
        for row in sorted(unnamed, key=lambda r: r.name_folded):
            row.enabled = False
            row.save(update_fields=["enabled", "updated_at"])
            audit_record(
                action=AuditEntry.Action.CAP_RULE_DISABLED,
                obj=row,
                user=by_user,
                before="enabled",
                after="disabled (not in the imported rules file)",
            )
            disabled.append(row.name)
    return RulesImported(
        created=tuple(created),
        updated=tuple(updated),
        unchanged=tuple(unchanged),
        disabled=tuple(disabled),
        gates_created=tuple(gates_created),
    )


def rules_file_text(*, rules: Iterable[CapRule]) -> str:
    """A rules file of these rules' canonical lines, sorted by name. A disabled rule is written
    as a comment (so importing the file does not enable it); a shadow rule's line starts with
    ``shadow``; a stored line that no longer parses is a ``# <name>: no longer parses``
    comment."""
    out = []
    for row in sorted(rules, key=lambda r: (r.name_folded, r.name)):
        try:
            parsed = dataclasses.replace(capcore.parse_rule(row.line), shadow=row.shadow)
            canonical = parsed.to_line()
        except capcore.RuleError:
            out.append(f"# {row.name}: no longer parses")
            continue
        out.append(canonical if row.enabled else f"# disabled: {canonical}")
    return "".join(f"{line}\n" for line in out)


def rules_export() -> str:
    """The enabled rules as a rules file (canonical lines, one per line, sorted by name)."""
    return rules_file_text(rules=CapRule.objects.filter(enabled=True))


@transaction.atomic
def budget_save(
    *, budget: Budget, by_user: User | None = None, on_gate_created: GateCreated | None = None
) -> Budget:
    """Save a budget, audited as an admin add or change; a budget that holds calls at a gate
    creates that gate if missing, and tells ``on_gate_created`` so."""
    if budget.action == Budget.Action.GATE:
        gate_ensure(name=budget.gate, by_user=by_user, on_created=on_gate_created)
    model_save(instance=budget, actor=by_user)
    return budget
