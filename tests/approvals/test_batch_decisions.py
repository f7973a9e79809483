"""Deciding many calls at once: ``calls_decide`` (each call decided as if alone, one failure
never stopping the others) and ``POST /calls/decide`` (htmx and the plain form, CSRF)."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from approvals.models import Agent, Approval, AuditEntry, Call, PermissionRule
from approvals.realtime.pushes import QUEUE_GROUP
from approvals.services import calls
from approvals.services.decisions import (
    BATCH_FAILED,
    BATCH_MALFORMED,
    BATCH_NOT_ELIGIBLE,
    BATCH_NOT_FOUND,
    DECIDED,
    Conflict,
    call_decide,
    calls_decide,
)
from approvals.web.views import BATCH_BAD_VERB, BATCH_EMPTY
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make

MISSING = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def held(db: None) -> list[Call]:
    """Three calls of USD 600.00 to 602.00, each held at the default gate."""
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    calls = [call_make(agent=agent, arguments=payment(f"60{i}.00")) for i in range(3)]
    assert {call.status for call in calls} == {"pending"}
    return calls


def field(call: Call) -> str:
    return f"{call.pk}:{call.arguments_sha256}"


def status(call: Call) -> str:
    return Call.objects.get(pk=call.pk).status


def test_each_call_is_decided_and_one_already_denied_is_reported(held: list[Call]) -> None:
    alice, bob = user_make(username="alice"), user_make(username="bob")
    first, second, third = held
    call_decide(
        call_id=second.pk,
        user=bob,
        approve=False,
        comment="",
        arguments_sha256=second.arguments_sha256,
    )

    outcomes = calls_decide(
        user=alice, approve=True, comment="all three", calls=[field(c) for c in held]
    )

    assert [(o.call_id, o.decided, o.reason) for o in outcomes] == [
        (first.pk, True, DECIDED),
        (second.pk, False, Conflict.FINAL.value),
        (third.pk, True, DECIDED),
    ]
    assert [status(c) for c in held] == ["approved", "denied", "approved"]
    assert Approval.objects.get(call=first, user=alice).comment == "all three"
    # Scope once: no standing rule comes of a batch.
    assert not PermissionRule.objects.exists()


def test_a_stale_digest_an_unknown_call_and_a_malformed_field_are_reported(
    held: list[Call],
) -> None:
    alice = user_make(username="alice")
    first, second, _ = held
    outcomes = calls_decide(
        user=alice,
        approve=False,
        comment="no",
        calls=[f"{first.pk}:{'0' * 64}", f"{MISSING}:{'0' * 64}", "nonsense", field(second)],
    )
    assert [(o.decided, o.reason) for o in outcomes] == [
        (False, Conflict.STALE.value),
        (False, BATCH_NOT_FOUND),
        (False, BATCH_MALFORMED),
        (True, DECIDED),
    ]
    assert [status(first), status(second)] == ["pending", "denied"]


def test_calls_the_user_may_not_decide_are_refused_one_by_one(held: list[Call]) -> None:
    first, second, _ = held
    carol = user_make(username="carol")  # the calls' own principal
    outcomes = calls_decide(user=carol, approve=True, comment="", calls=[field(first)])
    assert [(o.decided, o.reason) for o in outcomes] == [(False, BATCH_NOT_ELIGIBLE)]

    alice = user_make(username="alice")
    call_decide(
        call_id=second.pk,
        user=alice,
        approve=True,
        comment="",
        arguments_sha256=second.arguments_sha256,
    )
    again = calls_decide(user=alice, approve=True, comment="", calls=[field(second), field(first)])
    assert [(o.decided, o.reason) for o in again] == [
        (False, Conflict.FINAL.value),
        (True, DECIDED),
    ]
    assert status(first) == "approved"


def test_the_same_call_twice_is_decided_once(held: list[Call]) -> None:
    alice = user_make(username="alice")
    outcomes = calls_decide(
        user=alice, approve=True, comment="", calls=[field(held[0]), field(held[0])]
    )
    assert [o.reason for o in outcomes] == [DECIDED]
    assert Approval.objects.filter(call=held[0]).count() == 1


def test_an_approval_that_leaves_a_call_pending_is_reported_as_recorded(db: None) -> None:
    """A two-approval gate's first approval, a re-check that holds, one that refuses: none
    of them says "approved", in the outcome or in the approver's audit entry."""
    agent = agent_make(mode="prompt")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate treasury")
    gate_make(name="treasury", required_approvals=2)
    first = call_make(agent=agent, arguments=payment("600.00"))  # treasury: 2 needed
    second, third = (call_make(agent=agent, tool="wire", arguments=payment("40.00")) for _ in "ab")
    fourth = call_make(agent=agent, tool="refund", arguments=payment("40.00"))
    # Written while the calls wait: the re-check of wire holds it at finance, refund's refuses.
    rule_make(line="wires: wire arg=amount sum USD 50.00 -> gate finance")
    rule_make(line="refunds: refund arg=amount sum USD 10.00 -> refuse")
    alice = user_make(username="alice")

    outcomes = calls_decide(
        user=alice,
        approve=True,
        comment="ok",
        calls=[field(c) for c in (first, second, third, fourth)],
    )

    assert [(o.decided, o.outcome) for o in outcomes] == [
        (True, "approval recorded (1 of 2)"),
        (True, "approved"),
        (True, "approval recorded (1 of 1); the re-check of its sums holds it at gate finance too"),
        (True, "Refused when approved: cap rule refunds refuses it now."),
    ]
    assert [status(c) for c in (first, second, third, fourth)] == [
        "pending",
        "approved",
        "pending",
        "refused",
    ]
    entries = AuditEntry.objects.filter(user=alice, object_type="call")
    assert {(e.object_id, e.action, e.after) for e in entries} == {
        (str(first.pk), "call pending", "approval recorded (1 of 2): ok"),
        (str(second.pk), "call approved", "ok"),
        (str(third.pk), "call pending", "approval recorded (1 of 1): ok"),
        (str(fourth.pk), "call pending", "approval recorded (1 of 1): ok"),
    }


