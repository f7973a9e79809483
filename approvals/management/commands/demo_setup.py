"""``manage.py demo_setup``: the demo installation behind ``make run``, and what to do next."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from approvals.services.demo import demo_ensure

HELD_ARGUMENTS = {"amount": "1250.00", "currency": "USD", "payee": {"email": "ada@example.com"}}
HELD_CALL = json.dumps(
    {
        "tool": "pay",
        "arguments": json.dumps(HELD_ARGUMENTS),
        "context": "Paying the November invoice",
    }
)


class Command(BaseCommand):
    help = "Create or refresh the demo approvers, agents, rules and gates; print how to use them."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--rules", default=str(Path(settings.BASE_DIR) / "examples" / "rules.txt")
        )
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args: Any, **options: Any) -> None:
        demo = demo_ensure(rules_file=Path(options["rules"]))
        url = options["url"]
        curl = (
            f"curl -sS -X POST {url}/api/v1/calls -H 'Authorization: Bearer {demo.token}' "
            f"-H 'Content-Type: application/json' -d {shlex.quote(HELD_CALL)}"
        )
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"Countersign is starting at {url}/",
                    f"  Log in as {' or '.join(demo.approvers)}, password {demo.password}",
                    f"  Demo agent {demo.agent}, token: {demo.token}",
                    "",
                    "Create a held call (USD 1,250.00 is over the USD 500.00 per-payment cap):",
                    f"  {curl}",
                    "",
                    "Watch an agent react to your decisions (in another terminal):",
                    f"  .venv/bin/python manage.py demo_agent --url {url}",
                    "",
                ]
            )
        )
