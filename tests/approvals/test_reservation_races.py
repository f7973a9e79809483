"""Held calls approved at once by many people outside a cap's gate: threads, each with its
own connection, against the file-backed test database (and PostgreSQL when DATABASE_URL says
so). The ledger never goes past its limit through a gate that did not see the call."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.models import Sum

from approvals.errors import ApplicationError
from approvals.models import Call, LedgerEntry
from approvals.services.decisions import call_decide
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make

pytestmark = pytest.mark.django_db(transaction=True)

HELD = 50
LIMIT_RULE = "race: pay arg=amount sum USD 200.00 -> gate finance"  # 20 calls of 10.00
FIT = 20


def _race(count: int, work: Callable[[int], str]) -> list[str]:
    """``work(i)`` in ``count`` threads released together; their results in order."""
    results = [""] * count
    errors: list[BaseException] = []
    start = threading.Barrier(count, timeout=60)

    def run(index: int) -> None:
        try:
            start.wait()
            results[index] = work(index)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    return results


def _approve_all(calls: list[Call], outsiders: list[User]) -> Counter[str]:
    def approve(index: int) -> str:
        call = calls[index]
        try:
            return call_decide(
                call_id=call.pk,
                user=outsiders[index % len(outsiders)],
                approve=True,
                comment="",
                arguments_sha256=call.arguments_sha256,
            ).status
        except ApplicationError as refused:
            return type(refused).__name__

    return Counter(_race(len(calls), approve))


def _recorded() -> int:
    return LedgerEntry.objects.aggregate(total=Sum("minor"))["total"] or 0


@pytest.fixture
def outsiders(transactional_db: None) -> list[User]:
    """People who may decide at the default gate but are not in ``finance``."""
    gate_make(name="finance", group=Group.objects.create(name="finance"))
    return [user_make(username=f"outsider-{k}") for k in range(5)]


def test_held_calls_approved_at_once_stay_within_the_cap(outsiders: list[User]) -> None:
    rule_make(line=LIMIT_RULE)
    agent = agent_make(mode="prompt")
    calls = [call_make(agent=agent, arguments=payment("10.00")) for _ in range(HELD)]
    assert sum(call.gates == [""] for call in calls) == FIT  # the rest are held at finance
    outcomes = _approve_all(calls, outsiders)
    assert outcomes == {"approved": FIT, "NotEligible": HELD - FIT}
    assert _recorded() == 20000


def test_a_cap_written_while_calls_are_held_holds_at_approval_under_the_race(
    outsiders: list[User],
) -> None:
    """No reservation counts for the new rule: the re-checks alone, each under the ledger's
    lock, keep the ledger at its limit and hold the rest at the cap's gate."""
    agent = agent_make(mode="prompt")
    calls = [call_make(agent=agent, arguments=payment("10.00")) for _ in range(HELD)]
    rule_make(line=LIMIT_RULE)
    outcomes = _approve_all(calls, outsiders)
    assert outcomes == {"approved": FIT, "pending": HELD - FIT}
    assert _recorded() == 20000
    held = Call.objects.filter(status="pending")
    assert all(call.gates == ["", "finance"] for call in held)
