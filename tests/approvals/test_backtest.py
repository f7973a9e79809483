"""``manage.py backtest RULES`` (docs/policy-lab.md, "Backtest a rule set"): histories made
through the API and the services, replayed with a draft rule file; every count below is
worked out by hand from the history, in the comments beside it."""

from __future__ import annotations

import io
import json
import random
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.models import Agent, Budget, Call, CapRule
from approvals.services.calls import Submission, call_submit
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import call_cancel, calls_expire_due
from approvals.services.rules import budget_save, cap_rule_save
from tests.factories import agent_make, agent_with_token, payment, user_make

pytestmark = pytest.mark.django_db

TOKEN = "cs_backtest-test-token"
MONDAY = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
SECRET = "ZQXJ"  # text only the rule file holds, never to come back in a message


def minutes(count: float) -> timedelta:
    return timedelta(minutes=count)


def run_backtest(rules: Path, *options: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    try:
        call_command("backtest", str(rules), *options, stdout=out, stderr=err)
    except SystemExit as exit_:
        code = exit_.code
    assert isinstance(code, int)
    return code, out.getvalue(), err.getvalue()


def report(tmp_path: Path, rules: str, *options: str) -> dict[str, Any]:
    path = tmp_path / "draft.txt"
    path.write_text(rules, encoding="utf-8")
    code, out, err = run_backtest(path, "--json", *options)
    assert (code, err) == (0, ""), err
    answer: dict[str, Any] = json.loads(out)
    return answer


def changes(
    answer: dict[str, Any], calls: dict[str, Call]
) -> list[tuple[str, str, str, list[str]]]:
    """The changed calls by their names in the test."""
    names = {str(call.pk): name for name, call in calls.items()}
    return [
        (names[change["call"]], change["actual"], change["replay"], change["rules"])
        for change in answer["changed"]
    ]


def decide(
    call: Call,
    user: User,
    *,
    approve: bool,
    at: datetime | None = None,
    arguments: str | None = None,
) -> Call:
    return call_decide(
        call_id=call.pk,
        user=user,
        approve=approve,
        comment="",
        arguments_sha256=Call.objects.get(pk=call.pk).arguments_sha256,
        now=at,
        arguments=arguments,
    )


def status(call: Call) -> str:
    return Call.objects.get(pk=call.pk).status


@pytest.fixture
def approver() -> User:
    return user_make(username="ana")


def test_a_history_made_through_the_api_replayed_with_a_draft(
    tmp_path: Path, approver: User
) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    cap_rule_save(line="huge: pay arg=amount max USD 10000.00 -> refuse")
    agent_with_token(token=TOKEN)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")

    def submit(amount: str) -> Call:
        body = {"tool": "pay", "arguments": payment(amount)}
        response = client.post("/api/v1/calls", json.dumps(body), content_type="application/json")
        assert response.status_code == 201, response.content
        return Call.objects.get(pk=response.json()["id"])

    calls = {"c1": submit("100"), "c2": submit("600"), "c3": submit("700")}
    decide(calls["c2"], approver, approve=True)
    decide(calls["c3"], approver, approve=False)
    calls["c4"] = submit("50")
    calls["c5"] = submit("800")
    decide(calls["c5"], approver, approve=True, arguments=payment("400"))
    calls["c6"] = submit("10")
    calls["c7"] = submit("20000")
    assert [status(call) for call in calls.values()] == [
        "allowed", "approved", "denied", "allowed", "approved", "allowed", "refused",
    ]  # fmt: skip
    assert json.loads(Call.objects.get(pk=calls["c5"].pk).arguments) == {"amount": "400"}

    answer = report(tmp_path, "total: pay arg=amount sum USD 1000.00 -> gate\n")
    # c1 100 allowed (100). c2 600 fits (700). c3 700: 1400, held; its denial released it
    # before c4. c4 50 (750). c5 as submitted, 800: 1550, held, recorded at its approval
    # (1550 recorded). c6 10: held. c7 20000: held (nothing refuses it now).
    assert answer["calls"] == 7
    assert (answer["since"], answer["until"]) == (None, None)
    assert answer["actual"] == {"allowed": 3, "held": 3, "refused": 1}
    assert answer["replay"] == {"allowed": 3, "held": 4, "refused": 0}
    assert answer["rules"] == {"total": {"held": 4, "refused": 0}}
    assert changes(answer, calls) == [
        ("c2", "held", "allowed", []),
        ("c6", "allowed", "held", ["total"]),
        ("c7", "refused", "held", ["total"]),
    ]
    assert answer["holds_per_day"] == {"mean": 4.0, "max": 4}
    assert list(answer) == [
        "calls", "since", "until", "actual", "replay", "rules", "changed", "holds_per_day",
    ]  # fmt: skip


def _keyed_history(approver: User) -> dict[str, Call]:
    """Two days of calls for carol and dave under ``big`` (over USD 500 held) and a budget of
    3 calls a run (past it, held), decided as their comments say."""
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    budget_save(budget=Budget(max_calls=3, action=Budget.Action.GATE))
    agent = agent_make(allowed_principals="*")
    tuesday = MONDAY + timedelta(days=1)

    def submit(at: datetime, principal: str, amount: str, run_id: str) -> Call:
        submission = Submission(
            tool="pay", arguments=payment(amount), principal=principal, run_id=run_id
        )
        return call_submit(agent=agent, submission=submission, now=at)[0]

    calls = {
        "a": submit(MONDAY, "carol", "400", "r1"),
        "b": submit(MONDAY + minutes(1), "carol", "700", "r1"),  # denied at 3
        "c": submit(MONDAY + minutes(2), "carol", "100", "r1"),
    }
    decide(calls["b"], approver, approve=False, at=MONDAY + minutes(3))
    calls["d"] = submit(MONDAY + minutes(4), "carol", "450", "r2")
    calls["e"] = submit(MONDAY + minutes(5), "dave", "600", "r2")  # approved at 7
    calls["f"] = submit(MONDAY + minutes(6), "carol", "60", "r1")  # 4th of r1: cancelled at 8
    decide(calls["e"], approver, approve=True, at=MONDAY + minutes(7))
    call_cancel(agent=agent, call_id=calls["f"].pk, now=MONDAY + minutes(8))
    calls["g"] = submit(tuesday, "carol", "900", "r3")  # expires
    calls["h"] = submit(tuesday + minutes(1), "carol", "200", "r3")
    calls["i"] = submit(tuesday + minutes(2), "dave", "450", "r4")
    calls["j"] = submit(tuesday + minutes(3), "dave", "600", "r4")  # still pending
    calls["k"] = submit(tuesday + minutes(4), "dave", "1", "r5")
    calls_expire_due(now=tuesday + minutes(62))
    assert {name: status(call) for name, call in calls.items()} == {
        "a": "allowed", "b": "denied", "c": "allowed", "d": "allowed", "e": "approved",
        "f": "cancelled", "g": "expired", "h": "allowed", "i": "allowed", "j": "pending",
        "k": "allowed",
    }  # fmt: skip
    assert [r["rule"] for r in Call.objects.get(pk=calls["f"].pk).reasons] == ["budget:calls"]
    return calls


DAILY = "daily: pay arg=amount sum USD 1000.00 per day by principal -> gate\n"


def test_keyed_daily_sums_budgets_and_held_calls_replayed(tmp_path: Path, approver: User) -> None:
    calls = _keyed_history(approver)
    answer = report(tmp_path, DAILY)
    # Monday, carol: a 400 (400). b 700: 1100, held, reserved until its denial. c 100: 400 +
    # 700 reserved + 100, held; actually allowed, so recorded at once (500). d 450 (950).
    # dave: e 600 fits. f: the budget holds it (4th call of r1), and carol's 1010 is over.
    # Tuesday starts again. carol: g 900 fits (900); h 200: 1100, held. dave: i 450 (450);
    # j 600: 1050, held and still pending, so reserved to the end; k 1: 450 + 600 + 1, held.
    assert answer["calls"] == 11
    assert answer["actual"] == {"allowed": 6, "held": 5, "refused": 0}
    assert answer["replay"] == {"allowed": 5, "held": 6, "refused": 0}
    assert answer["rules"] == {"daily": {"held": 6, "refused": 0}}
    assert changes(answer, calls) == [
        ("c", "allowed", "held", ["daily"]),
        ("e", "held", "allowed", []),
        ("g", "held", "allowed", []),
        ("h", "allowed", "held", ["daily"]),
        ("k", "allowed", "held", ["daily"]),
    ]
    assert answer["holds_per_day"] == {"mean": 3.0, "max": 3}


def test_since_and_until_replay_a_period_from_empty(tmp_path: Path, approver: User) -> None:
    calls = _keyed_history(approver)
    tuesday = report(tmp_path, DAILY, "--since", "2026-12-01")
    assert tuesday["calls"] == 5
    assert tuesday["since"] == "2026-12-01T00:00:00Z"
    assert [c[0] for c in changes(tuesday, calls)] == ["g", "h", "k"]
    assert tuesday["holds_per_day"] == {"mean": 3.0, "max": 3}
    monday = report(tmp_path, DAILY, "--until", "2026-12-01T00:00:00+00:00")
    assert monday["calls"] == 6
    assert monday["until"] == "2026-12-01T00:00:00Z"
    assert [c[0] for c in changes(monday, calls)] == ["c", "e"]
    # From 10:03, after b's denial: d 450 and f 60 fit carol's day, and f is the first call
    # of r1 the replay counts, so the budget lets it through too.
    later = report(
        tmp_path, DAILY, "--since", "2026-11-30T10:03:00Z", "--until", "2026-11-30T11:00"
    )
    assert later["calls"] == 3
    assert later["replay"] == {"allowed": 3, "held": 0, "refused": 0}
    assert later["rules"] == {"daily": {"held": 0, "refused": 0}}
    assert [c[0] for c in changes(later, calls)] == ["e", "f"]


def test_the_report_for_people(tmp_path: Path, approver: User) -> None:
    _keyed_history(approver)
    path = tmp_path / "draft.txt"
    path.write_text(DAILY, encoding="utf-8")
    code, out, err = run_backtest(path)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"Backtest of {path}: 11 calls created from the first call to now"
    assert lines[3].split() == ["actual", "6", "5", "0"]
    assert lines[4].split() == ["replay", "5", "6", "0"]
    assert "  daily  held       6  refused       0" in lines
    assert "Holds per day over 2 days: mean 3.0, max 3" in lines
    assert "Changed: 5 calls" in lines


def test_a_grant_helps_only_the_calls_after_it(tmp_path: Path, approver: User) -> None:
    agent = agent_make(mode="prompt")
    first = call_submit(agent=agent, submission=Submission("pay", payment("1"), "carol", "r1"))[0]
    call_decide(
        call_id=first.pk,
        user=approver,
        approve=True,
        comment="",
        arguments_sha256=first.arguments_sha256,
        scope="run",
    )
    second = call_submit(agent=agent, submission=Submission("pay", payment("1"), "carol", "r1"))[0]
    assert (status(first), status(second)) == ("approved", "allowed")
    answer = report(tmp_path, "")
    assert answer["changed"] == []
    assert answer["replay"] == {"allowed": 1, "held": 1, "refused": 0}


def _row_counts() -> dict[str, int]:
    """The rows of every table in the database, whichever app made it."""
    with connection.cursor() as cursor:
        counts = {}
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT COUNT(*) FROM {connection.ops.quote_name(table)}")
            counts[table] = cursor.fetchone()[0]
    return counts


@pytest.mark.django_db(transaction=True)
def test_a_backtest_changes_no_table(tmp_path: Path, approver: User) -> None:
    _keyed_history(approver)
    before = _row_counts()
    report(tmp_path, DAILY + "big: pay arg=amount max USD 100.00 -> refuse\n")
    assert _row_counts() == before


def test_a_malformed_rule_file_or_date_exits_2_quoting_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text(f"ok: pay arg=amount max USD 1 -> gate\n{SECRET}: pay arg=amount\n")
    code, out, err = run_backtest(bad)
    assert (code, out) == (2, "")
    assert err.startswith(f"{bad}:2:")
    assert SECRET not in err
    good = tmp_path / "good.txt"
    good.write_text("ok: pay arg=amount max USD 1 -> gate\n")
    for options in (["--since", SECRET], ["--until", f"2026-13-01{SECRET}"]):
        code, out, err = run_backtest(good, *options)
        assert (code, out) == (2, "")
        assert "expected an ISO-8601 date" in err
        assert SECRET not in err
    code, _, err = run_backtest(good, "--since", "2026-12-02", "--until", "2026-12-01")
    assert (code, err.strip()) == (2, "--since must be before --until")
    code, _, err = run_backtest(tmp_path / "missing.txt")
    assert (code, err.strip()) == (2, f"{tmp_path / 'missing.txt'}: no such file")


# The property: a backtest of the rules in force over a history made under them (nothing
# changed meanwhile) gives every call the verdict it actually got.

PROPERTY_RULES = (
    "big: pay arg=amount max USD 500.00 -> gate",
    "daily: pay arg=amount sum USD 1000.00 per day by principal -> gate",
    "rolling: pay arg=amount sum USD 1500.00 per 24h -> gate",
    "ceiling: pay arg=amount sum USD 4000.00 -> refuse",
)

Step = tuple[Any, ...]  # ("submit", principal, amount, run), (decision, which), ("expire",)
PRINCIPALS = ["carol", "dave"]
AMOUNTS = ["50", "200", "450", "600", "900"]
RUNS = ["r1", "r2", "r3"]
DECISIONS = ["approve", "deny", "cancel"]
# Minutes between steps: mostly within a day, where the sums meet.
GAPS = [1, 1, 3, 7, 50, 61, 300, 1439]

submit_step = st.tuples(
    st.just("submit"),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(AMOUNTS),
    st.sampled_from(RUNS),
)
decide_step = st.tuples(st.sampled_from(DECISIONS), st.integers(0, 30))
steps = st.lists(
    st.tuples(
        # Submissions weigh twice: a history is mostly calls.
        st.one_of(submit_step, submit_step, decide_step, st.just(("expire",))),
        st.sampled_from(GAPS),
    ),
    min_size=10,
    max_size=40,
)


@pytest.fixture
def property_world(approver: User) -> tuple[Agent, User]:
    for line in PROPERTY_RULES:
        cap_rule_save(line=line)
    budget_save(budget=Budget(max_calls=4, action=Budget.Action.GATE))
    return agent_make(allowed_principals="*"), approver


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=steps)
def test_the_rules_in_force_reproduce_every_actual_verdict(
    property_world: tuple[Agent, User], history: list[tuple[Step, int]]
) -> None:
    replay_matches(*property_world, history)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_long_seeded_history_is_reproduced_too(
    property_world: tuple[Agent, User], seed: int
) -> None:
    chance = random.Random(seed)
    history: list[tuple[Step, int]] = []
    for _ in range(200):
        if chance.random() < 0.65:
            step: Step = (
                "submit",
                chance.choice(PRINCIPALS),
                chance.choice(AMOUNTS),
                chance.choice(RUNS),
            )
        elif chance.random() < 0.85:
            step = (chance.choice(DECISIONS), chance.randrange(30))
        else:
            step = ("expire",)
        history.append((step, chance.choice(GAPS)))
    replay_matches(*property_world, history)


