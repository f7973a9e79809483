"""The per-process policy cache: every change to a policy table, by any path, is seen by the
next submission; when the stamp cannot vouch for the cache, the policy is read afresh.

Transactional, against the file-backed test database (and PostgreSQL when DATABASE_URL says
so), so that a change can come from a connection that is not Django's.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager

import psycopg
import pytest
from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from approvals.models import Agent, Budget, CapRule, PermissionRule, PolicyStamp, ToolClass
from approvals.selectors.policies import policy_for_agent
from approvals.services.rules import budget_save, cap_rule_save
from approvals.services.statements import policy_stamp_read
from tests.factories import agent_make, call_make, payment, rule_make

pytestmark = pytest.mark.django_db(transaction=True)

CAP = "per-payment: pay arg=amount max USD 100.00 -> gate"
LOWER_CAP = "per-payment: pay arg=amount max USD 10.00 -> gate"
POLICY_TABLES = (
    "approvals_caprule",
    "approvals_permissionrule",
    "approvals_toolclass",
    "approvals_budget",
)


@pytest.fixture
def agent(transactional_db: None) -> Agent:
    rule_make(line=CAP)
    return agent_make()


def submit(agent: Agent, amount: str = "50.00", tool: str = "pay") -> str:
    return call_make(agent=agent, tool=tool, arguments=payment(amount)).status


def outside_django(sql: str, *params: object) -> None:
    """As another program would change the table: its own connection, committed, no ORM."""
    database = connection.settings_dict
    if connection.vendor == "sqlite":
        with closing(sqlite3.connect(database["NAME"])) as other:
            other.execute(sql, params)
            other.commit()
        return
    with psycopg.connect(
        host=database["HOST"],
        port=database["PORT"] or 5432,
        user=database["USER"],
        dbname=database["NAME"],
        autocommit=True,
    ) as other:
        other.execute(sql.replace("?", "%s").encode(), params)


def policy_reads(run: Callable[[], object]) -> list[str]:
    """The statements ``run`` sent that read or wrote a policy table."""
    with CaptureQueriesContext(connection) as queries:
        run()
    return [q["sql"] for q in queries.captured_queries if any(t in q["sql"] for t in POLICY_TABLES)]


# --- the cache is used ---------------------------------------------------------------------------


def test_after_the_first_call_the_policy_tables_are_not_read_again(agent: Agent) -> None:
    assert policy_reads(lambda: submit(agent)) != []
    assert policy_reads(lambda: submit(agent)) == []
    assert policy_reads(lambda: submit(agent)) == []


def test_each_agent_has_its_own_policy(agent: Agent) -> None:
    other = agent_make(name="other")
    assert (submit(agent), submit(other)) == ("allowed", "allowed")
    PermissionRule.objects.create(agent=agent, pattern="pay", decision="deny")
    assert (submit(agent), submit(other)) == ("refused", "allowed")
    assert (submit(agent), submit(other)) == ("refused", "allowed")


# --- every change is seen by the next call -------------------------------------------------------


def _lower_through_the_service() -> None:
    cap_rule_save(line=LOWER_CAP)


def _lower_by_queryset_update() -> None:
    CapRule.objects.filter(name_folded="per-payment").update(line=LOWER_CAP)


def _lower_by_instance_save() -> None:
    rule = CapRule.objects.get(name_folded="per-payment")
    rule.line = LOWER_CAP
    rule.save()


def _lower_outside_django() -> None:
    outside_django(
        "UPDATE approvals_caprule SET line = ? WHERE name_folded = ?", LOWER_CAP, "per-payment"
    )


def _deny_by_bulk_create() -> None:
    PermissionRule.objects.bulk_create([PermissionRule(pattern="pay", decision="deny")])


def _deny_outside_django() -> None:
    outside_django(
        "INSERT INTO approvals_permissionrule (pattern, decision, created_at) VALUES (?, ?, ?)",
        "pay",
        "deny",
        "2026-01-01 00:00:00",
    )


def _pin_pay_dangerous() -> None:
    ToolClass.objects.filter(pattern="pay").update(tool_class="dangerous")


def _one_call_a_run_budget() -> None:
    budget_save(budget=Budget(max_calls=1))


def _ask_rule_made_to_match() -> None:
    rule = PermissionRule.objects.create(pattern="nothing-matches", decision="ask")
    PermissionRule.objects.filter(pk=rule.pk).update(pattern="pay")


CHANGES = {
    "cap lowered through the service": (_lower_through_the_service, "held"),
    "cap lowered by QuerySet.update": (_lower_by_queryset_update, "held"),
    "cap lowered by Model.save": (_lower_by_instance_save, "held"),
    "cap lowered by another connection's SQL": (_lower_outside_django, "held"),
    "deny rule by bulk_create": (_deny_by_bulk_create, "refused"),
    "deny rule by another connection's SQL": (_deny_outside_django, "refused"),
    "tool pinned dangerous by QuerySet.update": (_pin_pay_dangerous, "refused"),
    "budget of one call": (_one_call_a_run_budget, "refused"),
    "ask rule made to match by QuerySet.update": (_ask_rule_made_to_match, "held"),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_a_change_to_a_policy_table_is_seen_by_the_next_call(agent: Agent, change: str) -> None:
    # A mode that refuses dangerous tools, and "pay" pinned as a write tool.
    Agent.objects.filter(pk=agent.pk).update(mode="workspace_write")
    agent.refresh_from_db()
    ToolClass.objects.create(pattern="pay", tool_class="write")
    make_change, expected = CHANGES[change]
    assert submit(agent, "50.00") == "allowed"  # the policy is now cached
    make_change()
    assert {"pending": "held"}.get(status := submit(agent, "50.00"), status) == expected


def test_a_deleted_rule_no_longer_holds(agent: Agent) -> None:
    assert submit(agent, "150.00") == "pending"
    CapRule.objects.all().delete()
    assert submit(agent, "150.00") == "allowed"


def test_a_disabled_rule_no_longer_holds(agent: Agent) -> None:
    assert submit(agent, "150.00") == "pending"
    CapRule.objects.update(enabled=False)
    assert submit(agent, "150.00") == "allowed"


# A new row of each policy table, and a field to change twice.
NEW_ROWS: dict[str, tuple[Callable[[], Model], str, object, object]] = {
    "cap rule": (
        lambda: CapRule(name="r", name_folded="r", line="r: pay arg=amount max USD 1.00 -> gate"),
        "description",
        "a",
        "b",
    ),
    "permission rule": (lambda: PermissionRule(pattern="p", decision="ask"), "pattern", "a", "b"),
    "tool class": (lambda: ToolClass(pattern="p", tool_class="read"), "pattern", "a", "b"),
    "budget": (lambda: Budget(max_calls=5), "max_calls", 6, 7),
}


@pytest.mark.parametrize("table", NEW_ROWS)
def test_every_kind_of_write_to_a_policy_table_renews_the_stamp(agent: Agent, table: str) -> None:
    new_row, field, first, second = NEW_ROWS[table]
    row = new_row()
    model = type(row)
    stamps = [policy_stamp_read()]
    row.save()
    stamps.append(policy_stamp_read())
    setattr(row, field, first)
    row.save()
    stamps.append(policy_stamp_read())
    model._default_manager.filter(pk=row.pk).update(**{field: second})
    stamps.append(policy_stamp_read())
    model._default_manager.filter(pk=row.pk).delete()
    stamps.append(policy_stamp_read())
    assert None not in stamps
    assert len(set(stamps)) == len(stamps)


# --- when the stamp cannot vouch, nothing is cached ----------------------------------------------


@contextmanager
def one_trigger_gone(table: str = "approvals_caprule") -> Iterator[None]:
    """As a later migration that rebuilds ``table`` would leave it (SQLite drops a table's
    triggers with it), or as an admin who disables one would."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s"
                " AND name LIKE '%%update'",
                [table],
            )
            (name, sql) = cursor.fetchone()
            cursor.execute(f"DROP TRIGGER {name}")
            try:
                yield
            finally:
                cursor.execute(sql)
        else:
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                [table],
            )
            (name,) = cursor.fetchone()
            toggle = f"ALTER TABLE {table} {{}} TRIGGER {name}"
            cursor.execute(toggle.format("DISABLE"))
            try:
                yield
            finally:
                cursor.execute(toggle.format("ENABLE"))


