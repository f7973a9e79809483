"""Server time of the approver's pages over a long history; prints one JSON object.

The database holds --decided final calls spread over the last 100 days and --pending held
ones, written with bulk_create in the shape the services give them: findings, gates,
approvals, ledger entries and audit entries. An approver logs in through the form; then, one
request at a time over loopback, each page is read --warmups times and --requests times more:
the queue, the first history page, a filtered one (status, agent and a start date), the last
history page, a held call's page, and the insights over 90 days twice: as they are read
again and again (its figures are kept per process until the next audited write, so the
warm-ups count them and the timed requests read them kept), then each read just after an
approver approved a held call through the form (not timed), so that every read counts them
afresh. The query plans of the history's reads come along.

Usage: python bench/pages_bench.py [--decided 100000] [--pending 1000] [--requests 30]
       [--database-url URL]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

import capcore
from capcore.caps import digest_key

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import database, percentile, server

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from approvals.models import Agent, Approval, AuditEntry, Call, LedgerEntry
    from approvals.web.history_page import HistoryFilters

    # A call and what the services write along with it.
    Rows = tuple[Call, list[Approval], list[LedgerEntry], list[AuditEntry]]

RULES = (
    "big: pay arg=amount max USD 500.00 -> gate",
    "daily: pay arg=amount sum USD 5000.00 per day by principal -> gate",
    "wire-cap: wire arg=amount.value currency=amount.currency max USD 10000, EUR 9000"
    " -> gate treasury",
    "no-crypto: buy_crypto arg=amount max USD 50.00 -> refuse",
    *(f"other-{i}: tool_{i} arg=amount max USD {i + 1}00.00 -> gate" for i in range(6)),
)
AGENTS = 20
HISTORY_DAYS = 100
FILTER_DAYS = 30  # the filtered page's start date, before today
CHUNK = 5000  # calls per transaction while filling
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
ROWS = re.compile(r'<(?:tr|li) id="call-')
# The issues', for every history page and for the insights.
TARGETS = {"queue_ms": 100, "history_ms": 200, "insights_ms": 100}
MODE_REASON: dict[str, str | None] = {
    "policy": "permission",
    "rule": "mode:prompt",
    "action": "gate",
    "gate": "",
    "message": "mode prompt holds every call for a human",
}

# The final calls' statuses, in shares of 20: 35 % allowed, 40 % approved, 10 % denied, ...
SHARES = {"allowed": 7, "approved": 8, "denied": 2, "refused": 1, "expired": 1, "cancelled": 1}
STATUSES = tuple(status for status, share in SHARES.items() for _ in range(share))


@dataclass(frozen=True, slots=True)
class Filled:
    agent_id: int  # the filtered page's agent
    pending_call: str  # a held payment, for the call page
    to_approve: list[tuple[str, str]]  # held payments at the default gate: id, digest
    counts: dict[str, int]


def _setup_django(database_url: str) -> None:
    os.environ.update(
        {"DJANGO_SETTINGS_MODULE": "config.settings", "DATABASE_URL": database_url, "DEBUG": "0"}
    )
    import django

    django.setup()


def _decimal(minor: int) -> str:
    return capcore.format_amount(minor, 2)


def _usd(minor: int) -> str:
    return f"USD {capcore.format_amount(minor, 2, grouping=True)}"


def _cap_reason(rule: str, gate: str | None, message: str) -> dict[str, str | None]:
    """A cap finding as the services store it (``gate`` None: the rule refuses)."""
    action = "refuse" if gate is None else "gate"
    return {"policy": "cap", "rule": rule, "action": action, "gate": gate, "message": message}


def _audit(
    at: datetime,
    action: str,
    call: Call,
    *,
    agent: Agent | None = None,
    user: User | None = None,
    after: str = "",
) -> AuditEntry:
    from approvals.models import AuditEntry

    return AuditEntry(
        at=at,
        agent=agent,
        user=user,
        action=action,
        object_type="call",
        object_id=str(call.pk),
        after=after,
    )


def _fill(decided: int, pending: int) -> Filled:
    """The rows, in bulk, as the services would write them one call at a time (which takes
    too long for 100,000 calls)."""
    from django.contrib.auth.models import Group, Permission, User
    from django.db import connection, transaction
    from django.utils import timezone

    from approvals.models import Approval, Call, Gate, Ledger, LedgerEntry
    from approvals.services.agents import agent_create_or_update
    from approvals.services.audit import audit_entries_record
    from approvals.services.lifecycle import CANCELLED_COMMENT, EXPIRED_COMMENT
    from approvals.services.rules import cap_rule_save
    from approvals.services.statements import ledger_hours_add

    with transaction.atomic():
        for line in RULES:
            cap_rule_save(line=line)
        treasury = Group.objects.create(name="treasury")
        Gate.objects.filter(name="treasury").update(group=treasury, required_approvals=2)
        decide = Permission.objects.get(codename="decide_call")
        approvers = []
        for name in ("approver", "second"):
            user = User.objects.create_user(name, password="bench-pw")
            user.user_permissions.add(decide)
            user.groups.add(treasury)
            approvers.append(user)
        agents = [
            agent_create_or_update(
                name=f"agent-{k}", principal=f"principal-{k}", mode="prompt" if k == 0 else "allow"
            )
            for k in range(AGENTS)
        ]
        ledgers = {
            agent.pk: Ledger.objects.create(
                rule="daily", currency="USD", key_digest=digest_key(agent.principal)
            )
            for agent in agents
        }
    now = timezone.now()
    step = timedelta(days=HISTORY_DAYS) / max(decided, 1)
    rows = {"approvals": 0, "ledger_entries": 0, "audit_entries": 0}

    def one(i: int, status: str, created: datetime, agent: Agent, tool: str, minor: int) -> Rows:
        """A call and what the services write along with it: decisions, ledger, audit."""
        reasons: list[dict[str, str | None]] = []
        gates: list[str] = []
        records: list[dict[str, str | int]] = []
        if agent.mode == "prompt":
            tool, text = "lookup", f'{{"q": "invoice {i}"}}'
            reasons, gates = [MODE_REASON], [""]
        elif status == "refused":
            tool, text = "buy_crypto", f'{{"amount": {minor // 100}}}'
            message = f"{_usd(minor)} is over the limit of USD 50.00 per call"
            reasons = [_cap_reason("no-crypto", None, message)]
        elif tool == "wire":
            text = f'{{"amount": {{"value": "{_decimal(minor)}", "currency": "USD"}}}}'
            message = f"{_usd(minor)} is over the limit of USD 10,000.00 per call"
            reasons, gates = [_cap_reason("wire-cap", "treasury", message)], ["treasury"]
        else:
            text = f'{{"amount": "{_decimal(minor)}", "payee": "vendor-{i % 97}"}}'
            if status != "allowed":
                message = f"{_usd(minor)} is over the limit of USD 500.00 per call"
                reasons, gates = [_cap_reason("big", "", message)], [""]
            if status == "pending":
                digest = ledgers[agent.pk].key_digest
                records = [
                    {"rule": "daily", "currency": "USD", "key_digest": digest, "minor": minor}
                ]
        final = status not in {"pending", "allowed", "refused"}
        decided_at = created + timedelta(minutes=3) if final else None
        user = approvers[i % 2] if status in {"approved", "denied"} else None
        comment = {
            "denied": "Not this vendor; ask finance first.",
            "expired": EXPIRED_COMMENT,
            "cancelled": CANCELLED_COMMENT,
        }.get(status, "")
        row = Call(
            agent=agent,
            tool=tool,
            arguments=text,
            arguments_sha256=hashlib.sha256(text.encode()).hexdigest(),
            principal=agent.principal,
            context="Paying the supplier invoices due this week.",
            status=status,
            reasons=reasons,
            gates=gates,
            pending_records=records,
            created_at=created,
            updated_at=decided_at or created,
            expires_at=now + timedelta(days=1) if status == "pending" else None,
            decided_at=decided_at,
            decided_by=user,
            decision_comment=comment,
        )
        first = "pending" if gates else status
        audit = [_audit(created, f"call {first}", row, agent=agent)]
        approvals = []
        if user is not None and decided_at is not None:
            approve = status == "approved"
            approvals.append(Approval(call=row, user=user, approve=approve, created_at=decided_at))
            audit.append(_audit(decided_at, f"call {status}", row, user=user, after=comment))
        elif decided_at is not None:
            by = agent if status == "cancelled" else None
            audit.append(_audit(decided_at, f"call {status}", row, agent=by))
        elif status == "pending" and tool == "wire" and i % 2:  # one of two at the treasury
            approvals.append(
                Approval(call=row, user=approvers[0], approve=True, created_at=created)
            )
        entries = []
        if status in {"allowed", "approved"} and tool == "pay":
            recorded = decided_at or created
            entries.append(
                LedgerEntry(ledger=ledgers[agent.pk], call=row, minor=minor, recorded_at=recorded)
            )
        return row, approvals, entries, audit

    def write(batch: list[Rows]) -> None:
        with transaction.atomic():
            Call.objects.bulk_create([row for row, *_ in batch])
            Approval.objects.bulk_create([a for _, approvals, _, _ in batch for a in approvals])
            written = [e for _, _, entries, _ in batch for e in entries]
            LedgerEntry.objects.bulk_create(written)
            ledger_hours_add((e.ledger_id, e.recorded_at, e.minor) for e in written)
            audit_entries_record([a for *_, audit in batch for a in audit])  # chained
        rows["approvals"] += sum(len(approvals) for _, approvals, _, _ in batch)
        rows["ledger_entries"] += sum(len(entries) for _, _, entries, _ in batch)
        rows["audit_entries"] += sum(len(audit) for *_, audit in batch)

    batch: list[Rows] = []
    for i in range(decided):
        status = STATUSES[i % len(STATUSES)]
        # A block of every status per agent in turn; the prompting agent (0) decides nothing.
        agent = agents[1 + i // len(STATUSES) % (AGENTS - 1)]
        tool = "wire" if status == "approved" and i % 4 == 0 else "pay"
        minor = 1000 + i % 40000 if status == "allowed" else 60000 + i % 400000
        minor += 1_000_000 if tool == "wire" else 0
        batch.append(one(i, status, now - step * (i + 1), agent, tool, minor))
        if len(batch) == CHUNK:
            write(batch)
            batch = []
    for j in range(pending):
        tool = "wire" if j % 5 == 0 else "pay"
        minor = 60000 + j * 137 % 400000 + (1_000_000 if tool == "wire" else 0)
        created = now - timedelta(hours=1) * (j + 1) / max(pending, 1)
        batch.append(one(decided + j, "pending", created, agents[j % AGENTS], tool, minor))
    write(batch)
    if connection.vendor == "postgresql":
        # What autovacuum does soon after such a load in production: the planner's statistics.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    held = [
        (str(pk), digest)
        for pk, digest in Call.objects.filter(status="pending", tool="pay")
        .order_by("created_at")
        .values_list("pk", "arguments_sha256")
    ]
    assert held
    counts = {"decided": decided, "pending": pending, "agents": AGENTS, **rows}
    return Filled(agents[3].pk, held[-1][0], held[:-1], counts)


def _plans(pages: dict[str, tuple[HistoryFilters, int]]) -> dict[str, list[str]]:
    """The plans of the queries a history page runs (its count, then its rows), captured as
    the view's paginator runs them: {name: (filters, page number)}."""
    from django.core.paginator import Paginator
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from approvals.web.history_page import history_calls
    from approvals.web.views import HISTORY_PAGE_SIZE

    explain = "EXPLAIN" if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN"
    plans: dict[str, list[str]] = {}
    for name, (filters, number) in pages.items():
        with CaptureQueriesContext(connection) as captured:
            page = Paginator(history_calls(filters=filters), HISTORY_PAGE_SIZE).get_page(number)
            list(page.object_list)
        plans[name] = []
        with connection.cursor() as cursor:
            for query in captured.captured_queries:
                cursor.execute(f"{explain} {query['sql']}")
                plans[name].append(" / ".join(str(row[-1]).strip() for row in cursor.fetchall()))
    return plans


