"""An allowed submission against a `sum` cap whose window already holds many entries: the
server time of one `call_submit` with --entries already recorded in its ledger's window,
against the same with none, side by side in one process; prints one JSON object.

Two rules on one tool, each with a ledger of its own: `per 24h` (a rolling window, which holds
every entry, those of the hour it starts in among them) and `per day` (a calendar window, from
the UTC midnight, which holds the entries since then). The entries (and their calls) are
written with bulk_create, spread evenly over the last 24 hours, and each ledger's hours are
filled from them as the migration that brought them does. Each size's submissions run in the service
directly (no HTTP), one at a time, --submissions after 20 warm-ups; the figure is the
median wall time and the CPU time per submission.

Usage: python bench/ledger_bench.py [--entries 100000] [--submissions 300]
       [--database-url URL]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This tree's code, not the one installed in the environment: trees are compared in turn.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _server import database

RULES = (
    "day: pay arg=amount sum USD 900000000000.00 per day -> gate",
    "rolling: pay arg=amount sum USD 900000000000.00 per 24h -> gate",
)
SPREAD = timedelta(hours=24) - timedelta(minutes=1)
WARM_UP = 20
CHUNK = 5000


def _setup_django(database_url: str) -> None:
    os.environ.update(
        {"DJANGO_SETTINGS_MODULE": "config.settings", "DATABASE_URL": database_url, "DEBUG": "0"}
    )
    import django

    django.setup()


def _fill(entries: int) -> None:
    """``entries`` allowed calls already recorded in both ledgers."""
    from django.apps import apps
    from django.db import transaction
    from django.utils import timezone

    from approvals.models import Agent, Call, Ledger, LedgerEntry

    agent = Agent.objects.get(name="bench")
    ledgers = list(Ledger.objects.all())
    now = timezone.now()
    for start in range(0, entries, CHUNK):
        with transaction.atomic():
            calls = [
                Call(
                    id=uuid.uuid4(),
                    agent=agent,
                    tool="pay",
                    arguments='{"amount": "1.00"}',
                    arguments_sha256="0" * 64,
                    principal="bench-user",
                    status=Call.Status.ALLOWED,
                    created_at=now - SPREAD * (i + 1) / entries,
                    updated_at=now,
                )
                for i in range(start, min(entries, start + CHUNK))
            ]
            Call.objects.bulk_create(calls)
            LedgerEntry.objects.bulk_create(
                LedgerEntry(ledger=ledger, call=call, minor=100, recorded_at=call.created_at)
                for call in calls
                for ledger in ledgers
            )
    try:
        migration = importlib.import_module("approvals.migrations.0013_ledger_hours")
    except ModuleNotFoundError:  # a tree from before the hours, run for comparison
        return
    apps.get_model("approvals", "LedgerHour").objects.all().delete()
    migration.hours_from_entries(apps, None)


def _submissions(count: int) -> dict[str, float]:
    from approvals.models import Agent
    from approvals.services.calls import Submission, call_submit

    agent = Agent.objects.get(name="bench")
    submission = Submission(tool="pay", arguments='{"amount": "1.00"}', principal="bench-user")
    walls: list[float] = []
    cpu_before = time.process_time()
    for i in range(WARM_UP + count):
        if i == WARM_UP:
            cpu_before = time.process_time()
        began = time.perf_counter()
        call, _ = call_submit(agent=agent, submission=submission)
        walls.append(time.perf_counter() - began)
        assert call.status == "allowed", call.status
    cpu = time.process_time() - cpu_before
    return {
        "p50_ms": statistics.median(walls[WARM_UP:]) * 1e3,
        "cpu_ms": cpu / count * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--submissions", type=int, default=300)
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    options = parser.parse_args()
    with database(options.database_url) as database_url:
        _setup_django(database_url)
        import hashlib

        from approvals.models import Agent, AgentToken
        from approvals.services.rules import cap_rule_save

        agent = Agent.objects.create(
            name="bench", principal="bench-user", mode="danger_full_access"
        )
        AgentToken.objects.create(
            agent=agent, digest=hashlib.sha256(b"cs_bench").hexdigest(), prefix="cs_bench"
        )
        for line in RULES:
            cap_rule_save(line=line)
        empty = _submissions(options.submissions)
        _fill(options.entries)
        full = _submissions(options.submissions)
    print(
        json.dumps(
            {
                "benchmark": "ledger",
                "database": "postgresql" if options.database_url else "sqlite",
                "entries": options.entries,
                "none": empty,
                "full": full,
                "cpu_ratio": full["cpu_ms"] / empty["cpu_ms"],
            }
        )
    )


if __name__ == "__main__":
    main()
