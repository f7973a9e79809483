"""Writes on calls. Each service is one transaction; notifications go out after commit."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

import capcore
from approvals import policies, selectors, sql
from approvals.models import Agent, AuditEntry, Call, Gate, Ledger, LedgerEntry, RunCost, RunCounter
from approvals.notify import notify_call
from approvals.services.transactions import write_transaction

logger = logging.getLogger(__name__)

IDEMPOTENCY_WINDOW = timedelta(hours=24)
LEDGER_VANISHED = "a ledger was deleted while a call was being checked against it"


class IdempotencyConflict(Exception):
    """The same Idempotency-Key came with a different body."""


@dataclass(frozen=True, slots=True)
class Submission:
    """A validated ``POST /calls`` body; ``request_sha256`` is the digest of the raw body."""

    tool: str
    arguments: str
    principal: str
    run_id: str = ""
    context: str = ""
    usage: capcore.Usage = field(default_factory=capcore.Usage)
    idempotency_key: str | None = None
    request_sha256: str = ""


# The statements every submission runs, in SQL (approvals/sql.py says why).
_LEDGERS_CREATE = "INSERT INTO approvals_ledger (rule, currency, key_digest) VALUES {rows}"
_LEDGERS_CREATE += " ON CONFLICT DO NOTHING"
_LEDGERS_READ = "SELECT id, rule, currency, key_digest FROM approvals_ledger WHERE {named}"
_LEDGERS_READ += " ORDER BY rule, currency, key_digest"
_LEDGER_NAMED = "(rule = %s AND currency = %s AND key_digest = %s)"
_CALL_COUNT = """
INSERT INTO approvals_runcounter (agent_id, scope, "key", calls, tokens, started_at)
VALUES (%s, %s, %s, 1, %s, %s)
ON CONFLICT (agent_id, scope, "key") DO UPDATE SET
    calls = approvals_runcounter.calls + 1,
    tokens = approvals_runcounter.tokens + excluded.tokens
RETURNING id, calls, tokens, started_at
"""
_COST_READ = "SELECT amount FROM approvals_runcost WHERE counter_id = %s AND currency = %s"
_COST_COUNT = """
INSERT INTO approvals_runcost (counter_id, currency, amount) VALUES (%s, %s, %s)
ON CONFLICT (counter_id, currency) DO UPDATE SET amount = approvals_runcost.amount + %s
"""


def ledger_lock(keys: tuple[capcore.LedgerKey, ...]) -> dict[capcore.LedgerKey, Ledger]:
    """Create the ledgers' rows if missing, then lock them in sorted order.

    On SQLite the IMMEDIATE transaction already holds the database's write lock; on
    PostgreSQL the row locks serialise concurrent calls per ledger, across processes, and the
    fixed order rules out deadlocks. Creating first, before holding any lock, keeps it so: a
    transaction that waits on another's new row holds nothing that one could need.
    """
    if not keys:
        return {}
    wanted = {selectors.ledger_identity(key): key for key in keys}
    params = [value for identity in sorted(wanted) for value in identity]
    sql.execute(_LEDGERS_CREATE.format(rows=", ".join(["(%s, %s, %s)"] * len(wanted))), params)
    # PostgreSQL locks the rows as the sort emits them: always in this order.
    read = sql.locking(_LEDGERS_READ.format(named=" OR ".join([_LEDGER_NAMED] * len(wanted))))
    of = sql.fields(Ledger, "id", "rule", "currency", "key_digest")
    ledgers = {}
    for values in sql.fetch(read, params, of):
        ledger: Ledger = sql.instance(Ledger, of, values)
        ledgers[wanted[(ledger.rule, ledger.currency, ledger.key_digest)]] = ledger
    if len(ledgers) != len(wanted):
        # A ledger missing here would count as nothing spent: refuse rather than guess.
        raise Ledger.DoesNotExist(LEDGER_VANISHED)
    return ledgers


def _counted(
    agent: Agent, budget: capcore.Budget | None, submission: Submission, now: datetime
) -> capcore.RunCounters:
    """Count the call in its run's (or day's) counters, creating them if missing; the
    counters as they stood before it. The database adds the totals, in the statement that
    also locks the counter's row, so concurrent calls never lose a count."""
    scope = budget.scope if budget is not None else capcore.BudgetScope.RUN
    key = submission.run_id if scope is capcore.BudgetScope.RUN else now.date().isoformat()
    usage = submission.usage
    returned = sql.fields(RunCounter, "id", "calls", "tokens", "started_at")
    started = sql.prepared(returned[3], now)
    ((counter_id, calls, tokens, started_at),) = sql.fetch(
        _CALL_COUNT, [agent.pk, scope.value, key, usage.tokens, started], returned
    )
    cost = 0
    if budget is not None and budget.cost_currency is not None:
        found = sql.fetch(
            _COST_READ, [counter_id, budget.cost_currency], sql.fields(RunCost, "amount")
        )
        cost = found[0][0] if found else 0
    if usage.cost_currency is not None:
        sql.execute(_COST_COUNT, [counter_id, usage.cost_currency, usage.cost, usage.cost])
    calls_before = calls - 1
    return capcore.RunCounters(
        calls_before, tokens - usage.tokens, cost, started_at if calls_before else None
    )


def _deadline(gates: tuple[str, ...], now: datetime) -> datetime:
    timeouts = {
        gate.name: gate.timeout_seconds or settings.COUNTERSIGN_HOLD_TIMEOUT
        for gate in Gate.objects.filter(name__in=gates)
    }
    # A gate nobody configured cannot hold a call for ever: it gets the default timeout.
    smallest = min(timeouts.get(g, settings.COUNTERSIGN_HOLD_TIMEOUT) for g in gates)
    return now + timedelta(seconds=smallest)


