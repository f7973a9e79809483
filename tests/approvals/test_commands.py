"""The management commands: create_agent, import_rules, export_rules, expire_calls,
rebuild_insights."""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from approvals.management.commands.import_rules import NOTHING_CHANGED, REPLACE_REFUSED
from approvals.models import Agent, AgentToken, AuditEntry, Call, CapRule, InsightsDay
from approvals.selectors.insights import PERIODS, insights_days_counted, insights_days_kept
from approvals.services.agents import agent_authenticate, agent_token_revoke
from approvals.services.insights import insights_days_keep
from approvals.services.rules import GATE_CREATED, cap_rule_save
from tests.factories import agent_make, call_make, gate_make, payment, rule_make

pytestmark = pytest.mark.django_db

GOOD = "big: pay arg=amount max USD 500.00 -> gate finance\n"


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def last_line(text: str) -> str:
    return text.rstrip("\n").split("\n")[-1]


# --- create_agent ---------------------------------------------------------------------------


def test_create_agent_prints_a_working_token_on_its_last_line() -> None:
    out, _ = run("create_agent", "billing-bot")
    token = last_line(out)
    assert token.startswith("cs_")
    assert " " not in token
    agent = Agent.objects.get(name="billing-bot")
    assert agent.principal == "billing-bot"
    assert agent_authenticate(token=token) == agent


def test_create_agent_twice_reuses_the_agent_with_a_new_token_each_time() -> None:
    first = last_line(run("create_agent", "bot", "--mode", "prompt")[0])
    second = last_line(
        run("create_agent", "bot", "--principal", "alice", "--allow-principals", "team-*")[0]
    )
    assert first != second
    agent = Agent.objects.get()
    assert (agent.principal, agent.allowed_principals, agent.mode) == ("alice", "team-*", "prompt")
    assert AgentToken.objects.filter(agent=agent).count() == 2
    assert agent_authenticate(token=first) == agent
    assert agent_authenticate(token=second) == agent
    agent_token_revoke(token_row=AgentToken.objects.get(prefix=first[:8]))
    assert agent_authenticate(token=first) is None
    assert agent_authenticate(token=second) == agent


def test_create_agent_refuses_an_unknown_mode() -> None:
    with pytest.raises(CommandError):
        run("create_agent", "bot", "--mode", "yolo")
    assert not Agent.objects.exists()


# --- import_rules / export_rules ------------------------------------------------------------


def test_import_rules_loads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.txt"
    path.write_text("# finance\n\n" + GOOD)
    out, err = run("import_rules", str(path))
    assert out.split("\n") == [
        "created 1 rule: big",
        "updated 0 rules",
        "unchanged 0 rules",
        "disabled 0 rules",
        # The gate the rule names did not exist: said, with what it means until it is set up.
        GATE_CREATED.format(name="finance"),
        "",
    ]
    assert err == ""
    assert CapRule.objects.get().line == GOOD.strip()
    # Imported again, the gate exists: nothing more is said.
    assert "gate" not in run("import_rules", str(path))[0]


def test_import_rules_names_a_misspelt_gate_it_created(tmp_path: Path) -> None:
    gate_make(name="finance")
    path = tmp_path / "rules.txt"
    path.write_text(GOOD + "small: pay arg=amount max USD 50.00 -> gate finanse\n")
    out, _ = run("import_rules", str(path))
    assert out.split("\n")[4:] == [
        "Created gate finanse: no gate had that name. It has no group yet, so anyone who may "
        "decide calls can approve the calls held there, one approval enough, until an admin "
        "sets its group and required approvals under Approvals › Gates. If you meant an "
        "existing gate, correct the name.",
        "",
    ]


def test_import_rules_is_all_or_nothing(tmp_path: Path) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 1.00 -> refuse")
    path = tmp_path / "rules.txt"
    path.write_text(
        GOOD
        + "other: pay arg=amount max USD 1.00 -> gate newgate\n"
        + "bad: pay arg=amount max ZQXJ77 1.00 -> refuse\n"
    )
    err = io.StringIO()
    with pytest.raises(SystemExit) as caught:
        call_command("import_rules", str(path), "--replace", stdout=io.StringIO(), stderr=err)
    assert caught.value.code == 1
    assert err.getvalue() == (
        f"{path}:3:25: expected a currency code (3 upper-case letters)\n"
        + NOTHING_CHANGED.format(path=path, count=1, s="")
        + "\n"
    )
    assert "ZQXJ77" not in err.getvalue()
    assert list(CapRule.objects.values_list("line", flat=True)) == [
        "big: pay arg=amount max USD 1.00 -> refuse"
    ]