def test_with_a_trigger_missing_every_call_reads_the_policy(agent: Agent) -> None:
    submit(agent)
    with one_trigger_gone():
        assert policy_stamp_read() is None
        assert policy_reads(lambda: submit(agent)) != []
        CapRule.objects.filter(name_folded="per-payment").update(line=LOWER_CAP)
        assert submit(agent, "50.00") == "pending"
    assert policy_stamp_read() is not None


def test_with_a_notification_channels_trigger_missing_the_stamp_cannot_vouch(
    agent: Agent,
) -> None:
    """The enabled channels are cached under the same stamp (notifications.outbox)."""
    submit(agent)
    with one_trigger_gone("approvals_notificationchannel"):
        assert policy_stamp_read() is None
    assert policy_stamp_read() is not None


def test_without_the_stamp_row_every_call_reads_the_policy(agent: Agent) -> None:
    submit(agent)
    PolicyStamp.objects.all().delete()  # as a flush leaves it
    assert policy_stamp_read() is None
    assert policy_reads(lambda: submit(agent)) != []
    assert policy_reads(lambda: submit(agent)) != []
    cap_rule_save(line=LOWER_CAP)  # the triggers write the row again
    assert policy_stamp_read() is not None
    assert submit(agent, "50.00") == "pending"


def test_the_cached_policy_is_the_one_read_afresh(agent: Agent) -> None:
    PermissionRule.objects.create(agent=agent, pattern="pay", decision="ask")
    budget_save(budget=Budget(max_calls=9))
    cached = policy_for_agent(agent=agent)
    assert policy_for_agent(agent=agent) is cached
    PolicyStamp.objects.all().delete()
    assert policy_for_agent(agent=agent) == cached


def _wait_until(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the submitting threads stalled"
        time.sleep(0.01)


# --- racing ----------------------------------------------------------------------------------


def test_calls_started_after_a_change_commits_all_see_it(agent: Agent) -> None:
    """Four threads submit without pause while the main thread adds a deny rule: every call
    begun after the rule's commit is refused, whatever each thread's cache held."""
    changed = threading.Event()
    stop = threading.Event()
    outcomes: list[tuple[bool, str]] = []
    errors: list[BaseException] = []

    def keep_submitting() -> None:
        try:
            while not stop.is_set():
                after = changed.is_set()
                outcomes.append((after, submit(agent)))
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=keep_submitting) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        _wait_until(lambda: len(outcomes) >= 20)
        PermissionRule.objects.create(pattern="pay", decision="deny")
        changed.set()
        _wait_until(lambda: sum(after for after, _ in list(outcomes)) >= 20)
    finally:
        stop.set()
    for thread in threads:
        thread.join(30)
    assert errors == []
    before = {status for after, status in outcomes if not after}
    after = {status for after, status in outcomes if after}
    assert "allowed" in before
    assert after == {"refused"}
