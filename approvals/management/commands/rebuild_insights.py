"""``manage.py rebuild_insights``: count the insights' kept days again from the calls."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from approvals.services.insights import insights_days_rebuild


class Command(BaseCommand):
    help = (
        "Count the insights page's kept days again from the calls and approvals (the page"
        " keeps each settled day itself; this is for a history written with past times)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        kept = insights_days_rebuild()
        self.stdout.write(f"kept {len(kept)} day{'' if len(kept) == 1 else 's'}")
