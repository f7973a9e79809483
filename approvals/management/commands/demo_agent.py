"""``manage.py demo_agent``: a demo agent that submits a realistic mix of tool calls through
``countersign.AsyncClient`` and prints each decision as it arrives, so a newcomer can approve
in the browser and watch the agent react."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from approvals.models import Agent, Call
from approvals.services.agents import agent_token_issue
from approvals.services.demo import DEMO_AGENT, DEMO_PROMPT_AGENT
from countersign import AsyncClient, CountersignError


@dataclass(frozen=True, slots=True)
class Sample:
    label: str
    agent: str
    tool: str
    arguments: dict[str, Any]
    context: str


ADA = {"email": "ada@example.com"}
BOB = {"email": "bob@example.com"}
SAMPLES = (
    Sample(
        "under every cap", DEMO_AGENT, "pay",
        {"amount": "120.00", "currency": "USD", "payee": ADA},
        "A small invoice, well under every cap",
    ),
    Sample(
        "held for a cap", DEMO_AGENT, "pay",
        {"amount": "1250.00", "currency": "USD", "payee": BOB},
        "Over the USD 500.00 per-payment cap",
    ),
    Sample(
        "held in prompt mode", DEMO_PROMPT_AGENT, "read_file",
        {"path": "reports/2026-q4.csv"},
        "The intern asks before every call",
    ),
    Sample(
        "over the wire ceiling", DEMO_AGENT, "wire",
        {"amount": {"value": "30000.00", "currency": "USD"}},
        "Above the USD 25,000.00 wire ceiling",
    ),
    Sample(
        "not assessable", DEMO_AGENT, "refund",
        {"amount_cents": "12.50"},
        "Cents with a fraction cannot be read with certainty",
    ),
)  # fmt: skip


def _decision(state: dict[str, Any]) -> str:
    decision = state.get("decision") or {}
    by = f" by {decision['by']}" if decision.get("by") else ""
    comment = f": {decision['comment']}" if decision.get("comment") else ""
    if state["status"] in Call.Status.NEVER_HELD:
        return "; ".join(r["message"] for r in state["reasons"]) or "no policy objected"
    return f"{by}{comment}".strip(": ") or "-"


class Command(BaseCommand):
    help = "Submit sample calls as the demo agents and print each decision as it arrives."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--count", type=int, default=1, help="how many rounds of the samples")
        parser.add_argument(
            "--deadline", type=float, default=None, help="stop waiting after S seconds"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["count"] < 1:
            raise CommandError("--count must be at least 1")
        tokens = {}
        for name in (DEMO_AGENT, DEMO_PROMPT_AGENT):
            agent = Agent.objects.filter(name=name).first()
            if agent is None:
                raise CommandError("The demo agents do not exist yet: run `make run` first.")
            tokens[name] = agent_token_issue(agent=agent)
        try:
            asyncio.run(self._run(options["url"], tokens, options["count"], options["deadline"]))
        except CountersignError as error:
            raise CommandError(str(error)) from None

    async def _run(
        self, url: str, tokens: dict[str, str], rounds: int, deadline: float | None
    ) -> None:
        clients = {name: AsyncClient(url, token) for name, token in tokens.items()}
        try:
            waits = []
            for _ in range(rounds):
                for sample in SAMPLES:
                    client = clients[sample.agent]
                    state = await client.submit(
                        sample.tool, sample.arguments, context=sample.context
                    )
                    page = f"{url}/calls/{state['id']}/"
                    self.stdout.write(
                        f"submitted {sample.tool} ({sample.label}): {state['status']}  {page}"
                    )
                    waits.append(self._report(client, sample, state, deadline))
            self.stdout.write("Waiting for decisions; approve or deny them in the browser.")
            await asyncio.gather(*waits)
        finally:
            for client in clients.values():
                await client.aclose()

    async def _report(
        self, client: AsyncClient, sample: Sample, state: dict[str, Any], deadline: float | None
    ) -> None:
        try:
            final = await client.wait(state, deadline=deadline)
        except TimeoutError:
            self.stdout.write(f"  {sample.tool}: still pending after the deadline")
            return
        self.stdout.write(
            f"  {sample.tool} ({sample.label}) -> {final['status']}: {_decision(final)}"
        )
        self.stdout.flush()
        if final["status"] in {Call.Status.APPROVED, Call.Status.ALLOWED}:
            self.stdout.write(f"    the agent runs {sample.tool}({json.dumps(sample.arguments)})")
