"""``manage.py export_rules``: print the enabled rules as a rules file."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from approvals.services.rules import rules_export


class Command(BaseCommand):
    help = "Print the enabled cap rules as a rules file (canonical lines, sorted by name)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(rules_export(), ending="")
