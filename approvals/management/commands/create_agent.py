"""``manage.py create_agent NAME``: create or update an agent and print a new token last."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.models import Agent
from approvals.services.agents import agent_create_or_update, agent_token_issue


class Command(BaseCommand):
    help = (
        "Create an agent (or reuse the one with this name; given options update it) and issue "
        "it a new API token, printed alone on the last line. The token is shown only once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--principal", help="On whose behalf it acts (default: NAME).")
        parser.add_argument(
            "--allow-principals",
            dest="allow_principals",
            metavar="GLOBS",
            help="Other principals it may act for: comma-separated globs ('*' = any).",
        )
        parser.add_argument(
            "--mode",
            choices=Agent.Mode.values,
            help="Its permission mode.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            agent = agent_create_or_update(
                name=options["name"],
                principal=options["principal"],
                allow_principals=options["allow_principals"],
                mode=options["mode"],
            )
        except ValueError as error:
            raise CommandError(str(error), returncode=1) from None
        token = agent_token_issue(agent=agent)
        self.stdout.write(
            f"Agent {agent.pk}: principal {agent.principal}, mode {agent.mode}. "
            "New token (shown once, store it now):"
        )
        self.stdout.write(token)
