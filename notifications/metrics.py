"""The notifications' Prometheus series, in the registry ``GET /metrics`` shows
(approvals/ops/metrics.py). ``countersign_notifications_pending`` is read from the database
at each scrape, so every process shows the same figure; ``notifications_attempted`` counts a
run's delivery attempts once they are kept."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from notifications.models import Notification

NOTIFICATION_ATTEMPTS = Counter(
    "countersign_notification_attempts",
    "Delivery attempts of notifications, by result (delivered; failed: to be retried, or "
    "given up, which also counts in countersign_notifications_failed).",
    ["result"],
)
NOTIFICATIONS_FAILED = Counter(
    "countersign_notifications_failed",
    "Notifications given up on: every attempt failed for COUNTERSIGN_NOTIFY_RETRY_HOURS.",
)

# Every label value shows from the start, at zero, rather than once it first happens.
for _result in ("delivered", "failed"):
    NOTIFICATION_ATTEMPTS.labels(_result)

NOTIFICATIONS_PENDING_NAME = "countersign_notifications_pending"
NOTIFICATIONS_PENDING_HELP = (
    "Notifications not yet delivered nor given up on (read from the database at the scrape)."
)


class PendingNotifications(Collector):
    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(NOTIFICATIONS_PENDING_NAME, NOTIFICATIONS_PENDING_HELP)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count = Notification.objects.filter(status=Notification.Status.PENDING).count()
        yield GaugeMetricFamily(NOTIFICATIONS_PENDING_NAME, NOTIFICATIONS_PENDING_HELP, value=count)


REGISTRY.register(PendingNotifications())


def notifications_attempted(*, delivered: int, failed: int, failed_for_good: int) -> None:
    """Count the delivery attempts of a run just kept (their transaction has committed)."""
    if delivered:
        NOTIFICATION_ATTEMPTS.labels("delivered").inc(delivered)
    if failed:
        NOTIFICATION_ATTEMPTS.labels("failed").inc(failed)
    if failed_for_good:
        NOTIFICATIONS_FAILED.inc(failed_for_good)
