"""What the load balancer's checks and the metrics scrape read (approvals/ops/views.py,
approvals/ops/metrics.py)."""

from __future__ import annotations

from approvals.models import Call


def calls_pending_count() -> int:
    """Calls held for a decision now (the status index answers it)."""
    return Call.objects.filter(status=Call.Status.PENDING).count()


def database_answers() -> None:
    """Look for a row of the calls table: the database answers and has its tables. Raises the
    database's error otherwise."""
    Call.objects.exists()
