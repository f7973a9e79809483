"""``manage.py demo_agent``: a demo agent that submits a realistic mix of tool calls through
``countersign.AsyncClient`` and prints each decision as it arrives, so a newcomer can approve
in the browser and watch the agent react (README.md, "A 60-second tour").

It talks to the server ``make run`` started, at the URL ``demo_setup`` kept in ``var/``
(``--url`` for another), with tokens of its own, revoked when it ends, so it never uses up or
outlives the token ``make run`` printed."""

from __future__ import annotations

import asyncio
import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from approvals.models import Agent, AgentToken, Call
from approvals.services.agents import agent_token_issue, agent_token_revoke, token_digest
from approvals.services.demo import (
    DEMO_AGENT,
    DEMO_DEFAULT_URL,
    DEMO_PROMPT_AGENT,
    DEMO_URL_FILE,
    demo_state_read,
)
from countersign import AsyncClient, CountersignError

NO_DEMO = "The demo agents do not exist yet: run `make run` first."
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
STOPPED = "Stopped; the tokens it used are revoked, the calls still pending stay in the queue."


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


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


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
        parser.add_argument(
            "--url",
            default=None,
            help=f"the server (default: the one `make run` set up, in var/{DEMO_URL_FILE}, "
            f"else {DEMO_DEFAULT_URL})",
        )
        parser.add_argument("--count", type=int, default=1, help="how many rounds of the samples")
        parser.add_argument(
            "--deadline", type=float, default=None, help="stop waiting after S seconds"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["count"] < 1:
            raise CommandError("--count must be at least 1")
        url = (
            options["url"]
            or demo_state_read(var_dir=Path(settings.VAR_DIR), name=DEMO_URL_FILE)
            or DEMO_DEFAULT_URL
        )
        names = (DEMO_AGENT, DEMO_PROMPT_AGENT)
        agents = {agent.name: agent for agent in Agent.objects.filter(name__in=names)}
        if len(agents) < len(names):
            raise CommandError(NO_DEMO)
        tokens = {name: agent_token_issue(agent=agent) for name, agent in agents.items()}
        # Ctrl-C is the usual way to stop it, a closed terminal or a kill the others: each
        # ends it the same way, its tokens revoked.
        previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS}
        try:
            asyncio.run(self._run(url, tokens, options["count"], options["deadline"]))
        except CountersignError as error:
            raise CommandError(str(error)) from None
        except KeyboardInterrupt:
            self.stdout.write(STOPPED)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for row in AgentToken.objects.filter(digest__in=map(token_digest, tokens.values())):
                agent_token_revoke(token_row=row)

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
            final = await client.wait(state, deadline=deadline, cancel=False)
        except TimeoutError:
            self.stdout.write(f"  {sample.tool}: still pending after the deadline")
            return
        self.stdout.write(
            f"  {sample.tool} ({sample.label}) -> {final['status']}: {_decision(final)}"
        )
        self.stdout.flush()
        if final["status"] in {Call.Status.APPROVED, Call.Status.ALLOWED}:
            self.stdout.write(f"    the agent runs {sample.tool}({json.dumps(sample.arguments)})")