# --- the endpoint ------------------------------------------------------------------------------


def logged_in(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def test_an_htmx_batch_answers_the_report_and_the_socket_the_rows(held: list[Call]) -> None:
    alice, bob = user_make(username="alice"), user_make(username="bob")
    call_decide(
        call_id=held[1].pk,
        user=bob,
        approve=False,
        comment="",
        arguments_sha256=held[1].arguments_sha256,
    )
    response = logged_in(alice).post(
        "/calls/decide",
        {"verb": "approve", "comment": "ok", "call": [field(c) for c in held]},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="batch-result"')
    assert "2 approved" in html
    assert "1 not decided" in html
    assert f"not decided — {Conflict.FINAL.value}" in html
    # The queue's socket alone changes the rows, so that it knows what the page shows.
    assert 'id="queue"' not in html
    assert "hx-swap-oob" not in html
    assert [status(c) for c in held] == ["approved", "denied", "approved"]


def test_the_report_counts_a_partial_approval_as_pending_not_approved(held: list[Call]) -> None:
    gate_make(name="", required_approvals=2)
    alice = user_make(username="alice")
    response = logged_in(alice).post(
        "/calls/decide",
        {"verb": "approve", "comment": "", "call": [field(c) for c in held[:2]]},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "<strong>2 still pending (approval recorded)</strong>." in html
    assert "approved" not in html
    for call in held[:2]:
        assert re.search(
            rf'<li class="wait" data-call="{call.pk}">.*: approval recorded \(1 of 2\)</li>',
            html,
        )


def test_the_plain_form_is_redirected_to_the_queue_which_shows_the_report_once(
    held: list[Call],
) -> None:
    client = logged_in(user_make(username="alice"))
    response = client.post("/calls/decide", {"verb": "deny", "call": [field(held[0])]})
    assert response.status_code == 303
    assert response["Location"] == "/"
    page = client.get("/").content.decode()
    assert "1 denied" in page
    assert re.search(rf'<li class="yes" data-call="{held[0].pk}">', page)
    assert "1 denied" not in client.get("/").content.decode()
    assert status(held[0]) == "denied"


def test_the_queue_offers_checkboxes_only_on_rows_the_user_may_decide(held: list[Call]) -> None:
    alice = user_make(username="alice")
    call_decide(
        call_id=held[0].pk,
        user=alice,
        approve=True,
        comment="",
        arguments_sha256=held[0].arguments_sha256,
    )
    Call.objects.filter(pk=held[0].pk).update(status="pending")  # still pending, decided by alice
    page = logged_in(alice).get("/").content.decode()
    boxes = re.findall(r'<input type="checkbox" class="pick" name="call" value="([^"]+)"', page)
    assert boxes == [field(held[1]), field(held[2])]
    assert 'id="batch"' in page
    assert "Approve selected" in page
    assert "Deny selected" in page
    viewer = user_make(username="vera", decide=False, view=True)
    read_only = logged_in(viewer).get("/").content.decode()
    assert 'class="pick"' not in read_only
    assert 'id="batch"' not in read_only


def test_csrf_is_enforced(held: list[Call]) -> None:
    client = logged_in(user_make(username="alice"), csrf=True)
    response = client.post("/calls/decide", {"verb": "approve", "call": [field(held[0])]})
    assert response.status_code == 403
    assert status(held[0]) == "pending"


def test_a_bad_verb_or_no_call_is_400_and_a_viewer_is_403(held: list[Call]) -> None:
    client = logged_in(user_make(username="alice"))
    bad = client.post("/calls/decide", {"verb": "maybe", "call": [field(held[0])]})
    assert (bad.status_code, bad.content.decode()) == (400, BATCH_BAD_VERB)
    empty = client.post("/calls/decide", {"verb": "approve"})
    assert (empty.status_code, empty.content.decode()) == (400, BATCH_EMPTY)
    viewer = logged_in(user_make(username="vera", decide=False, view=True))
    assert (
        viewer.post("/calls/decide", {"verb": "approve", "call": [field(held[0])]}).status_code
        == 403
    )
    assert status(held[0]) == "pending"


@pytest.mark.django_db(transaction=True)
def test_a_call_whose_recording_fails_rolls_back_alone(
    held: list[Call], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch is one transaction with a savepoint per call: the second call fails after
    its approval was written, and only its writes are undone."""
    first, second, third = held

    def call_end(*, call: Call, **kwargs: Any) -> None:
        if call.pk == second.pk:
            raise RuntimeError("the disk is full")
        calls.call_end(call=call, **kwargs)

    monkeypatch.setattr("approvals.services.decisions.call_end", call_end)

    outcomes = calls_decide(
        user=user_make(username="alice"), approve=True, comment="", calls=[field(c) for c in held]
    )

    assert [(o.decided, o.reason) for o in outcomes] == [
        (True, DECIDED),
        (False, BATCH_FAILED),
        (True, DECIDED),
    ]
    assert [status(c) for c in held] == ["approved", "pending", "approved"]
    assert not Approval.objects.filter(call=second).exists()
    assert list(
        AuditEntry.objects.filter(action=AuditEntry.Action.CALL_APPROVED).values_list(
            "object_id", flat=True
        )
    ) == [str(first.pk), str(third.pk)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_batch_pushes_each_decided_call_once_in_order_after_its_commit(
    held: list[Call],
) -> None:
    first, second, third = held
    alice = await sync_to_async(user_make)(username="alice")
    layer = get_channel_layer()
    assert layer is not None
    listener = await layer.new_channel()
    await layer.group_add(QUEUE_GROUP, listener)
    stale = f"{second.pk}:{'0' * 64}"

    def decide_all() -> list[str]:
        outcomes = calls_decide(
            user=alice, approve=True, comment="", calls=[field(third), stale, field(first)]
        )
        return [o.reason for o in outcomes]

    assert await sync_to_async(decide_all)() == [DECIDED, Conflict.STALE.value, DECIDED]
    pushed = [(await asyncio.wait_for(layer.receive(listener), 2))["call"] for _ in range(2)]
    assert [(state["id"], state["status"]) for state in pushed] == [
        (str(third.pk), "approved"),
        (str(first.pk), "approved"),
    ]
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(layer.receive(listener), 0.2)


@pytest.mark.django_db(transaction=True)
def test_two_batches_over_the_same_calls_in_opposite_orders_each_end_every_call_once(
    db: None, settings: Any
) -> None:
    """Two approvers at once, one naming twenty calls in one order and the other in the
    reverse: neither batch fails or waits for ever on the other (on PostgreSQL each locks
    its calls in one statement, in key order), and each call is approved exactly once, by
    one of them, the other told it is already final."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    held = [call_make(agent=agent, arguments=payment(f"6{i:02d}.00")) for i in range(20)]
    approvers = [user_make(username="alice"), user_make(username="bob")]
    orders = [[field(c) for c in held], [field(c) for c in reversed(held)]]
    results: dict[str, list[Any]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def decide(user: User, fields: list[str]) -> None:
        try:
            start.wait()
            results[user.username] = calls_decide(user=user, approve=True, comment="", calls=fields)
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=(user, fields))
        for user, fields in zip(approvers, orders, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert not any(thread.is_alive() for thread in threads)
    decided = [o.call_id for outcomes in results.values() for o in outcomes if o.decided]
    refused = {o.reason for outcomes in results.values() for o in outcomes if not o.decided}
    assert sorted(decided) == sorted(c.pk for c in held)
    assert refused <= {Conflict.FINAL.value}
    assert [status(c) for c in held] == ["approved"] * 20
    assert Approval.objects.count() == 20
