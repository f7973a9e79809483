"""`manage.py backtest` over a large history: the wall time of one run of the command (a
process of its own, Django's start included) replaying --calls recorded calls against a
draft of 20 rules; prints one JSON object on its last line.

The history is written with bulk_create, spread evenly over the 30 days before now: three
agents, five principals, forty payees, the tools `pay`, `wire` and `refund`; most calls
allowed, some refused, some held and then approved, denied, expired or still pending, and a
few edited before their approval (replayed with what was submitted). The draft mixes `max`
and `sum` rules, every kind of window and key. The command runs --runs times; the figure is
the median, with the slowest beside it, and the command's CPU time.

Usage: python bench/backtest_bench.py [--calls 100000] [--runs 3] [--database-url URL]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This tree's code, not the one installed in the environment: trees are compared in turn.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _server import database, manage

# Limits sized for the default 100,000 calls over 30 days: most calls fit, the max rules
# and the busiest sums hold some.
DRAFT = (
    "big: pay arg=amount max USD 500.00 -> gate",
    "huge: pay arg=amount max USD 5000.00 -> refuse",
    "wire-big: wire arg=amount max USD 2000.00 -> gate finance",
    "wire-huge: wire arg=amount max USD 20000.00 -> refuse",
    "refund-big: refund arg=amount max USD 300.00 -> gate",
    "daily: pay arg=amount sum USD 100000.00 per day by principal -> gate",
    "daily-wire: wire arg=amount sum USD 40000.00 per day by principal -> gate finance",
    "rolling: pay arg=amount sum USD 120000.00 per 24h by principal -> gate",
    "rolling-wire: wire arg=amount sum USD 200000.00 per 24h -> gate finance",
    "weekly: pay, wire arg=amount sum USD 700000.00 per week by principal -> gate",
    "monthly: pay, wire arg=amount sum USD 20000000.00 per month -> gate finance",
    "payee-day: pay arg=amount sum USD 15000.00 per day by arg=payee.email lower trim -> gate",
    "payee-week: pay arg=amount sum USD 80000.00 per week by arg=payee.email lower -> gate",
    "payee-wire: wire arg=amount sum USD 40000.00 per 7d by arg=payee.email -> gate finance",
    "refunds-day: refund arg=amount sum USD 200000.00 per day -> gate",
    "refunds-principal: refund arg=amount sum USD 40000.00 per 24h by principal -> gate",
    "all-time: pay arg=amount sum USD 900000000.00 -> refuse",
    "all-wire: wire arg=amount sum USD 900000000.00 by principal -> refuse",
    "tiny-refund: refund arg=amount max USD 1000.00 -> refuse",
    "hourly: pay arg=amount sum USD 12000.00 per 1h by principal -> gate",
)
AMOUNTS = (5, 12, 20, 35, 50, 75, 120, 250, 480, 700)
SPREAD = timedelta(days=30)
CHUNK = 5000
# Of every 100 calls: allowed, refused, then held and approved, denied, expired, pending.
OUTCOMES = (
    ["allowed"] * 80 + ["refused"] * 3 + ["approved"] * 10 + ["denied"] * 3 + ["expired"] * 3
) + ["pending"]


def _setup_django(database_url: str) -> None:
    os.environ.update(
        {"DJANGO_SETTINGS_MODULE": "config.settings", "DATABASE_URL": database_url, "DEBUG": "0"}
    )
    import django

    django.setup()


def _fill(count: int) -> None:
    """``count`` recorded calls, oldest first, written in chunks."""
    from django.db import transaction
    from django.utils import timezone

    from approvals.models import Agent, Call

    chance = random.Random(7)
    agents = [
        Agent.objects.create(name=f"bench-{n}", principal="p0", mode="danger_full_access")
        for n in range(3)
    ]
    now = timezone.now()
    start = now - SPREAD
    for first in range(0, count, CHUNK):
        calls = []
        for i in range(first, min(count, first + CHUNK)):
            created = start + SPREAD * i / count
            tool = chance.choice(["pay", "pay", "pay", "wire", "refund"])
            amount = f"{chance.choice(AMOUNTS)}.{i % 100:02d}"
            arguments = json.dumps(
                {"amount": amount, "payee": {"email": f"payee{chance.randrange(40)}@example.com"}}
            )
            outcome = chance.choice(OUTCOMES)
            held = outcome not in ("allowed", "refused")
            ended = created + timedelta(minutes=chance.choice([1, 5, 30, 55]))
            edited = outcome == "approved" and i % 10 == 0
            calls.append(
                Call(
                    id=uuid.UUID(int=chance.getrandbits(128)),
                    agent=agents[i % 3],
                    tool=tool,
                    arguments=json.dumps({"amount": "1.00"}) if edited else arguments,
                    arguments_sha256="0" * 64,
                    original_arguments=arguments if edited else "",
                    original_arguments_sha256="1" * 64 if edited else "",
                    principal=f"p{i % 5}",
                    run_id=f"run-{i // 50}",
                    status=outcome,
                    created_at=created,
                    updated_at=ended if held else created,
                    expires_at=created + timedelta(hours=1) if held else None,
                    decided_at=ended if held and outcome != "pending" else None,
                )
            )
        with transaction.atomic():
            Call.objects.bulk_create(calls)


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _backtest(database_url: str, rules: Path) -> tuple[float, float, dict[str, object]]:
    """One run of the command: its wall time, its CPU time, and its report."""
    cpu_before = _cpu_of_children()
    began = time.perf_counter()
    out = manage(database_url, "backtest", str(rules), "--json")
    seconds = time.perf_counter() - began
    report: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return seconds, _cpu_of_children() - cpu_before, report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    options = parser.parse_args()
    with database(options.database_url) as database_url, tempfile.TemporaryDirectory() as folder:
        _setup_django(database_url)
        _fill(options.calls)
        rules = Path(folder) / "draft.txt"
        rules.write_text("\n".join(DRAFT) + "\n", encoding="utf-8")
        times, cpus = [], []
        report: dict[str, object] = {}
        for _ in range(options.runs):
            seconds, cpu, report = _backtest(database_url, rules)
            times.append(seconds)
            cpus.append(cpu)
    changed = report["changed"]
    assert isinstance(changed, list)
    print(
        json.dumps(
            {
                "benchmark": "backtest",
                "database": "postgresql" if options.database_url else "sqlite",
                "calls": report["calls"],
                "rules": len(DRAFT),
                "changed": len(changed),
                "replay": report["replay"],
                "seconds_p50": statistics.median(times),
                "seconds_max": max(times),
                # The command's own CPU time: the wall time less any wait for a busy machine.
                "cpu_seconds_p50": statistics.median(cpus),
            }
        )
    )


if __name__ == "__main__":
    main()
