"""The insights page, ``/insights/`` (docs/ui.md, "Insights"): a thin view that keeps the
period's settled days (``services.insights``) and reads ``selectors.insights``, and each
chart's numbers as data for ``static/js/insights.js``, which draws them; the tables beside
the charts show the same numbers."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals.models import Call
from approvals.selectors.insights import (
    DEFAULT_PERIOD,
    PERIODS,
    VERDICTS,
    Figures,
    LedgerNear,
    insights_figures,
    insights_may_view,
    insights_period,
    ledgers_nearest,
)
from approvals.services.insights import insights_days_keep
from approvals.templatetags.clock import duration_text
from approvals.web.htmx import HtmxHttpRequest
from approvals.web.querystring import (
    BadQuery,
    bad_parameter,
    checks_own_query,
    query_refused,
    single_values,
)

DAYS = "days"
DAYS_EXPECTED = "7, 30 or 90"
DEFAULT_GATE = "(default gate)"
# Each series' colour on the page: a custom property of countersign.css, by its name.
VERDICT_TONES = {
    Call.Status.ALLOWED: "--accent",
    Call.Status.REFUSED: "--deny-strong",
    Call.Status.PENDING: "--pending",
    Call.Status.APPROVED: "--approve",
    Call.Status.DENIED: "--deny",
    Call.Status.EXPIRED: "--muted",
    Call.Status.CANCELLED: "--line",
}

Series = dict[str, object]


def _days(value: str | None) -> int:
    if value is None:
        return DEFAULT_PERIOD
    if value not in {str(days) for days in PERIODS}:
        raise BadQuery([bad_parameter(DAYS, DAYS_EXPECTED)])
    return int(value)


def _chart(labels: list[str], series: list[Series], **options: object) -> dict[str, object]:
    return {"labels": labels, "series": series, **options}


def _minutes(seconds: int) -> float:
    return round(seconds / 60, 1)


def gate_label(gate: str) -> str:
    return gate or DEFAULT_GATE


def charts(figures: Figures, ledgers: list[LedgerNear]) -> dict[str, dict[str, object]]:
    """Each chart's labels and series, by the id of its canvas."""
    days = [day.isoformat() for day in figures.period.dates]
    times = figures.decision_times
    return {
        "calls": _chart(
            days,
            [
                {
                    "name": status.label,
                    "tone": VERDICT_TONES[status],
                    "values": [day.counts[i] for day in figures.calls_per_day],
                }
                for i, status in enumerate(VERDICTS)
            ],
            stacked=True,
            axis="calls",
            whole=True,
        ),
        "holds": _chart(
            [name for name, _ in figures.holds_by_rule],
            [
                {
                    "name": "held calls",
                    "tone": "--pending",
                    "values": [n for _, n in figures.holds_by_rule],
                }
            ],
            horizontal=True,
            axis="held calls",
            whole=True,
        ),
        "times": _chart(
            [gate_label(t.gate) for t in times],
            [
                {
                    "name": "p50",
                    "tone": "--accent",
                    "values": [_minutes(t.p50_seconds) for t in times],
                },
                {
                    "name": "p90",
                    "tone": "--pending",
                    "values": [_minutes(t.p90_seconds) for t in times],
                },
            ],
            axis="minutes",
        ),
        "expiries": _chart(
            days,
            [
                {
                    "name": Call.Status.EXPIRED.label,
                    "tone": "--muted",
                    "values": [n for _, n in figures.expiries_per_day],
                }
            ],
            axis="calls",
            whole=True,
        ),
        "approvers": _chart(
            [a.username for a in figures.approvers],
            [
                {
                    "name": Call.Status.APPROVED.label,
                    "tone": "--approve",
                    "values": [a.approved for a in figures.approvers],
                },
                {
                    "name": Call.Status.DENIED.label,
                    "tone": "--deny",
                    "values": [a.denied for a in figures.approvers],
                },
            ],
            stacked=True,
            horizontal=True,
            axis="decisions",
            whole=True,
        ),
        "ledgers": _chart(
            [f"{n.rule} {n.key_digest[:8]}".strip() for n in ledgers],
            [{"name": "used", "tone": "--deny", "values": [n.used_percent for n in ledgers]}],
            horizontal=True,
            axis="% of the limit",
            most=100,
        ),
    }


@checks_own_query
@require_GET
@login_required
def insights(request: HtmxHttpRequest) -> HttpResponse:
    if not insights_may_view(request.user):
        raise PermissionDenied
    try:
        days = _days(single_values(request.GET, (DAYS,)).get(DAYS))
    except BadQuery as bad:
        return query_refused(request, bad.problems)
    period = insights_period(days=days)
    insights_days_keep(first_day=period.first_day)
    figures = insights_figures(period=period)
    ledgers = ledgers_nearest()
    context = {
        "figures": figures,
        "ledgers": ledgers,
        "periods": PERIODS,
        "verdicts": VERDICTS,
        "charts": charts(figures, ledgers),
        "time_rows": [
            (t, duration_text(t.p50_seconds), duration_text(t.p90_seconds))
            for t in figures.decision_times
        ],
    }
    return render(request, "approvals/insights.html", context)
