"""The OpenAI Agents SDK's own runner, with its ``ScriptedModel`` calling a payment tool,
against a live server: a gated tool runs when allowed or approved, and when denied, refused,
or Countersign is away it does not run and its output tells the model why; the run's token
usage counts in the run's budget; a run paused by ``needs_approval`` is resumed with
Countersign's decisions."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
import pytest_asyncio
from agents import Agent, FunctionTool, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

import countersign
from approvals.models import Agent as AgentRow
from approvals.models import Budget, Call
from countersign import AsyncClient
from countersign.integrations.openai_agents import gated_tool, resolve_interruptions
from tests.countersign.integrations.live import (
    APPROVE,
    DENY,
    EDIT,
    EDITED_ARGUMENTS,
    TOKEN,
    nowhere,
    person,
    server,
    world_create,
)
from tests.live import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]
__all__ = ["server"]  # the module's fixture

RUN = "run-oa"


@pytest.fixture(autouse=True)
def world(transactional_db: None) -> None:
    world_create()


class Ledger:
    """A payment tool that records every payment it made."""

    def __init__(self, name: str = "pay") -> None:
        self.paid: list[tuple[str, str]] = []
        self.receipts: list[str | None] = []  # what the tool was handed, payment by payment

        @function_tool(name_override=name)
        def pay(amount: str, payee: str) -> str:
            """Pay an amount in USD to a payee."""
            self.paid.append((amount, payee))
            self.receipts.append(countersign.current_receipt())
            return f"paid USD {amount} to {payee}"

        self.tool: FunctionTool = pay


def scripted(*arguments: dict[str, Any], usage: Usage | None = None) -> ScriptedModel:
    """A model that asks for one payment per turn, then says it is done."""
    steps: list[Any] = [
        ModelStep(
            output=[function_call("pay", args, call_id=f"call-{n}")],
            usage=usage or Usage(),
        )
        for n, args in enumerate(arguments)
    ]
    steps.append(ModelStep(output=[assistant_message("done")], usage=usage or Usage()))
    return ScriptedModel(steps)


def tool_outputs(model: ScriptedModel) -> list[str]:
    """What the model was told by the tool, in the input of its last turn."""
    items = model.calls[-1].input
    return [str(item["output"]) for item in items if item.get("type") == "function_call_output"]


@pytest_asyncio.fixture
async def client(server: LiveServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url, TOKEN) as running:
        yield running


def agent(model: ScriptedModel, tool: FunctionTool) -> Agent[Any]:
    return Agent(name="payer", instructions="Pay the invoices.", model=model, tools=[tool])


async def test_an_allowed_call_runs(client: AsyncClient) -> None:
    ledger, model = Ledger(), scripted({"amount": "12.50", "payee": "ACME"})
    tool = gated_tool(ledger.tool, client=client, run_id=RUN)
    result = await Runner.run(agent(model, tool), "Pay ACME")
    assert result.final_output == "done"
    assert ledger.paid == [("12.50", "ACME")]
    assert tool_outputs(model) == ["paid USD 12.50 to ACME"]
    call = await Call.objects.aget()
    assert (call.tool, call.status, call.run_id) == ("pay", "allowed", RUN)
    assert call.context == "OpenAI Agents SDK agent payer"
    assert ledger.receipts == [call.receipt]  # the tool is handed the call's receipt


async def test_a_held_call_approved_at_the_form_runs(
    server: LiveServer, client: AsyncClient
) -> None:
    ledger, model = Ledger(), scripted({"amount": "600.00", "payee": "ACME"})
    with person(server, APPROVE):
        await Runner.run(agent(model, gated_tool(ledger.tool, client=client)), "Pay ACME")
    assert ledger.paid == [("600.00", "ACME")]
    call = await Call.objects.aget()
    assert call.status == "approved"
    assert ledger.receipts == [call.receipt]


async def test_a_denied_call_does_not_run_and_the_model_reads_why(
    server: LiveServer, client: AsyncClient
) -> None:
    ledger, model = Ledger(), scripted({"amount": "600.00", "payee": "ACME"})
    with person(server, DENY):
        result = await Runner.run(agent(model, gated_tool(ledger.tool, client=client)), "Pay")
    assert result.final_output == "done"  # the run goes on: the model can adapt
    assert ledger.paid == []
    assert tool_outputs(model) == [
        "Countersign: The call was denied: do not run the tool; a reviewer denied it, so do "
        "not retry it unchanged. Comment: Use the other card."
    ]


async def test_a_refused_call_tells_the_model_the_rule(client: AsyncClient) -> None:
    ledger = Ledger("wire")
    wire = gated_tool(ledger.tool, client=client)
    model = ScriptedModel(
        [
            [function_call("wire", {"amount": "600.00", "payee": "ACME"}, call_id="c1")],
            [assistant_message("done")],
        ]
    )
    await Runner.run(agent(model, wire), "Wire it")
    assert ledger.paid == []
    (told,) = tool_outputs(model)
    assert told.startswith("Countersign: The call was refused: do not run the tool;")
    assert "USD 600.00 is over the limit of USD 100.00 per call" in told


async def test_when_countersign_is_unreachable_the_tool_does_not_run() -> None:
    ledger, model = Ledger(), scripted({"amount": "12.50", "payee": "ACME"})
    async with AsyncClient(nowhere(), TOKEN, timeout=1) as away:
        result = await Runner.run(agent(model, gated_tool(ledger.tool, client=away)), "Pay")
    assert result.final_output == "done"
    assert ledger.paid == []
    (told,) = tool_outputs(model)
    assert told.startswith("Countersign: The approval service could not be reached or failed")


async def test_an_edited_approval_runs_the_tool_with_the_edited_arguments(
    server: LiveServer, client: AsyncClient
) -> None:
    ledger, model = Ledger(), scripted({"amount": "1250.00", "payee": "ACME"})
    with person(server, EDIT):
        await Runner.run(agent(model, gated_tool(ledger.tool, client=client)), "Pay ACME")
    assert ledger.paid == [("400.00", "ACME")]
    assert (await Call.objects.aget()).arguments == EDITED_ARGUMENTS


async def test_the_runs_token_usage_counts_in_its_budget(client: AsyncClient) -> None:
    bot = await AgentRow.objects.aget(name="framework-agent")
    await Budget.objects.acreate(agent=bot, max_tokens=1000)
    ledger = Ledger()
    # Each model turn spends 300 + 100 tokens: the first call reports 400, the second the
    # 400 more spent since (800 in all), the third would make it 1200.
    model = scripted(
        {"amount": "1.00", "payee": "A"},
        {"amount": "2.00", "payee": "B"},
        {"amount": "3.00", "payee": "C"},
        usage=Usage(requests=1, input_tokens=300, output_tokens=100, total_tokens=400),
    )
    await Runner.run(agent(model, gated_tool(ledger.tool, client=client, run_id=RUN)), "Pay")
    assert ledger.paid == [("1.00", "A"), ("2.00", "B")]
    statuses = [c.status async for c in Call.objects.order_by("created_at")]
    assert statuses == ["allowed", "allowed", "refused"]
    assert "1200 tokens would pass the ceiling of 1000 in this run" in tool_outputs(model)[-1]


def needs_approval(ledger: Ledger) -> FunctionTool:
    ledger.tool.needs_approval = True
    return ledger.tool


async def test_an_interrupted_run_resumes_with_countersigns_decisions(
    server: LiveServer, client: AsyncClient
) -> None:
    ledger = Ledger()
    model = ScriptedModel(
        [
            [
                function_call("pay", {"amount": "600.00", "payee": "ACME"}, call_id="c1"),
                function_call("pay", {"amount": "700.00", "payee": "Initech"}, call_id="c2"),
            ],
            [assistant_message("done")],
        ]
    )
    payer = agent(model, needs_approval(ledger))
    paused = await Runner.run(payer, "Pay both")
    assert len(paused.interruptions) == 2
    assert ledger.paid == []
    with person(server, APPROVE, DENY):
        state = await resolve_interruptions(paused, client=client, run_id=RUN)
    result = await Runner.run(payer, state)
    assert result.final_output == "done"
    approved = await Call.objects.aget(status="approved")
    paid = json.loads(approved.arguments, parse_float=Decimal)
    assert ledger.paid == [(paid["amount"], paid["payee"])]
    assert any("Comment: Use the other card." in told for told in tool_outputs(model))


async def test_an_interruption_fails_closed_when_countersign_is_unreachable() -> None:
    ledger = Ledger()
    model = ScriptedModel(
        [
            [function_call("pay", {"amount": "5.00", "payee": "ACME"}, call_id="c1")],
            [assistant_message("done")],
        ]
    )
    payer = agent(model, needs_approval(ledger))
    paused = await Runner.run(payer, "Pay")
    async with AsyncClient(nowhere(), TOKEN, timeout=1) as away:
        state = await resolve_interruptions(paused, client=away)
    await Runner.run(payer, state)
    assert ledger.paid == []
    (told,) = tool_outputs(model)
    assert "The approval service could not be reached" in told
