"""The audit writer: one function names every entry's object the same way, saved or not."""

from __future__ import annotations

import ast
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.audit_chain import GENESIS_HASH, audit_entry_hash
from approvals.models import Agent, AuditChainHead, AuditEntry, Call, CapRule, PermissionRule
from approvals.realtime.pushes import notify_call
from approvals.services.agents import agent_create_or_update
from approvals.services.audit import (
    NO_OBJECT,
    audit_deferred,
    audit_entries_record,
    audit_entry,
    audit_object_type,
    audit_record,
    audit_snapshot,
)
from approvals.services.decisions import call_decide, calls_decide
from tests.factories import call_make, payment, rule_make, user_make
from tests.outbox import webhook_channel

APPROVALS = Path(__file__).resolve().parents[2] / "approvals"
NOTIFICATIONS = APPROVALS.parent / "notifications"
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_an_entry_is_built_unsaved_for_a_bulk_insert(db: None) -> None:
    agent = Agent.objects.create(name="bot", principal="carol")
    entry = audit_entry(action=AuditEntry.Action.CALL_PENDING, obj=agent, agent=agent, at=AT)
    assert entry.pk is None
    assert not AuditEntry.objects.exists()
    assert (entry.action, entry.object_type, entry.object_id) == (
        "call pending",
        "agent",
        str(agent.pk),
    )
    assert (entry.agent, entry.at, entry.before, entry.after) == (agent, AT, "", "")


def test_a_recorded_entry_is_saved(db: None) -> None:
    user = User.objects.create_user("alice")
    rule = CapRule.objects.create(name="big", name_folded="big", line="x")
    entry = audit_record(
        action=AuditEntry.Action.CAP_RULE_SAVED, obj=rule, user=user, before="a", after="b"
    )
    stored = AuditEntry.objects.get(action=AuditEntry.Action.CAP_RULE_SAVED)
    assert stored.pk == entry.pk
    assert (stored.object_type, stored.object_id, stored.user) == ("cap rule", str(rule.pk), user)
    assert stored.username == "alice"
    assert (stored.before, stored.after) == ("a", "b")
    assert stored.at is not None


def test_an_object_known_by_its_id_is_named_by_type_and_id(db: None) -> None:
    entry = audit_record(
        action=AuditEntry.Action.CALL_EXPIRED, object_type=AuditEntry.ObjectType.CALL, object_id=7
    )
    assert (entry.object_type, entry.object_id) == ("call", "7")


@pytest.mark.parametrize(
    "names",
    [
        {},
        {"object_type": AuditEntry.ObjectType.CALL},
        {"object_id": 7},
        {"obj": Group(pk=1, name="g"), "object_id": 7},
    ],
)
def test_an_entry_names_its_object_exactly_one_way(names: dict[str, object]) -> None:
    with pytest.raises(TypeError, match=NO_OBJECT):
        audit_entry(action=AuditEntry.Action.ADMIN_DELETE, **names)  # type: ignore[arg-type]


def test_each_model_has_one_spelling() -> None:
    assert audit_object_type(CapRule) == "cap rule"
    assert audit_object_type(User) == "user"
    assert audit_object_type(Call) == AuditEntry.ObjectType.CALL
    with pytest.raises(KeyError):
        audit_object_type(AuditEntry)


def test_a_snapshot_is_the_rows_json(db: None) -> None:
    agent = Agent.objects.create(name="bot", principal="carol")
    assert '"principal": "carol"' in audit_snapshot(agent)


def test_nothing_else_writes_an_audit_entry() -> None:
    """No ``AuditEntry(...)`` or ``AuditEntry.objects.create`` outside ``services/audit.py``."""
    writers = []
    for path in sorted([*APPROVALS.rglob("*.py"), *NOTIFICATIONS.rglob("*.py")]):
        if "migrations" in path.parts or path == APPROVALS / "services" / "audit.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name in {
                "AuditEntry",
                "AuditEntry.objects.create",
                "AuditEntry.objects.bulk_create",
            }:
                writers.append(f"{path.relative_to(APPROVALS)}:{node.lineno}")
    assert writers == []


def test_a_persons_snapshot_is_their_access_never_the_password(db: None) -> None:
    alice = User.objects.create_user("alice", password="never-shown-pw")
    text = audit_snapshot(alice)
    assert json.loads(text) == {
        "username": "alice",
        "is_active": True,
        "is_staff": False,
        "is_superuser": False,
        "groups": [],
        "permissions": [],
    }
    assert alice.password not in text


