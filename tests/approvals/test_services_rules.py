"""Cap rules in the database: saved with their gates, imported all or nothing, exported."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import capcore
from approvals.models import AuditEntry, Budget, CapRule, Gate
from approvals.services.rules import (
    GATE_CREATED,
    CapRuleNameTaken,
    RulesFileRefused,
    RulesImported,
    RulesReplaceRefused,
    budget_save,
    cap_rule_save,
    rules_export,
    rules_import,
)

pytestmark = pytest.mark.django_db

EXAMPLES = """\
# the examples of docs/rules.md
big-payment: pay,transfer arg=amount max USD 500.00 -> gate finance
daily-spend: pay arg=amount currency=currency sum USD 1000, EUR 900 per day by principal -> gate

wire-cap: wire arg=amount.value currency=amount.currency max USD 10000, EUR 9000 -> refuse
per-payee: pay arg=amount sum USD 2000 per 7d by arg=payee.email lower trim -> gate treasury
refunds: refund arg=amount_cents minor max USD 250.00 -> gate
metal: buy_metal arg=grams max XAU 10.000 exponent=3 -> refuse
"""


def lines_by_name() -> dict[str, str]:
    return dict(CapRule.objects.values_list("name", "line"))


def test_saving_a_rule_creates_its_gate_once() -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate finance")
    cap_rule_save(line="big: pay arg=amount max USD 600.00 -> gate finance")
    assert Gate.objects.filter(name="finance").count() == 1
    assert AuditEntry.objects.filter(action="gate created").count() == 1
    assert CapRule.objects.get().line == "big: pay arg=amount max USD 600.00 -> gate finance"


def test_saving_a_rule_or_budget_tells_which_gate_it_created() -> None:
    told: list[str] = []
    cap_rule_save(
        line="big: pay arg=amount max USD 500.00 -> gate finanse", on_gate_created=told.append
    )
    cap_rule_save(
        line="big: pay arg=amount max USD 600.00 -> gate finanse", on_gate_created=told.append
    )
    cap_rule_save(line="small: pay arg=amount max USD 5.00 -> gate", on_gate_created=told.append)
    budget_save(budget=Budget(max_calls=5, action="gate", gate="ops"), on_gate_created=told.append)
    assert told == ["finanse", "ops"]  # once each; the default gate always exists
    assert GATE_CREATED.format(name="finanse").startswith("Created gate finanse: ")


def test_editing_a_row_can_rename_it_but_not_onto_another_rule() -> None:
    row = cap_rule_save(line="big: pay arg=amount max USD 500.00 -> refuse")
    cap_rule_save(line="other: pay arg=amount max USD 1.00 -> refuse")
    renamed = cap_rule_save(line="bigger: pay arg=amount max USD 500.00 -> refuse", rule=row)
    assert renamed.pk == row.pk
    assert renamed.name_folded == "bigger"
    with pytest.raises(CapRuleNameTaken):
        cap_rule_save(line="OTHER: pay arg=amount max USD 2.00 -> refuse", rule=row)
    assert set(lines_by_name()) == {"bigger", "other"}


def test_import_creates_every_rule_and_its_gates() -> None:
    done = rules_import(text=EXAMPLES)
    assert done == RulesImported(
        created=("big-payment", "daily-spend", "wire-cap", "per-payee", "refunds", "metal"),
        updated=(),
        unchanged=(),
        disabled=(),
        gates_created=("finance", "treasury"),
    )
    assert set(Gate.objects.values_list("name", flat=True)) == {"", "finance", "treasury"}
    # Imported again: nothing is created, so nothing is reported.
    assert rules_import(text=EXAMPLES).gates_created == ()
    assert CapRule.objects.filter(enabled=True).count() == 6


def test_a_bad_line_changes_nothing() -> None:
    cap_rule_save(line="keep: pay arg=amount max USD 1.00 -> refuse", description="mine")
    text = (
        "keep: pay arg=amount max USD 9.00 -> refuse\n"
        "new: pay arg=amount max USD 1.00 -> gate newgate\n"
        "broken: pay arg=amount max usd 1.00 -> refuse\n"
    )
    with pytest.raises(RulesFileRefused) as caught:
        rules_import(text=text, replace=True)
    assert [(error.line, error.column) for error in caught.value.errors] == [(3, 28)]
    assert lines_by_name() == {"keep": "keep: pay arg=amount max USD 1.00 -> refuse"}
    assert not Gate.objects.filter(name="newgate").exists()


def test_names_match_under_casefold_and_the_file_spelling_wins() -> None:
    cap_rule_save(line="Big: pay arg=amount max USD 1.00 -> refuse", description="kept")
    rules_import(text="BIG: pay arg=amount max USD 2.00 -> refuse\n")
    row = CapRule.objects.get()
    assert row.name == "BIG"
    assert row.line == "BIG: pay arg=amount max USD 2.00 -> refuse"
    assert row.description == "kept"


def test_two_names_equal_under_casefold_in_one_file_are_refused() -> None:
    text = "a: pay arg=x max USD 1 -> refuse\nA: pay arg=x max USD 2 -> refuse\n"
    with pytest.raises(RulesFileRefused) as caught:
        rules_import(text=text)
    assert [error.line for error in caught.value.errors] == [2]
    assert not CapRule.objects.exists()


def test_replace_disables_the_rules_not_in_the_file() -> None:
    cap_rule_save(line="old: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="stays: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="kept: pay arg=amount max USD 1.00 -> refuse", enabled=False)
    rules_import(
        text="kept: pay arg=amount max USD 3.00 -> refuse\n"
        "stays: pay arg=amount max USD 1.00 -> refuse\n",
        replace=True,
    )
    assert dict(CapRule.objects.values_list("name", "enabled")) == {
        "old": False,
        "stays": True,
        "kept": True,
    }
    assert AuditEntry.objects.filter(action="cap rule disabled").count() == 1


def test_without_replace_other_rules_stay_enabled() -> None:
    cap_rule_save(line="old: pay arg=amount max USD 1.00 -> refuse")
    rules_import(text="new: pay arg=amount max USD 1.00 -> refuse\n")
    assert CapRule.objects.filter(enabled=True).count() == 2


def test_crlf_files_import() -> None:
    rules_import(
        text="a: pay arg=x max USD 1 -> refuse\r\n\r\n# c\r\nb: pay arg=x max USD 2 -> refuse\r\n"
    )
    assert lines_by_name() == {
        "a": "a: pay arg=x max USD 1 -> refuse",
        "b": "b: pay arg=x max USD 2 -> refuse",
    }


def test_a_stray_carriage_return_inside_a_line_is_refused() -> None:
    with pytest.raises(RulesFileRefused) as caught:
        rules_import(text="a: pay arg=x max USD 1\r -> refuse\n")
    [error] = caught.value.errors
    assert (error.line, error.column) == (1, 23)
    assert error.found == "U+000D CARRIAGE RETURN"


def test_every_bad_line_is_reported_and_nothing_changes() -> None:
    cap_rule_save(line="keep: pay arg=amount max USD 1.00 -> refuse")
    text = (
        "keep: pay arg=amount max USD 9.00 -> refuse\n"
        "a: pay arg=amount max usd 1 -> refuse\n"
        "b: pay arg=amount max XAU 1 -> refuse\n"
        "# fine\n"
        "c: pay arg=amount\u00a0max USD 1 -> refuse\n"
        "new: pay arg=amount max USD 1 -> gate newgate\n"
        "A: pay arg=amount max USD 1 -> refuse\n"
        "d: pay arg=amount max USD 1 -> refuse trailing\n"
    )
    with pytest.raises(RulesFileRefused) as caught:
        rules_import(text=text, replace=True)
    assert [(e.line, e.column) for e in caught.value.errors] == [
        (2, 23),
        (3, 23),
        (5, 18),
        (8, 39),
    ]
    assert [str(e) for e in caught.value.errors] == [
        "line 2, column 23: expected a currency code (3 upper-case letters)",
        "line 3, column 23: expected exponent=N after the amount: XAU has no minor unit in"
        " ISO 4217 (e.g. XAU 10 exponent=3)",
        "line 5, column 18: expected 'max' or 'sum', found U+00A0 NO-BREAK SPACE",
        "line 8, column 39: expected the end of the line",
    ]
    assert lines_by_name() == {"keep": "keep: pay arg=amount max USD 1.00 -> refuse"}
    assert not Gate.objects.filter(name="newgate").exists()
    assert not AuditEntry.objects.filter(action="cap rule disabled").exists()


def test_a_duplicate_name_is_reported_with_the_other_bad_lines() -> None:
    text = "a: pay arg=x max USD 1 -> refuse\nb: pay arg=x\nA: pay arg=x max USD 2 -> refuse\n"
    with pytest.raises(RulesFileRefused) as caught:
        rules_import(text=text)
    assert [(e.line, e.expected) for e in caught.value.errors] == [
        (2, "'max' or 'sum'"),
        (3, "a rule name not used before (already defined on line 1; names match ignoring case)"),
    ]
    assert not CapRule.objects.exists()


def test_the_summary_names_created_updated_unchanged_and_disabled_rules() -> None:
    cap_rule_save(line="same: pay arg=amount max USD 1.00 -> gate g1")
    cap_rule_save(line="Changed: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="off: pay arg=amount max USD 1.00 -> refuse", enabled=False)
    cap_rule_save(line="gone: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="also-gone: pay arg=amount max USD 1.00 -> refuse")
    saves = AuditEntry.objects.filter(action="cap rule saved").count()
    done = rules_import(
        text=(
            "  same: pay arg=amount max USD 1.00 -> gate g1\t\n"
            "changed: pay arg=amount max USD 2.00 -> refuse\n"
            "off: pay arg=amount max USD 1.00 -> refuse\n"
            "fresh: pay arg=amount max USD 1.00 -> refuse\n"
        ),
        replace=True,
    )
    assert done == RulesImported(
        created=("fresh",),
        updated=("changed", "off"),
        unchanged=("same",),
        disabled=("also-gone", "gone"),
    )
    # An unchanged rule is not saved again: three saves, not four.
    assert AuditEntry.objects.filter(action="cap rule saved").count() == saves + 3
    assert dict(CapRule.objects.values_list("name", "enabled")) == {
        "same": True,
        "changed": True,
        "off": True,
        "fresh": True,
        "gone": False,
        "also-gone": False,
    }


def test_an_unchanged_rule_still_gets_its_missing_gate() -> None:
    cap_rule_save(line="same: pay arg=amount max USD 1.00 -> gate g1")
    Gate.objects.filter(name="g1").delete()
    done = rules_import(text="same: pay arg=amount max USD 1.00 -> gate g1\n")
    assert done.unchanged == ("same",)
    assert Gate.objects.filter(name="g1").exists()


def test_importing_the_same_file_twice_changes_nothing_the_second_time() -> None:
    rules_import(text=EXAMPLES)
    entries = AuditEntry.objects.count()
    done = rules_import(text=EXAMPLES, replace=True)
    assert done.created == done.updated == done.disabled == ()
    assert len(done.unchanged) == 6
    assert AuditEntry.objects.count() == entries


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("# only comments\n\n", id="comments"),
        pytest.param("other: pay arg=amount max USD 1 -> refuse\n", id="only-new-rules"),
    ],
)
def test_replace_that_would_disable_every_enabled_rule_is_refused(text: str) -> None:
    cap_rule_save(line="a: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="b: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="c: pay arg=amount max USD 1.00 -> refuse", enabled=False)
    before = AuditEntry.objects.count()
    with pytest.raises(RulesReplaceRefused) as caught:
        rules_import(text=text, replace=True)
    assert caught.value.enabled == 2
    assert dict(CapRule.objects.values_list("name", "enabled")) == {
        "a": True,
        "b": True,
        "c": False,
    }
    assert AuditEntry.objects.count() == before


def test_replace_with_force_disables_every_enabled_rule() -> None:
    cap_rule_save(line="a: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="b: pay arg=amount max USD 1.00 -> refuse")
    done = rules_import(text="", replace=True, force=True)
    assert done.disabled == ("a", "b")
    assert not CapRule.objects.filter(enabled=True).exists()


def test_replace_that_keeps_one_enabled_rule_needs_no_force() -> None:
    cap_rule_save(line="a: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="b: pay arg=amount max USD 1.00 -> refuse")
    done = rules_import(text="a: pay arg=amount max USD 1.00 -> refuse\n", replace=True)
    assert (done.unchanged, done.disabled) == (("a",), ("b",))


def test_replace_with_no_enabled_rules_is_not_refused() -> None:
    cap_rule_save(line="a: pay arg=amount max USD 1.00 -> refuse", enabled=False)
    assert rules_import(text="", replace=True) == RulesImported((), (), (), ())


def test_an_empty_file_without_replace_changes_nothing() -> None:
    cap_rule_save(line="a: pay arg=amount max USD 1.00 -> refuse")
    assert rules_import(text="") == RulesImported((), (), (), ())
    assert CapRule.objects.get().enabled


def test_export_is_canonical_sorted_and_skips_disabled_rules() -> None:
    cap_rule_save(line="zeta: pay arg=amount max USD 5 -> gate")
    cap_rule_save(line="Alpha:  pay,  send arg=amount   max EUR 1.5 -> refuse")
    cap_rule_save(line="off: pay arg=amount max USD 5 -> refuse", enabled=False)
    cap_rule_save(line="metal: buy arg=g max XAU 10.000 exponent=3 -> refuse")
    assert rules_export() == (
        "Alpha: pay,send arg=amount max EUR 1.50 -> refuse\n"
        "metal: buy arg=g max XAU 10.000 exponent=3 -> refuse\n"
        "zeta: pay arg=amount max USD 5.00 -> gate\n"
    )


def test_export_marks_a_rule_that_no_longer_parses() -> None:
    cap_rule_save(line="b: pay arg=amount max USD 5 -> gate")
    cap_rule_save(line="a: pay arg=amount max USD 5 -> gate")
    CapRule.objects.filter(name="b").update(line="b: pay arg=amount max QQQ 5 -> gate")
    assert rules_export() == "a: pay arg=amount max USD 5.00 -> gate\n# b: no longer parses\n"


def test_export_of_nothing_is_empty() -> None:
    assert rules_export() == ""


def test_export_round_trips_through_import() -> None:
    rules_import(text=EXAMPLES)
    exported = rules_export()
    CapRule.objects.all().delete()
    rules_import(text=exported)
    assert rules_export() == exported
    assert CapRule.objects.count() == 6


def test_budget_naming_a_gate_creates_it() -> None:
    budget_save(budget=Budget(max_calls=10, action="gate", gate="ops"))
    assert Gate.objects.filter(name="ops").exists()
    assert Budget.objects.get().gate == "ops"


def test_the_examples_of_docs_rules_md_hold() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()
    examples = re.search(r"## Examples\n\n```\n(.*?)```", doc, re.DOTALL)
    assert examples is not None
    assert len(rules_import(text=examples.group(1)).created) == 6
    with pytest.raises(capcore.RuleError) as caught:
        capcore.parse_rule("big: pay arg=amount max usd 500 -> gate")
    assert f"column 25: {caught.value.message}" in doc
    with pytest.raises(capcore.RuleError) as caught:
        capcore.parse_rule("metal: buy_metal arg=grams max XAU 10 -> refuse")
    assert f"column 32: {caught.value.message}" in doc
    with pytest.raises(capcore.RuleError) as caught:
        capcore.parse_rule("big: pay arg=amount\u00a0max USD 500 -> gate")
    assert f"column 20: {caught.value.message}" in doc
    messy = "Alpha:  pay,  send arg=amount   max EUR 1.5 -> refuse"
    assert f"{messy}\n{capcore.parse_rule(messy).to_line()}\n" in doc
