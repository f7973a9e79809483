"""``manage.py audit_export --after N``: the audit entries after ``seq`` N, oldest first, as
JSON Lines on standard output, one entry a line as ``GET /api/v1/audit`` gives it
(docs/receipts.md, "The audit chain"). It stops at the latest entry when it started; run it
again with the last ``seq`` it wrote for the ones written since.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.selectors.audit import audit_items


class Command(BaseCommand):
    help = "Write the audit entries after --after (a seq) as JSON Lines, oldest first."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--after", type=int, default=0, help="the last seq already exported (default 0)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        after = options["after"]
        if after < 0:
            raise CommandError("--after is a seq: 0 or more")
        for item in audit_items(after=after):
            # ASCII, as the API writes it: whatever the terminal's encoding, a line is whole.
            self.stdout.write(json.dumps(item, separators=(",", ":")))