@pytest.mark.parametrize(("scope", "run_id"), [("always", None), ("run", "r-1")])
def test_an_approval_that_creates_a_standing_rule_records_which_call_approver_and_scope(
    db: None, scope: str, run_id: str | None
) -> None:
    agent = Agent.objects.create(name="bot", principal="carol", mode="default")
    call = call_make(agent=agent, tool="transfer_funds", arguments=payment("1"), run_id="r-1")
    alice = user_make(username="alice")
    call_decide(
        call_id=call.pk,
        user=alice,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
        scope=scope,
    )
    rule = PermissionRule.objects.get()
    entry = AuditEntry.objects.get(action=AuditEntry.Action.STANDING_RULE_CREATED)
    assert (entry.object_type, entry.object_id) == ("permissionrule", str(rule.pk))
    assert (entry.user, entry.username) == (alice, "alice")
    assert json.loads(entry.after) == {
        "call": str(call.pk),
        "scope": scope,
        "agent": "bot",
        "pattern": "transfer_funds",
        "decision": "allow",
        "run_id": run_id,
    }


# --- the chain (docs/receipts.md, "The audit chain") -------------------------------------------


def _chain() -> list[tuple[int, str, str]]:
    return list(AuditEntry.objects.order_by("seq").values_list("seq", "prev_hash", "hash"))


def _assert_one_line(expected: int) -> None:
    """``expected`` entries numbered 1… with no gap, each linked to the one before and
    hashed as its content says, and the head row on the last."""
    chain = _chain()
    assert [seq for seq, _, _ in chain] == list(range(1, expected + 1))
    previous = GENESIS_HASH
    for entry in AuditEntry.objects.order_by("seq"):
        assert entry.prev_hash == previous
        assert entry.hash == audit_entry_hash(entry)
        previous = entry.hash
    head = AuditChainHead.objects.get()
    assert (head.seq, head.hash) == (expected, previous)


def _expired(n: int) -> AuditEntry:
    return audit_record(
        action=AuditEntry.Action.CALL_EXPIRED, object_type=AuditEntry.ObjectType.CALL, object_id=n
    )


def test_entries_are_numbered_and_linked_one_after_the_other(db: None) -> None:
    first = _expired(1)
    assert (first.seq, first.prev_hash) == (1, GENESIS_HASH)
    entries = [
        audit_entry(
            action=AuditEntry.Action.CALL_DENIED,
            object_type=AuditEntry.ObjectType.CALL,
            object_id=n,
        )
        for n in range(2, 5)
    ]
    audit_entries_record(entries)
    assert [e.seq for e in entries] == [2, 3, 4]
    assert entries[0].prev_hash == first.hash
    _assert_one_line(4)


def _expired_then_raise(n: int) -> None:
    """Record an entry, then fail: whatever encloses this rolls back."""
    _expired(n)
    raise RuntimeError


def test_a_rolled_back_entry_leaves_no_gap(db: None) -> None:
    _expired(1)
    with pytest.raises(RuntimeError), transaction.atomic():
        _expired_then_raise(2)
    _expired(3)
    _assert_one_line(2)
    assert list(AuditEntry.objects.values_list("object_id", flat=True).order_by("seq")) == [
        "1",
        "3",
    ]


def test_a_deferred_block_writes_its_entries_as_it_ends_in_order(db: None) -> None:
    with transaction.atomic(), audit_deferred():
        held = _expired(1)
        with audit_deferred():
            _expired(2)
        with pytest.raises(RuntimeError), audit_deferred(), transaction.atomic():
            _expired_then_raise(3)
        _expired(4)
        # Nothing is written, and nothing numbered, until the outer block ends.
        assert held.pk is None
        assert held.seq is None
        assert not AuditEntry.objects.exists()
    assert held.seq == 1
    assert list(AuditEntry.objects.values_list("object_id", flat=True).order_by("seq")) == [
        "1",
        "2",
        "4",
    ]
    _assert_one_line(3)


def test_a_block_that_raises_writes_nothing(db: None) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(), audit_deferred():
        _expired_then_raise(1)
    assert not AuditEntry.objects.exists()
    _expired(2)
    _assert_one_line(1)


def test_an_emptied_head_is_made_again_from_the_last_entry(db: None) -> None:
    _expired(1)
    _expired(2)
    AuditChainHead.objects.all().delete()
    _expired(3)
    _assert_one_line(3)


def _statements(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in captured.captured_queries]


