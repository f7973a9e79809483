"""``manage.py expire_calls``: expire every pending call past its deadline."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from approvals.services.lifecycle import calls_expire_due


class Command(BaseCommand):
    help = "Expire every pending call past its deadline (the server also does this itself)."

    def handle(self, *args: Any, **options: Any) -> None:
        expired = calls_expire_due()
        self.stdout.write(f"expired {expired} call{'' if expired == 1 else 's'}")