def _login(http: httpx.Client) -> None:
    page = http.get("/accounts/login/")
    token = CSRF_INPUT.search(page.text)
    assert token is not None
    answer = http.post(
        "/accounts/login/",
        data={"username": "approver", "password": "bench-pw", "csrfmiddlewaretoken": token[1]},
    )
    assert answer.status_code == 302, answer.status_code


def _measure(http: httpx.Client, path: str, warmups: int, requests: int) -> dict[str, Any]:
    """Wall time over loopback, one request at a time; ``rows_shown`` counts the list rows of
    the last answer (a call page has none)."""
    for _ in range(warmups):
        http.get(path).raise_for_status()
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        response = http.get(path)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
    return {
        "path": path,
        "rows_shown": len(ROWS.findall(response.text)),
        "p50_ms": round(percentile(times, 0.50) * 1e3, 2),
        "p99_ms": round(percentile(times, 0.99) * 1e3, 2),
    }


def _measure_after_decisions(
    http: httpx.Client, path: str, to_approve: list[tuple[str, str]], warmups: int, requests: int
) -> dict[str, Any]:
    """As ``_measure``, each request just after an approval through the form (not timed): an
    audited write, so that the page counts its figures afresh."""
    if len(to_approve) < warmups + requests:
        raise SystemExit(f"{warmups + requests} held payments needed, {len(to_approve)} held")
    calls = iter(to_approve)
    times = []
    for i in range(warmups + requests):
        call_id, digest = next(calls)
        approved = http.post(
            f"/calls/{call_id}/approve",
            data={
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
                "arguments_sha256": digest,
                "comment": "",
            },
            headers={"Referer": f"{http.base_url}calls/{call_id}/"},
        )
        assert approved.status_code == 303, approved.status_code
        started = time.perf_counter()
        response = http.get(path)
        if i >= warmups:
            times.append(time.perf_counter() - started)
        response.raise_for_status()
    return {
        "path": path,
        "after": "an approval each",
        "p50_ms": round(percentile(times, 0.50) * 1e3, 2),
        "p99_ms": round(percentile(times, 0.99) * 1e3, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--decided", type=int, default=100_000, help="final calls")
    parser.add_argument("--pending", type=int, default=1000, help="held calls")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per page")
    parser.add_argument("--warmups", type=int, default=3, help="untimed requests per page first")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    options = parser.parse_args()
    with database(options.database_url) as database_url:
        _setup_django(database_url)
        from django.db import connections

        from approvals.models import Agent
        from approvals.web.history_page import HistoryFilters
        from approvals.web.views import HISTORY_PAGE_SIZE

        began = time.perf_counter()
        filled = _fill(options.decided, options.pending)
        fill_seconds = time.perf_counter() - began
        since = datetime.now(UTC).date() - timedelta(days=FILTER_DAYS)
        last_page = max(1, math.ceil(options.decided / HISTORY_PAGE_SIZE))
        agent = Agent.objects.get(pk=filled.agent_id)
        plans = _plans(
            {
                "history_first": (HistoryFilters(), 1),
                "history_filtered": (HistoryFilters(status="denied", agent=agent, since=since), 1),
                "history_last": (HistoryFilters(), last_page),
            }
        )
        connections.close_all()  # the server is the only reader from here on
        paths = {
            "queue": "/",
            "history_first": "/history/",
            "history_filtered": f"/history/?status=denied&agent={filled.agent_id}&since={since}",
            "history_last": f"/history/?page={last_page}",
            "call": f"/calls/{filled.pending_call}/",
            "insights": "/insights/?days=90",
        }
        with server(database_url) as target, httpx.Client(base_url=target.url, timeout=60) as http:
            _login(http)
            pages = {
                name: _measure(http, path, options.warmups, options.requests)
                for name, path in paths.items()
            }
            pages["insights_afresh"] = _measure_after_decisions(
                http, paths["insights"], filled.to_approve, options.warmups, options.requests
            )
    result = {
        "benchmark": "pages",
        "database": "postgresql" if options.database_url else "sqlite",
        "rows": filled.counts,
        "fill_s": round(fill_seconds, 1),
        "requests": options.requests,
        "pages": pages,
        "plans": plans,
        "targets": TARGETS,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