def ledger_record(
    *,
    call: Call,
    records: Sequence[capcore.LedgerRecord],
    ledgers: dict[capcore.LedgerKey, Ledger],
    now: datetime,
) -> None:
    """Add a call's amounts to its ledgers (the caller holds their locks)."""
    sql.insert(
        [
            LedgerEntry(
                ledger=ledgers[record.ledger], call=call, minor=record.minor, recorded_at=now
            )
            for record in records
        ]
    )


def records_to_json(records: Sequence[capcore.LedgerRecord]) -> list[dict[str, object]]:
    """A held call's ledger amounts, kept on the call until it is approved."""
    return [
        {
            "rule": r.ledger.rule,
            "currency": r.ledger.currency,
            "key_digest": r.ledger.key_digest,
            "minor": r.minor,
        }
        for r in records
    ]


def records_from_json(stored: list[dict[str, Any]]) -> tuple[capcore.LedgerRecord, ...]:
    return tuple(
        capcore.LedgerRecord(
            capcore.LedgerKey(item["rule"], item["currency"], item["key_digest"]), item["minor"]
        )
        for item in stored
    )


def _replay(agent: Agent, submission: Submission, now: datetime) -> Call | None:
    if submission.idempotency_key is None:
        return None
    earlier = Call.objects.filter(
        agent=agent,
        idempotency_key=submission.idempotency_key,
        created_at__gte=now - IDEMPOTENCY_WINDOW,
    ).first()
    if earlier is not None and earlier.request_sha256 != submission.request_sha256:
        raise IdempotencyConflict
    return earlier


def _forget_stale_key(agent: Agent, submission: Submission, now: datetime) -> None:
    """A key is kept 24 hours: a call older than that lets go of it (the unique constraint
    would otherwise refuse the new call for ever)."""
    if submission.idempotency_key is not None:
        Call.objects.filter(
            agent=agent,
            idempotency_key=submission.idempotency_key,
            created_at__lt=now - IDEMPOTENCY_WINDOW,
        ).update(idempotency_key=None)


def _evaluate_and_create(agent: Agent, submission: Submission, clock: datetime | None) -> Call:
    policy = policies.policy_for_agent(agent=agent)
    request = capcore.CallRequest(
        tool=submission.tool,
        arguments_text=submission.arguments,
        principal=submission.principal,
        run_id=submission.run_id,
        usage=submission.usage,
    )
    ledgers = ledger_lock(capcore.call_ledgers(request, policy.cap_rules))
    # Read the clock only once the locks are held: a time taken before waiting for them
    # would be older than the entries recorded meanwhile.
    now = clock or timezone.now()
    counters = _counted(agent, policy.budget, submission, now)
    state = capcore.PolicyState(
        now=now,
        mode=agent.mode,
        permission_rules=policy.permission_rules,
        tool_class_pins=policy.tool_class_pins,
        budget=policy.budget,
        counters=counters,
        cap_rules=policy.cap_rules,
        cap_rules_unreadable=policy.cap_rules_unreadable,
        spent={
            key: selectors.ledger_spent(ledger=ledger, window=policy.windows[key.rule], now=now)
            for key, ledger in ledgers.items()
        },
    )
    evaluation = capcore.call_evaluate(request, state)
    if evaluation.error is not None:
        logger.error("policy error on a call by agent %s", agent.pk, exc_info=evaluation.error)
    verdict = evaluation.verdict
    call = Call(
        agent=agent,
        tool=submission.tool,
        arguments=submission.arguments,
        arguments_sha256=hashlib.sha256(submission.arguments.encode()).hexdigest(),
        principal=submission.principal,
        run_id=submission.run_id,
        context=submission.context,
        status=verdict.status.value,
        reasons=[f.as_reason() for f in verdict.reasons],
        gates=list(verdict.gates),
        pending_records=(
            records_to_json(evaluation.records) if verdict.status is capcore.Status.PENDING else []
        ),
        created_at=now,
        updated_at=now,
        expires_at=_deadline(verdict.gates, now)
        if verdict.status is capcore.Status.PENDING
        else None,
        idempotency_key=submission.idempotency_key,
        request_sha256=submission.request_sha256,
    )
    sql.insert([call])
    if verdict.status is capcore.Status.ALLOWED:
        ledger_record(call=call, records=evaluation.records, ledgers=ledgers, now=now)
    sql.insert(
        [
            AuditEntry(
                at=now,
                agent=agent,
                action=f"call {verdict.status.value}",
                object_type="call",
                object_id=str(call.pk),
            )
        ]
    )
    notify_call(call)
    return call


def call_submit(
    *, agent: Agent, submission: Submission, now: datetime | None = None
) -> tuple[Call, bool]:
    """Evaluate and store one call; ``(call, created)``. A replayed Idempotency-Key returns
    the first call (``created`` False); the same key with another body is a conflict."""
    earlier = _replay(agent, submission, now or timezone.now())
    if earlier is not None:
        return earlier, False
    try:
        with write_transaction():
            _forget_stale_key(agent, submission, now or timezone.now())
            call = _evaluate_and_create(agent, submission, now)
    except IntegrityError:
        # A concurrent request with the same key created the call first.
        earlier = _replay(agent, submission, now or timezone.now())
        if earlier is None:
            raise
        return earlier, False
    return call, True