def replay_matches(agent: Agent, approver: User, history: list[tuple[Step, int]]) -> None:
    """Make ``history`` through the services, backtest the rules in force over it, and check
    that every verdict is the actual one; every change is rolled back after."""
    rules = "\n".join(CapRule.objects.order_by("pk").values_list("line", flat=True)) + "\n"
    with transaction.atomic():
        now = MONDAY
        made: list[Call] = []
        for step, gap in history:
            now += minutes(gap)
            kind = step[0]
            if kind == "submit":
                _, principal, amount, run_id = step
                submission = Submission("pay", payment(amount), principal, run_id)
                made.append(call_submit(agent=agent, submission=submission, now=now)[0])
            elif kind == "expire":
                calls_expire_due(now=now)
            else:
                # Only a call still open can be decided or cancelled: past its deadline it
                # is final, swept or not.
                still_open = Call.objects.filter(status=Call.Status.PENDING, expires_at__gt=now)
                pending = list(still_open.order_by("created_at", "pk"))
                if not pending:
                    continue
                call = pending[step[1] % len(pending)]
                if kind == "cancel":
                    call_cancel(agent=agent, call_id=call.pk, now=now)
                else:
                    decide(call, approver, approve=kind == "approve", at=now)
        with tempfile.TemporaryDirectory() as folder:
            answer = report(Path(folder), rules)
        actual = answer["actual"]
        assert answer["changed"] == []
        assert answer["replay"] == actual
        assert sum(actual.values()) == len(made)
        transaction.set_rollback(True)
