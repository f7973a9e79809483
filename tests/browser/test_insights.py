"""The insights page in Chromium: each chart drawn by the vendored library under the
Content-Security-Policy, and the tables beside them matching the database."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from approvals.models import Approval, Call
from approvals.services.decisions import call_decide
from tests.browser.conftest import PASSWORD, Browsing
from tests.factories import agent_make, call_make, payment, rule_make, user_make

pytestmark = pytest.mark.django_db(transaction=True)

CHARTS = ("calls", "holds", "times", "expiries", "approvers", "ledgers")
VERDICTS = ("allowed", "refused", "pending", "approved", "denied", "expired", "cancelled")
# Whether Chart.js owns the canvas, and the canvas's drawn size.
DRAWN_JS = """id => {
  const canvas = document.getElementById("chart-" + id);
  const chart = window.Chart && window.Chart.getChart(canvas);
  return {chart: Boolean(chart), width: canvas.width, height: canvas.height,
          bars: chart ? chart.getDatasetMeta(0).data.length : 0};
}"""
TABLE_JS = """id => Array.from(document.querySelectorAll("#" + id + " tbody tr")).map(
  row => Array.from(row.cells).map(cell => cell.textContent.trim()))"""


def _history() -> None:
    rule_make(line="big: pay arg=amount max USD 100.00 -> gate")
    rule_make(line="spent: pay arg=amount sum USD 2000.00 -> gate")
    alice = user_make(username="alice")
    user_make(username="victor", decide=False, view=True, password=PASSWORD)
    agent = agent_make()
    now = timezone.now()
    call_make(agent=agent, arguments=payment("5.00"), now=now - timedelta(days=2))
    for days, amount, approve in ((1, "150.00", True), (3, "250.00", False), (5, "300.00", True)):
        held = call_make(agent=agent, arguments=payment(amount), now=now - timedelta(days=days))
        call_decide(
            call_id=held.pk,
            user=alice,
            approve=approve,
            comment="",
            arguments_sha256=held.arguments_sha256,
            now=held.created_at + timedelta(minutes=4 * days),
        )


def test_the_charts_are_drawn_and_their_tables_match_the_database(
    browsing: Browsing, screenshots_folder: Path
) -> None:
    _history()
    page = browsing.logged_in("victor")
    page.get_by_role("link", name="Insights").click()
    page.get_by_role("link", name="7 days").click()
    expect(page.get_by_role("link", name="7 days")).to_have_attribute("aria-current", "page")

    for chart in CHARTS:
        page.wait_for_function(f"({DRAWN_JS})({chart!r}).chart")
        drawn = page.evaluate(DRAWN_JS, chart)
        assert drawn["chart"], chart
        assert drawn["width"] > 0, chart
        assert drawn["height"] > 0, chart
        assert drawn["bars"] > 0, chart

    start = timezone.now().astimezone(UTC).date() - timedelta(days=6)
    calls = Call.objects.filter(created_at__date__gte=start)
    per_day = Counter((c.created_at.astimezone(UTC).date(), c.status) for c in calls)
    expected = [
        [
            (start + timedelta(days=i)).isoformat(),
            *(str(per_day[start + timedelta(days=i), s]) for s in VERDICTS),
            str(sum(per_day[start + timedelta(days=i), s] for s in VERDICTS)),
        ]
        for i in range(7)
    ]
    assert page.evaluate(TABLE_JS, "table-calls") == expected

    given = Counter(Approval.objects.values_list("user__username", "approve"))
    assert page.evaluate(TABLE_JS, "table-approvers") == [
        ["alice", str(given["alice", True]), str(given["alice", False]), "3"]
    ]
    holds = Call.objects.exclude(gates=[]).count()
    assert page.evaluate(TABLE_JS, "table-holds") == [["big", str(holds)]]
    # The chart's bars are the table's numbers.
    assert page.evaluate(
        "() => Chart.getChart(document.getElementById('chart-approvers')).data.datasets"
        ".map(d => d.data)"
    ) == [[given["alice", True]], [given["alice", False]]]
    page.screenshot(path=str(screenshots_folder / "insights.png"), full_page=True)
