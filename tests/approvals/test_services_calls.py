"""call_submit: verdicts stored, ledgers recorded atomically, idempotent replays."""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import capcore
from approvals.models import (
    Agent,
    Budget,
    Call,
    CapRule,
    Ledger,
    LedgerEntry,
    LedgerHour,
    RunCounter,
)
from approvals.services.calls import (
    LEDGER_VANISHED,
    IdempotencyConflict,
    Submission,
    call_submit,
)
from approvals.services.rules import cap_rule_save
from tests.factories import agent_make

DAILY = "daily: pay arg=amount sum USD 1000.00 per day -> gate"


@pytest.fixture
def agent(db: None) -> Agent:
    return agent_make(principal="user-1")


def submit(agent: Agent, amount: str) -> Call:
    arguments = f'{{"amount": "{amount}"}}'
    call, _ = call_submit(
        agent=agent, submission=Submission(tool="pay", arguments=arguments, principal="user-1")
    )
    return call


def test_allowed_call_records_its_amount(agent: Agent) -> None:
    cap_rule_save(line=DAILY)
    call = submit(agent, "250.00")
    assert call.status == "allowed"
    assert [e.minor for e in LedgerEntry.objects.filter(call=call)] == [25000]


def test_call_over_the_sum_is_held_and_records_nothing(agent: Agent) -> None:
    cap_rule_save(line=DAILY)
    submit(agent, "800.00")
    held = submit(agent, "250.00")
    assert held.status == "pending"
    assert held.gates == [""]
    assert held.expires_at is not None
    assert held.reasons[0]["message"] == (
        "USD 1,050.00 would exceed the limit of USD 1,000.00 per day (spent USD 800.00)"
    )
    assert not LedgerEntry.objects.filter(call=held).exists()
    assert held.pending_records[0]["minor"] == 25000


def test_a_ledger_deleted_while_it_is_locked_refuses_the_call_and_stores_nothing(
    agent: Agent,
) -> None:
    """Its total would otherwise count as nothing spent."""
    cap_rule_save(line=DAILY)
    submit(agent, "250.00")  # the ledger exists now
    creating = re.compile(r'INSERT .*INTO "approvals_ledger" \(')

    def deleted_after_creating(execute: Any, sql: str, *args: Any) -> Any:
        result = execute(sql, *args)
        if creating.match(sql):
            # Deleted between the insert-if-missing and the lock.
            LedgerEntry.objects.all().delete()
            LedgerHour.objects.all().delete()
            Ledger.objects.all().delete()
        return result

    with (
        connection.execute_wrapper(deleted_after_creating),
        pytest.raises(Ledger.DoesNotExist, match=LEDGER_VANISHED),
    ):
        submit(agent, "250.00")
    assert Call.objects.count() == 1
    assert Ledger.objects.count() == 1  # the deletion rolled back with the call


def test_not_strict_arguments_are_refused_and_stored(agent: Agent) -> None:
    call, created = call_submit(
        agent=agent,
        submission=Submission(
            tool="pay", arguments='{"amount": 1, "amount": 2}', principal="user-1"
        ),
    )
    assert created
    assert call.status == "refused"
    assert call.reasons[0]["policy"] == "arguments"


def test_unreadable_stored_rule_refuses_with_policy_error(agent: Agent) -> None:
    cap_rule_save(line=DAILY)
    CapRule.objects.update(line="daily: pay arg=amount sum QQQ 1 -> gate")
    call = submit(agent, "1.00")
    assert call.status == "refused"
    assert call.reasons == [
        {"policy": "error", "rule": None, "action": "refuse", "gate": "", "message": "policy error"}
    ]


def test_idempotent_replay_returns_the_first_call(agent: Agent) -> None:
    first, created = call_submit(
        agent=agent,
        submission=Submission(
            tool="pay", arguments="{}", principal="user-1", idempotency_key="k1", request_sha256="a"
        ),
    )
    again, created_again = call_submit(
        agent=agent,
        submission=Submission(
            tool="pay", arguments="{}", principal="user-1", idempotency_key="k1", request_sha256="a"
        ),
    )
    assert created
    assert not created_again
    assert again.pk == first.pk
    with pytest.raises(IdempotencyConflict):
        call_submit(
            agent=agent,
            submission=Submission(
                tool="pay",
                arguments="{}",
                principal="user-1",
                idempotency_key="k1",
                request_sha256="b",
            ),
        )
    assert Call.objects.count() == 1


def test_a_new_key_is_looked_up_in_one_statement_and_nothing_is_let_go(agent: Agent) -> None:
    """Nearly every key is new: one read finds that no call holds it, and no call older than
    the window has one to let go of."""
    keyed = Submission(
        tool="pay", arguments="{}", principal="user-1", idempotency_key="new", request_sha256="a"
    )
    with CaptureQueriesContext(connection) as captured:
        call_submit(agent=agent, submission=keyed)
    naming_the_key = [q["sql"] for q in captured if '"idempotency_key" = ' in q["sql"]]
    assert len(naming_the_key) == 1
    assert naming_the_key[0].startswith("SELECT")
    assert Call.objects.get().idempotency_key == "new"


@pytest.mark.django_db(transaction=True)
def test_200_racing_submissions_allow_exactly_the_limit() -> None:
    """Really concurrent: 200 threads, each with its own connection to the file-backed
    database, submit 10.00 against a 1000.00 sum. Exactly 100 may pass."""
    assert connection.vendor != "sqlite" or connection.settings_dict["NAME"] != ":memory:"
    agent = agent_make(name="racer", principal="user-1")
    cap_rule_save(line="race: pay arg=amount sum USD 1000.00 -> gate")
    statuses: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(200)

    def racer() -> None:
        try:
            start.wait()
            statuses.append(submit(agent, "10.00").status)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=racer) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert Counter(statuses) == {"allowed": 100, "pending": 100}
    assert sum(LedgerEntry.objects.values_list("minor", flat=True)) == 100_000


def test_budget_counts_every_call_on_the_server(agent: Agent) -> None:
    Budget.objects.create(max_calls=2, max_tokens=100)
    usage = capcore.Usage(tokens=40)
    statuses = [
        call_submit(
            agent=agent,
            submission=Submission(
                tool="read_file", arguments="{}", principal="user-1", usage=usage
            ),
        )[0].status
        for _ in range(3)
    ]
    assert statuses == ["allowed", "allowed", "refused"]
    counter = RunCounter.objects.get(agent=agent, scope="run", key="")
    assert (counter.calls, counter.tokens) == (3, 120)
    refused = Call.objects.filter(status="refused").get()
    assert [r["rule"] for r in refused.reasons] == ["budget:calls", "budget:tokens"]