def test_import_rules_exits_with_status_1_from_manage_py(tmp_path: Path) -> None:
    # A bad file is refused before the database is touched, so the real process is safe.
    path = tmp_path / "rules.txt"
    path.write_text(GOOD + "\n# c\nbad: pay arg=amount max USD 1.00 -> ZQXJ77\n")
    done = subprocess.run(
        [sys.executable, "manage.py", "import_rules", str(path)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"{path}:4:37: expected 'gate' or 'refuse'\n{path}: 1 bad line; nothing changed\n"
    )
    assert done.stdout == ""


def fail(*args: str) -> str:
    """Run a command that must exit with status 1; its stderr."""
    err = io.StringIO()
    with pytest.raises(SystemExit) as caught:
        call_command(*args, stdout=io.StringIO(), stderr=err)
    assert caught.value.code == 1
    return err.getvalue()


def test_import_rules_reports_every_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.txt"
    path.write_text(
        GOOD
        + "a: pay arg=amount max ZQXJ77 1 -> refuse\n"
        + "b: pay arg=amount max XAU 1 -> refuse\n"
        + "# c\n"
        + "c: pay arg=amount\u00a0max USD 1 -> refuse\n"
        + "d: pay arg=amount max USD 1 -> gate ZQXJ77 more\n"
        + "BIG: pay arg=amount max USD 1 -> refuse\n"
        + "e: pay arg=amount sum USD 1 per year -> refuse\n"
        + "f: pay\n"
        + "g: pay arg=amount max USD 12.5O -> refuse\n"
    )
    err = fail("import_rules", str(path), "--replace")
    assert err.split("\n") == [
        f"{path}:2:23: expected a currency code (3 upper-case letters)",
        f"{path}:3:23: expected exponent=N after the amount: XAU has no minor unit in ISO 4217"
        " (e.g. XAU 10 exponent=3)",
        f"{path}:5:18: expected 'max' or 'sum', found U+00A0 NO-BREAK SPACE",
        f"{path}:6:44: expected the end of the line",
        f"{path}:7:1: expected a rule name not used before (already defined on line 1; names"
        " match ignoring case)",
        f"{path}:8:33: expected a window: 'day', 'week', 'month' or a count with m, h or d",
        f"{path}:9:7: expected 'arg='",
        # At the letter O typed for a zero, not at the start of the amount.
        f"{path}:10:31: expected a digit or the end of the amount",
        NOTHING_CHANGED.format(path=path, count=8, s="s"),
        "",
    ]
    assert "ZQXJ77" not in err
    assert not CapRule.objects.exists()


def test_import_rules_prints_created_updated_unchanged_and_disabled(tmp_path: Path) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="same: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="old: pay arg=amount max USD 1.00 -> refuse")
    path = tmp_path / "rules.txt"
    path.write_text(
        GOOD
        + "same: pay arg=amount max USD 1.00 -> refuse\n"
        + "new-one: pay arg=amount max USD 1.00 -> refuse\n"
        + "new-two: pay arg=amount max USD 1.00 -> refuse\n"
    )
    out, err = run("import_rules", str(path), "--replace")
    assert out.split("\n") == [
        "created 2 rules: new-one, new-two",
        "updated 1 rule: big",
        "unchanged 1 rule: same",
        "disabled 1 rule: old",
        GATE_CREATED.format(name="finance"),
        "",
    ]
    assert err == ""


@pytest.mark.parametrize(
    "content", ["", "# nothing here\n", "other: pay arg=x max USD 1 -> gate\n"]
)
def test_import_rules_replace_that_would_disable_every_rule_is_refused(
    tmp_path: Path, content: str
) -> None:
    cap_rule_save(line="a: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="b: pay arg=amount max USD 1.00 -> refuse")
    path = tmp_path / "empty.txt"
    path.write_text(content)
    entries = AuditEntry.objects.count()
    err = fail("import_rules", str(path), "--replace")
    assert err == REPLACE_REFUSED.format(path=path, count=2) + "\n"
    assert "--force" in err
    assert CapRule.objects.filter(enabled=True).count() == 2
    assert not CapRule.objects.filter(name="other").exists()
    assert AuditEntry.objects.count() == entries


def test_import_rules_replace_with_force_disables_every_rule(tmp_path: Path) -> None:
    cap_rule_save(line="a: pay arg=amount max USD 1.00 -> refuse")
    path = tmp_path / "empty.txt"
    path.write_text("")
    out, _ = run("import_rules", str(path), "--replace", "--force")
    assert out.split("\n")[-2] == "disabled 1 rule: a"
    assert not CapRule.objects.filter(enabled=True).exists()


def test_import_rules_of_an_empty_file_without_replace_changes_nothing(tmp_path: Path) -> None:
    cap_rule_save(line="a: pay arg=amount max USD 1.00 -> refuse")
    path = tmp_path / "empty.txt"
    path.write_text("")
    out, _ = run("import_rules", str(path))
    assert out == "created 0 rules\nupdated 0 rules\nunchanged 0 rules\ndisabled 0 rules\n"
    assert CapRule.objects.get().enabled


def test_import_rules_of_a_missing_file_fails_cleanly(tmp_path: Path) -> None:
    err = io.StringIO()
    with pytest.raises(SystemExit) as caught:
        call_command("import_rules", str(tmp_path / "nope.txt"), stderr=err)
    assert caught.value.code == 1
    assert err.getvalue() == f"{tmp_path / 'nope.txt'}: no such file\n"


def test_import_rules_of_a_non_utf8_file_fails_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "rules.txt"
    path.write_bytes(b"big: pay arg=amount max USD 1 -> gate \xff\n")
    err = io.StringIO()
    with pytest.raises(SystemExit) as caught:
        call_command("import_rules", str(path), stderr=err)
    assert caught.value.code == 1
    assert err.getvalue() == f"{path}: not UTF-8 text\n"
    assert not CapRule.objects.exists()


def test_import_rules_replace_disables_missing_rules(tmp_path: Path) -> None:
    cap_rule_save(line="old: pay arg=amount max USD 1.00 -> refuse")
    cap_rule_save(line="big: pay arg=amount max USD 1.00 -> refuse")
    path = tmp_path / "rules.txt"
    path.write_text(GOOD)
    run("import_rules", str(path), "--replace")
    assert dict(CapRule.objects.values_list("name", "enabled")) == {"old": False, "big": True}


def test_import_rules_matches_names_under_casefold(tmp_path: Path) -> None:
    cap_rule_save(line="BIG: pay arg=amount max USD 1.00 -> refuse")
    path = tmp_path / "rules.txt"
    path.write_text(GOOD)
    run("import_rules", str(path))
    row = CapRule.objects.get()
    assert (row.name, row.line) == ("big", GOOD.strip())


def test_export_rules_round_trips_through_import_rules(tmp_path: Path) -> None:
    path = tmp_path / "rules.txt"
    path.write_text(
        GOOD
        + "daily-spend: pay arg=amount currency=currency sum USD 1000, EUR 900 per day"
        + " by principal -> gate\n"
        + "metal: buy_metal arg=grams max XAU 10.000 exponent=3 -> refuse\n"
    )
    run("import_rules", str(path))
    exported, _ = run("export_rules")
    assert exported == (
        "big: pay arg=amount max USD 500.00 -> gate finance\n"
        "daily-spend: pay arg=amount currency=currency sum USD 1000.00, EUR 900.00 per day"
        " by principal -> gate\n"
        "metal: buy_metal arg=grams max XAU 10.000 exponent=3 -> refuse\n"
    )
    CapRule.objects.all().delete()
    again = tmp_path / "exported.txt"
    again.write_text(exported)
    run("import_rules", str(again))
    assert run("export_rules")[0] == exported


# --- expire_calls ---------------------------------------------------------------------------


def held_call(agent: Agent) -> Call:
    call = call_make(agent=agent, arguments=payment("600.00"))
    assert call.status == "pending"
    return call


def test_expire_calls_expires_only_calls_past_their_deadline() -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_make()
    due, waiting = held_call(agent), held_call(agent)
    Call.objects.filter(pk=due.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    out, _ = run("expire_calls")
    assert out == "expired 1 call\n"
    due.refresh_from_db()
    waiting.refresh_from_db()
    assert due.status == "expired"
    assert waiting.status == "pending"
    assert run("expire_calls")[0] == "expired 0 calls\n"


# --- rebuild_insights -------------------------------------------------------------------------


def test_rebuild_insights_counts_the_kept_days_again_from_the_calls() -> None:
    """A history written with past times after its days were kept (as a test or an import
    does) shows once the kept days are counted again; rows older than the longest period go."""
    today = timezone.now().date()
    day = today - timedelta(days=5)
    agent = agent_make()
    call_make(agent=agent, now=timezone.now() - timedelta(days=5))
    insights_days_keep(first_day=today - timedelta(days=max(PERIODS) - 1))
    call_make(agent=agent, now=timezone.now() - timedelta(days=5))
    InsightsDay.objects.create(day=today - timedelta(days=200), figures={})
    assert insights_days_kept(first_day=day, last_day=day)[day].calls.total() == 1

    out, _ = run("rebuild_insights")

    assert insights_days_kept(first_day=day, last_day=day)[day].calls.total() == 2
    counted = insights_days_counted(days=[day])
    assert insights_days_kept(first_day=day, last_day=day) == counted
    assert not InsightsDay.objects.filter(day__lt=today - timedelta(days=max(PERIODS))).exists()
    assert last_line(out) == f"kept {InsightsDay.objects.count()} days"