def _first(statements: list[str], prefix: str) -> int:
    return next(i for i, sql in enumerate(statements) if sql.startswith(prefix))


def _last(statements: list[str], prefix: str) -> int:
    return max(i for i, sql in enumerate(statements) if sql.startswith(prefix))


def test_a_held_submission_locks_the_head_after_its_other_writes(db: None) -> None:
    """The chain's head is held from its lock to the commit: a submission writes its call,
    reservations and notifications first."""
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    webhook_channel("https://hooks.example.test/held")
    with CaptureQueriesContext(connection) as captured:
        call = call_make(agent=agent, arguments=payment("600.00"))
    assert call.status == "pending"
    statements = _statements(captured)
    head = _first(statements, 'SELECT "approvals_auditchainhead"')
    assert head > _last(statements, 'INSERT INTO "approvals_call"')
    assert head > _last(statements, 'INSERT INTO "approvals_notification"')
    assert statements[head + 1].startswith('INSERT INTO "approvals_auditentry"')
    _assert_one_line(AuditEntry.objects.count())


def test_a_batch_writes_its_entries_once_after_every_call(db: None) -> None:
    """A batch holding the head while it locks its next call would deadlock with a
    submission that holds that call's ledger and waits for the head."""
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    held = [call_make(agent=agent, arguments=payment(f"60{i}.00")) for i in range(3)]
    alice = user_make(username="alice")
    before = AuditEntry.objects.count()
    with CaptureQueriesContext(connection) as captured:
        outcomes = calls_decide(
            user=alice,
            approve=True,
            comment="",
            calls=[f"{c.pk}:{c.arguments_sha256}" for c in held],
        )
    assert all(outcome.decided for outcome in outcomes)
    statements = _statements(captured)
    heads = [i for i, sql in enumerate(statements) if "approvals_auditchainhead" in sql]
    assert heads[0] > _last(statements, 'UPDATE "approvals_call"')
    assert len([sql for sql in statements if sql.startswith('SELECT "approvals_auditchain')]) == 1
    assert AuditEntry.objects.count() == before + 3
    _assert_one_line(before + 3)


def test_a_call_of_a_batch_that_fails_after_its_entries_leaves_none(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    held = [call_make(agent=agent, arguments=payment(f"60{i}.00")) for i in range(3)]
    alice = user_make(username="alice")
    before = AuditEntry.objects.count()
    pushed = notify_call

    def push_fails_for_the_second(call: Call, **kwargs: Any) -> None:
        if call.pk == held[1].pk:
            raise RuntimeError("push failed")  # after the call's entries were recorded
        pushed(call, **kwargs)

    monkeypatch.setattr("approvals.services.decisions.notify_call", push_fails_for_the_second)
    outcomes = calls_decide(
        user=alice,
        approve=True,
        comment="",
        calls=[f"{c.pk}:{c.arguments_sha256}" for c in held],
    )
    assert [o.decided for o in outcomes] == [True, False, True]
    assert Call.objects.get(pk=held[1].pk).status == "pending"
    written = AuditEntry.objects.filter(seq__gt=before)
    assert sorted(written.values_list("object_id", flat=True)) == sorted(
        [str(held[0].pk), str(held[2].pk)]
    )
    _assert_one_line(before + 2)


@pytest.mark.django_db(transaction=True)
def test_a_writer_holding_the_head_never_waits_for_a_row_another_writer_holds() -> None:
    """PostgreSQL: a submission checks its foreign keys (a share lock on its agent's row)
    before it locks the head, so an agent's update (which locks that row, then writes its
    entry) waits for the submission instead of deadlocking with it."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite's writers take turns: no row locks to wait for")
    agent = Agent.objects.create(name="bot", principal="carol")
    head_held, updating = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def submission() -> None:
        try:
            with transaction.atomic():
                now = timezone.now()
                call = Call.objects.create(
                    agent=agent,
                    tool="pay",
                    arguments="{}",
                    arguments_sha256="0" * 64,
                    created_at=now,
                    updated_at=now,
                )
                audit_record(action=AuditEntry.Action.CALL_ALLOWED, obj=call, agent=agent)
                head_held.set()
                updating.wait(10)
                time.sleep(0.5)  # the update is blocked by now (or holds the agent's row)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    def update() -> None:
        try:
            head_held.wait(10)
            updating.set()
            agent_create_or_update(name="bot", mode="read_only")
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=submission), threading.Thread(target=update)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert Agent.objects.get().mode == "read_only"
    _assert_one_line(2)
