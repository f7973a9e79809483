"""selectors/queue.py's read: the queue's counts and rows as one person sees them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from approvals.models import Agent, Approval, Call
from approvals.selectors.deciders import decidable_call_ids, decidable_filter, gates_read_for_user
from approvals.services.decisions import call_decide
from approvals.web.queue_page import QueueCall, QueueRead, queue_read
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make


@pytest.fixture
def agent(db: None) -> Agent:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="wire: wire arg=amount max USD 100.00 -> gate treasury")
    gate_make(name="treasury", group=Group.objects.create(name="treasury"))
    return agent_make(principal="carol")


def read(user: User, *, limit: int = 50) -> QueueRead:
    """The queue's read as the selector asks for it."""
    closed = gates_read_for_user(user=user).closed
    decidable = decidable_filter(user=user, closed=closed)
    return queue_read(user_id=user.pk, decidable=decidable, limit=limit)


def ids(section: list[QueueCall]) -> list[object]:
    return [row.call.pk for row in section]


def held(
    agent: Agent,
    amount: str = "600.00",
    *,
    principal: str | None = None,
    run_id: str = "",
    now: datetime | None = None,
) -> Call:
    call = call_make(
        agent=agent, arguments=payment(amount), principal=principal, run_id=run_id, now=now
    )
    assert call.status == Call.Status.PENDING
    return call


def decide(call: Call, user: User, *, arguments: str | None = None) -> None:
    call_decide(
        call_id=call.pk,
        user=user,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
        arguments=arguments,
    )


def test_each_section_is_oldest_first_and_counted_beyond_the_limit(agent: Agent) -> None:
    start = timezone.now() - timedelta(minutes=30)
    mine = [held(agent, now=start + timedelta(minutes=i)) for i in (4, 1, 3, 0, 2)]
    # Two more submitted at one moment: the id orders them.
    mine += [held(agent, now=start + timedelta(minutes=5)) for _ in range(2)]
    others = [held(agent, principal="alice", now=start + timedelta(minutes=i)) for i in (2, 0, 1)]
    call_make(agent=agent, arguments=payment("10.00"))  # allowed: not held

    found = read(user_make(username="alice"), limit=3)

    def oldest(calls: list[Call]) -> list[object]:
        return [call.pk for call in sorted(calls, key=lambda call: (call.created_at, call.pk))]

    assert (found.mine_count, found.others_count) == (7, 3)
    assert ids(found.mine) == oldest(mine)[:3]
    assert ids(found.others) == oldest(others)
    assert ids(read(User.objects.get(username="alice"), limit=10).mine) == oldest(mine)


def test_a_decision_either_way_moves_the_call_to_the_others(agent: Agent) -> None:
    gate_make(name="", required_approvals=2)
    approved, refused, untouched = held(agent), held(agent), held(agent)
    alice, bob = user_make(username="alice"), user_make(username="bob")
    decide(approved, alice)
    # A deny ends a call; a denial still on a held call is as much the person's decision.
    Approval.objects.create(
        call=refused, user=alice, approve=False, created_at=timezone.now(), arguments_sha256=""
    )
    decide(untouched, bob)

    found = read(alice)

    assert ids(found.mine) == [untouched.pk]
    assert [(row.decided, row.approved) for row in found.mine] == [(False, 1)]
    assert ids(found.others) == [approved.pk, refused.pk]
    assert [(row.decided, row.approved) for row in found.others] == [(True, 1), (True, 0)]


def test_an_approval_an_edit_voided_is_no_decision_and_no_approval(agent: Agent) -> None:
    gate_make(name="", required_approvals=2)
    call = held(agent, "600.00")
    alice, bob = user_make(username="alice"), user_make(username="bob")
    decide(call, alice)
    decide(call, bob, arguments=payment("700.00"))  # voids alice's approval
    assert Approval.objects.filter(call=call, user=alice, voided_at__isnull=False).exists()

    (row,) = read(alice).mine
    assert (row.call.pk, row.decided, row.approved) == (call.pk, False, 1)
    (row,) = read(bob).others
    assert (row.decided, row.approved) == (True, 1)


def test_who_may_decide_is_decidable_filters_answer(agent: Agent) -> None:
    mine = held(agent)
    own = held(agent, principal="alice")
    treasury = call_make(agent=agent, tool="wire", arguments=payment("200.00"))
    assert treasury.gates == ["treasury"]
    alice = user_make(username="alice")

    found = read(alice)
    assert (ids(found.mine), ids(found.others)) == ([mine.pk], [own.pk, treasury.pk])
    pending = list(Call.objects.filter(status=Call.Status.PENDING))
    assert set(ids(found.mine)) == decidable_call_ids(user=alice, calls=pending)

    alice.groups.add(Group.objects.get(name="treasury"))
    found = read(User.objects.get(pk=alice.pk))
    assert (ids(found.mine), ids(found.others)) == ([mine.pk, treasury.pk], [own.pk])

    root = user_make(username="root", superuser=True)  # every gate, in no group
    assert ids(read(root).mine) == [mine.pk, own.pk, treasury.pk]

    viewer = read(user_make(username="victor", decide=False, view=True))
    assert (viewer.mine_count, viewer.others_count) == (0, 3)
    assert ids(viewer.others) == [mine.pk, own.pk, treasury.pk]


def test_a_row_holds_what_the_queue_reads_of_it(
    agent: Agent, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    call = held(agent, run_id="run-7")
    (row,) = read(user_make(username="alice")).mine
    with django_assert_num_queries(0):  # nothing it reads was left in the database
        seen = row.call
        assert (seen.tool, seen.arguments, seen.principal, seen.run_id) == (
            call.tool,
            call.arguments,
            call.principal,
            "run-7",
        )
        assert (seen.reasons, seen.gates, seen.pending_records) == (
            call.reasons,
            call.gates,
            call.pending_records,
        )
        assert (seen.created_at, seen.expires_at, seen.agent_id) == (
            call.created_at,
            call.expires_at,
            agent.pk,
        )
        assert seen.arguments_sha256 == call.arguments_sha256
    assert row.agent_name == agent.name


def test_a_section_counted_empty_is_not_read(
    agent: Agent, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    viewer = user_make(username="victor", decide=False, view=True)
    closed = gates_read_for_user(user=viewer).closed
    decidable = decidable_filter(user=viewer, closed=closed)
    with django_assert_num_queries(1):
        queue_read(user_id=viewer.pk, decidable=decidable, limit=50)
    held(agent)
    with django_assert_num_queries(2):  # the counts, then the others
        queue_read(user_id=viewer.pk, decidable=decidable, limit=50)
