"""The kept days of the insights (``selectors.insights``): each settled day's figures,
counted once from its calls and approvals and never updated after."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from django.db import transaction
from django.utils import timezone

from approvals.models import Call, InsightsDay
from approvals.selectors.insights import (
    PERIODS,
    insights_days_counted,
    insights_last_settled,
    insights_period,
)


def insights_days_keep(*, first_day: date, now: datetime | None = None) -> list[date]:
    """Keep each day from ``first_day`` that has settled (over ``SETTLE`` ago, none of its
    calls still held) and is not kept yet; the days kept. Two processes keeping the same day
    count the same figures, and the second row is dropped."""
    last = insights_last_settled(now=now)
    kept = set(InsightsDay.objects.filter(day__gte=first_day).values_list("day", flat=True))
    days = [
        day
        for day in (first_day + timedelta(days=i) for i in range((last - first_day).days + 1))
        if day not in kept
    ]
    if not days:
        return []
    held = {
        created.astimezone(UTC).date()
        for created in Call.objects.filter(
            status=Call.Status.PENDING,
            created_at__gte=datetime.combine(days[0], time.min, UTC),
            created_at__lt=datetime.combine(days[-1] + timedelta(days=1), time.min, UTC),
        ).values_list("created_at", flat=True)
    }
    settled = [day for day in days if day not in held]
    counted = insights_days_counted(days=settled)
    InsightsDay.objects.bulk_create(
        [InsightsDay(day=day, figures=counted[day].as_json()) for day in settled],
        ignore_conflicts=True,
    )
    return settled


@transaction.atomic
def insights_days_rebuild(*, now: datetime | None = None) -> list[date]:
    """Count every kept day again from the calls: the rows of the longest period's settled
    days, and none older."""
    now = now or timezone.now()
    InsightsDay.objects.all().delete()
    longest = insights_period(days=max(PERIODS), now=now)
    return insights_days_keep(first_day=longest.first_day, now=now)
