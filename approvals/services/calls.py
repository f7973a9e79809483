"""Writes on calls. Each service is one transaction; notifications go out after commit."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

import capcore
from approvals.errors import Conflict, NotFound
from approvals.models import (
    Agent,
    AuditEntry,
    Call,
    Ledger,
    LedgerEntry,
    RunCost,
    RunCounter,
)
from approvals.ops import metrics
from approvals.realtime.pushes import notify_call
from approvals.receipts.issue import receipt_issue
from approvals.selectors.calls import call_findings
from approvals.selectors.gates import hold_seconds
from approvals.selectors.ledgers import (
    Reserved,
    ledger_identity,
    ledgers_by_identity,
    ledgers_reserved,
    ledgers_spent,
)
from approvals.selectors.policies import (
    AgentPolicy,
    policy_at_stamp,
    policy_for_agent,
    policy_with_cap_rules,
)
from approvals.services.audit import audit_deferred, audit_record
from approvals.services.ledgers import ledger_reservations_release, ledger_reserve
from approvals.services.statements import (
    ledger_hours_add,
    policy_stamp_read,
    run_cost_add,
    run_counter_count,
)
from capcore.caps import assess_caps
from config.runtime.sqlite_writers import write_transaction
from notifications.outbox import notifications_enqueue

logger = logging.getLogger(__name__)

IDEMPOTENCY_WINDOW = timedelta(hours=24)
LEDGER_VANISHED = "a ledger was deleted while a call was being checked against it"


@dataclass(frozen=True, slots=True)
class Submission:
    """A call as an agent submits it, checked (``approvals.api.submissions``);
    ``request_sha256`` is the digest of the raw body."""

    tool: str
    arguments: str
    principal: str
    run_id: str = ""
    context: str = ""
    usage: capcore.Usage = field(default_factory=capcore.Usage)
    idempotency_key: str | None = None
    request_sha256: str = ""


class CallNotFound(NotFound):
    """No such call."""


class IdempotencyConflict(Conflict):
    """The same Idempotency-Key came with a different body."""


def call_lock(*, call_id: uuid.UUID) -> Call | None:
    """The call, its row locked until the transaction ends (on SQLite the write transaction
    holds the whole database already); None when there is none."""
    return Call.objects.select_for_update().filter(pk=call_id).first()


def ledger_lock(keys: tuple[capcore.LedgerKey, ...]) -> dict[capcore.LedgerKey, Ledger]:
    """Create the ledgers' rows if missing, then lock them in sorted order.

    On SQLite the IMMEDIATE transaction already holds the database's write lock; on
    PostgreSQL the row locks serialise concurrent calls per ledger, across processes, and the
    fixed order rules out deadlocks. Creating first, before holding any lock, keeps it so: a
    transaction that waits on another's new row holds nothing that one could need.
    """
    if not keys:
        return {}
    wanted = {ledger_identity(key): key for key in keys}
    identities = sorted(wanted)
    Ledger.objects.bulk_create(
        [
            Ledger(rule=rule, currency=currency, key_digest=digest)
            for rule, currency, digest in identities
        ],
        ignore_conflicts=True,
    )
    # Locked as the sort emits them: always in this order, so two transactions never wait
    # on each other's rows in a cycle.
    locked = ledgers_by_identity(identities=identities).select_for_update()
    ledgers = {
        wanted[(ledger.rule, ledger.currency, ledger.key_digest)]: ledger for ledger in locked
    }
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
    counter = run_counter_count(
        agent_id=agent.pk, scope=scope.value, key=key, tokens=usage.tokens, now=now
    )
    cost = 0
    if budget is not None and budget.cost_currency is not None:
        costs = RunCost.objects.filter(counter_id=counter.pk, currency=budget.cost_currency)
        cost = costs.values_list("amount", flat=True).first() or 0
    if usage.cost_currency is not None:
        run_cost_add(counter_id=counter.pk, currency=usage.cost_currency, amount=usage.cost)
    calls_before = counter.calls - 1
    return capcore.RunCounters(
        calls_before,
        counter.tokens - usage.tokens,
        cost,
        counter.started_at if calls_before else None,
    )


def ledger_record(
    *,
    call: Call,
    records: Sequence[capcore.LedgerRecord],
    ledgers: dict[capcore.LedgerKey, Ledger],
    now: datetime,
) -> None:
    """Add a call's amounts to its ledgers, and to their totals of this hour (the caller
    holds their locks)."""
    entries = [
        LedgerEntry(ledger=ledgers[record.ledger], call=call, minor=record.minor, recorded_at=now)
        for record in records
    ]
    LedgerEntry.objects.bulk_create(entries)
    ledger_hours_add((entry.ledger_id, now, entry.minor) for entry in entries)


def cap_rules_held_for(findings: Iterable[capcore.Finding]) -> frozenset[str]:
    """The casefolded names of the cap rules among a call's findings: the rules it is held
    (or refused) for."""
    return frozenset(
        f.rule.casefold() for f in findings if f.policy is capcore.Policy.CAP and f.rule
    )


def call_end(
    *,
    call: Call,
    status: Call.Status,
    comment: str,
    now: datetime,
    stamp: int | None,
    user: User | None = None,
) -> None:
    """Make a call final and release what it reserves (the caller holds its row's lock, has
    checked it is pending, and has recorded its amounts and set its receipt if it is
    approved). ``stamp``: the policy stamp the caller read in this transaction, after the
    lock, for the notifications written."""
    ledger_reservations_release(call_id=call.pk)
    call.status = status
    call.decided_at = now
    call.decided_by = user
    call.decision_comment = comment
    call.updated_at = now
    fields = ["status", "decided_at", "decided_by", "decision_comment", "updated_at"]
    call.save(update_fields=[*fields, "receipt"] if call.receipt else fields)
    metrics.call_decided(call)
    notifications_enqueue(call=call, now=now, stamp=stamp)


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


def _key_holder(agent: Agent, submission: Submission) -> Call | None:
    """The call of this agent that holds the submission's idempotency key (at most one
    does: a unique constraint), however old. Nearly always there is none."""
    if submission.idempotency_key is None:
        return None
    return Call.objects.filter(agent=agent, idempotency_key=submission.idempotency_key).first()


def _replay(holder: Call | None, submission: Submission, now: datetime) -> Call | None:
    """The call that holds the submission's key, if it was made within the window; the same
    key with another body is a conflict."""
    if holder is None or holder.created_at < now - IDEMPOTENCY_WINDOW:
        return None
    if holder.request_sha256 != submission.request_sha256:
        raise IdempotencyConflict
    return holder


def _forget_stale_key(agent: Agent, submission: Submission, now: datetime) -> None:
    """A key is kept 24 hours: a call older than that lets go of it (the unique constraint
    would otherwise refuse the new call for ever)."""
    Call.objects.filter(
        agent=agent,
        idempotency_key=submission.idempotency_key,
        created_at__lt=now - IDEMPOTENCY_WINDOW,
    ).update(idempotency_key=None)


def _spent(
    ledgers: dict[capcore.LedgerKey, Ledger],
    windows: dict[str, capcore.Window | None],
    now: datetime,
    *,
    recheck_of: uuid.UUID | None = None,
) -> dict[capcore.LedgerKey, int]:
    """Each ledger's recorded total within its window plus what held calls reserve there:
    all of it for a new call; for a held call checked again (``recheck_of``), what the
    others reserve but the calls held for the ledger's rule, which only that rule's gate
    can record (docs/rules.md, "Held calls reserve")."""
    spent = ledgers_spent(
        windows={ledger.pk: windows[key.rule] for key, ledger in ledgers.items()}, now=now
    )
    reserved = ledgers_reserved(
        ledger_ids=[ledger.pk for ledger in ledgers.values()], leave_out=recheck_of
    )
    totals = {}
    for key, ledger in ledgers.items():
        held = reserved.get(ledger.pk, Reserved())
        totals[key] = spent[ledger.pk] + (held.total if recheck_of is None else held.rechecked)
    return totals


def _evaluation(
    agent: Agent,
    policy: AgentPolicy,
    request: capcore.CallRequest,
    counters: capcore.RunCounters,
    spent: dict[capcore.LedgerKey, int],
    now: datetime,
) -> capcore.Evaluation:
    """Every policy on ``request``, with the run counters as they stood before it and the
    spent totals of its locked ledgers; a policy error is logged here."""
    state = capcore.PolicyState(
        now=now,
        mode=capcore.Mode.parse(agent.mode),
        permission_rules=policy.permission_rules,
        tool_class_pins=policy.tool_class_pins,
        budget=policy.budget,
        counters=counters,
        cap_rules=policy.every_cap_rule,
        cap_rules_unreadable=policy.cap_rules_unreadable,
        spent=spent,
    )
    evaluation = capcore.evaluate_call(request, state)
    if evaluation.error is not None:
        logger.error("policy error on a call by agent %s", agent.pk, exc_info=evaluation.error)
    _shadow_error_log(evaluation, agent)
    return evaluation


def _shadow_error_log(evaluation: capcore.Evaluation, agent: Agent) -> None:
    if evaluation.shadow_error is not None:
        logger.error(
            "a shadow cap rule failed on a call by agent %s: left out",
            agent.pk,
            exc_info=evaluation.shadow_error,
        )


def with_shadow_records(evaluation: capcore.Evaluation) -> capcore.Evaluation:
    """The evaluation with its shadow rules' amounts among its ``records``: they go into
    their own ledgers exactly when and as the enforced rules' amounts go into theirs
    (recorded if the call goes ahead, reserved while it is held)."""
    if not evaluation.shadow_records:
        return evaluation
    return dataclasses.replace(
        evaluation, records=evaluation.records + evaluation.shadow_records, shadow_records=()
    )


def shadow_to_json(evaluation: capcore.Evaluation) -> list[dict[str, str | None]]:
    """The reasons the shadow rules would have given, as ``Call.shadow`` keeps them."""
    return [finding.as_reason() for finding in evaluation.shadow]


def _counter_read(
    agent: Agent, budget: capcore.Budget | None, run_id: str, now: datetime
) -> tuple[RunCounter | None, int]:
    """The counter a call in run ``run_id`` is counted in now (its run's, or the day's) and
    its cost in the budget's currency, read without counting anything; None when there is
    none yet."""
    scope = budget.scope if budget is not None else capcore.BudgetScope.RUN
    key = run_id if scope is capcore.BudgetScope.RUN else now.date().isoformat()
    counter = RunCounter.objects.filter(agent=agent, scope=scope.value, key=key).first()
    if counter is None:
        return None, 0
    cost = 0
    if budget is not None and budget.cost_currency is not None:
        costs = RunCost.objects.filter(counter=counter, currency=budget.cost_currency)
        cost = costs.values_list("amount", flat=True).first() or 0
    return counter, cost


def _counters_standing(
    agent: Agent, budget: capcore.Budget | None, call: Call, now: datetime
) -> capcore.RunCounters:
    """The counters a new submission in ``call``'s run would see now, read without counting
    anything, less ``call`` itself where they count it: it is the call being evaluated
    again, counted (with its usage) once, when it was submitted."""
    counter, cost = _counter_read(agent, budget, call.run_id, now)
    if counter is None:
        return capcore.RunCounters()
    run_scoped = budget is None or budget.scope is capcore.BudgetScope.RUN
    counted_here = run_scoped or call.created_at.date() == now.date()
    calls_before = max(counter.calls - counted_here, 0)
    return capcore.RunCounters(
        calls_before, counter.tokens, cost, counter.started_at if calls_before else None
    )


def call_evaluate_again(
    *, call: Call, arguments: str, clock: datetime | None = None
) -> tuple[capcore.Evaluation, dict[capcore.LedgerKey, Ledger], datetime]:
    """``call`` with other ``arguments`` (an approver's edit), evaluated by every policy as
    a new submission of the same agent, principal, run and tool would be now, except that
    the call is not counted twice: its own count and usage are in the run counters already
    (no usage is added), and its sums are checked as a held call's are when it is approved
    (its own reservation left out; ``_spent``). Runs in the caller's transaction; the
    ledgers the edited call touches are locked and returned for recording, with the time
    read once they were."""
    agent = call.agent
    policy = policy_for_agent(agent=agent)
    request = capcore.CallRequest(
        tool=call.tool, arguments_text=arguments, principal=call.principal, run_id=call.run_id
    )
    ledgers = ledger_lock(capcore.ledgers_of_call(request, policy.every_cap_rule))
    now = clock or timezone.now()
    counters = _counters_standing(agent, policy.budget, call, now)
    spent = _spent(ledgers, policy.windows, now, recheck_of=call.pk)
    evaluation = _evaluation(agent, policy, request, counters, spent, now)
    # What the shadow rules say of the edited call (a refused edit rolls this back with it).
    call.shadow = shadow_to_json(evaluation)
    call.save(update_fields=["shadow"])
    return with_shadow_records(evaluation), ledgers, now


def call_sums_recheck(
    *, call: Call, now: datetime, stamp: int | None
) -> tuple[capcore.Evaluation, dict[capcore.LedgerKey, Ledger]]:
    """A held call's ``sum`` rules as they are now, checked again under its ledgers' locks
    once its quorum is met (``capcore.recheck_sums``); the ledgers are returned locked, for
    recording or reserving. When nothing is newly over, the evaluation's ``caps`` are what
    every cap rule reads of the call, for its receipt. Runs in the caller's transaction, which
    read the policy stamp (``stamp``) after it locked the call."""
    policy = policy_at_stamp(agent=call.agent, stamp=stamp)
    request = capcore.CallRequest(
        tool=call.tool, arguments_text=call.arguments, principal=call.principal, run_id=call.run_id
    )
    ledgers = ledger_lock(capcore.ledgers_of_call(request, policy.every_cap_rule))
    state = capcore.PolicyState(
        now=now,
        cap_rules=policy.every_cap_rule,
        cap_rules_unreadable=policy.cap_rules_unreadable,
        spent=_spent(ledgers, policy.windows, now, recheck_of=call.pk),
    )
    held_for = cap_rules_held_for(call_findings(call))
    evaluation = capcore.recheck_sums(request, state, held_for=held_for)
    if evaluation.error is not None:
        logger.error("policy error re-checking call %s", call.pk, exc_info=evaluation.error)
    _shadow_error_log(evaluation, call.agent)
    evaluation = with_shadow_records(evaluation)
    if evaluation.verdict.status is capcore.Status.ALLOWED:
        # To be approved now: what every cap rule reads of it, not the sums alone, for its
        # receipt (the re-check read these arguments already, so they parse).
        arguments = capcore.parse_arguments(call.arguments)
        every_cap = assess_caps(
            policy.cap_rules, tool=call.tool, arguments=arguments, principal=call.principal
        )
        evaluation = dataclasses.replace(evaluation, caps=every_cap)
    return evaluation, ledgers


def _request_of(submission: Submission) -> capcore.CallRequest:
    return capcore.CallRequest(
        tool=submission.tool,
        arguments_text=submission.arguments,
        principal=submission.principal,
        run_id=submission.run_id,
        usage=submission.usage,
    )


@contextmanager
def _rolled_back() -> Iterator[None]:
    """A transaction rolled back whatever happens in it, so that a read can never leave a
    row behind; on SQLite, outside a transaction, none: there every transaction takes the
    write lock at its start (``IMMEDIATE``), which a read has no reason to wait for or hold."""
    if connection.vendor == "sqlite" and not connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        try:
            yield
        finally:
            transaction.set_rollback(True)


def call_evaluate_only(
    *,
    agent: Agent,
    submission: Submission,
    now: datetime | None = None,
    cap_rules: Sequence[capcore.Rule] | None = None,
) -> capcore.Evaluation:
    """What ``call_submit`` would decide of ``submission`` now — the same policy, mode, run
    counters and ledger totals (recorded plus reserved) — recording nothing: the call is not
    counted, no ledger is created or locked, and its idempotency key is not looked at
    (nothing is stored that a replay could return). ``cap_rules``, when given, stand in for
    the stored cap rules (a draft in the Rules lab); everything else is as configured."""
    with _rolled_back():
        stamp = policy_stamp_read()
        policy = policy_at_stamp(agent=agent, stamp=stamp)
        if cap_rules is not None:
            policy = policy_with_cap_rules(policy=policy, rules=cap_rules)
        request = _request_of(submission)
        keys = capcore.ledgers_of_call(request, policy.every_cap_rule)
        wanted = {ledger_identity(key): key for key in keys}
        found = ledgers_by_identity(identities=sorted(wanted))
        ledgers = {
            wanted[(ledger.rule, ledger.currency, ledger.key_digest)]: ledger for ledger in found
        }
        now = now or timezone.now()
        counter, cost = _counter_read(agent, policy.budget, submission.run_id, now)
        counters = capcore.RunCounters()
        if counter is not None:  # as ``_counted`` reads them, before this call's count
            started_at = counter.started_at if counter.calls else None
            counters = capcore.RunCounters(counter.calls, counter.tokens, cost, started_at)
        spent = _spent(ledgers, policy.windows, now)
        # A ledger no call has touched yet holds nothing: what its first call finds in it.
        spent = {key: spent.get(key, 0) for key in keys}
        return _evaluation(agent, policy, request, counters, spent, now)


def _evaluate_and_create(agent: Agent, submission: Submission, clock: datetime | None) -> Call:
    # First: whatever is read after it is at least this new (the policy, the channels).
    stamp = policy_stamp_read()
    policy = policy_at_stamp(agent=agent, stamp=stamp)
    request = _request_of(submission)
    ledgers = ledger_lock(capcore.ledgers_of_call(request, policy.every_cap_rule))
    # Read the clock only once the locks are held: a time taken before waiting for them
    # would be older than the entries recorded meanwhile.
    now = clock or timezone.now()
    counters = _counted(agent, policy.budget, submission, now)
    spent = _spent(ledgers, policy.windows, now)
    evaluation = _evaluation(agent, policy, request, counters, spent, now)
    verdict = evaluation.verdict
    shadow = shadow_to_json(evaluation)
    evaluation = with_shadow_records(evaluation)
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
        shadow=shadow,
        pending_records=(
            records_to_json(evaluation.records) if verdict.status is capcore.Status.PENDING else []
        ),
        created_at=now,
        updated_at=now,
        expires_at=now + timedelta(seconds=hold_seconds(gates=verdict.gates))
        if verdict.status is capcore.Status.PENDING
        else None,
        idempotency_key=submission.idempotency_key,
        request_sha256=submission.request_sha256,
    )
    if verdict.status is capcore.Status.ALLOWED:
        receipt_issue(
            call=call,
            status=Call.Status.ALLOWED,
            approvals=(),
            assessments=evaluation.caps,
            now=now,
        )
    call.save(force_insert=True)
    if verdict.status is capcore.Status.ALLOWED:
        ledger_record(call=call, records=evaluation.records, ledgers=ledgers, now=now)
    elif verdict.status is capcore.Status.PENDING:
        held_for = cap_rules_held_for(verdict.reasons)
        ledger_reserve(
            call=call, records=evaluation.records, ledgers=ledgers, held_for=held_for, now=now
        )
    audit_record(action=AuditEntry.Action.call(verdict.status.value), obj=call, agent=agent, at=now)
    metrics.call_submitted(call)
    if call.status == Call.Status.PENDING:
        notifications_enqueue(call=call, now=now, stamp=stamp, approvals=())
    notify_call(call, approvals=())  # a new call has none to read
    return call


def call_submit(
    *, agent: Agent, submission: Submission, now: datetime | None = None
) -> tuple[Call, bool]:
    """Evaluate and store one call; ``(call, created)``. A replayed Idempotency-Key returns
    the first call (``created`` False); the same key with another body is a conflict."""
    holder = _key_holder(agent, submission)
    earlier = _replay(holder, submission, now or timezone.now())
    if earlier is not None:
        return earlier, False
    try:
        # The audit entry is written last: the chain's head is locked until the commit.
        with write_transaction(), audit_deferred():
            if holder is not None:  # a call older than the window holds the key
                _forget_stale_key(agent, submission, now or timezone.now())
            call = _evaluate_and_create(agent, submission, now)
    except IntegrityError:
        # A concurrent request with the same key created the call first.
        earlier = _replay(_key_holder(agent, submission), submission, now or timezone.now())
        if earlier is None:
            raise
        return earlier, False
    return call, True
