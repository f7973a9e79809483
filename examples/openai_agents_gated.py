"""An OpenAI Agents SDK agent whose payment tool is gated by Countersign.

``gated_tool`` wraps the tool: each call the model makes is submitted to Countersign and runs
only when allowed or approved; otherwise the tool's output is why it did not run, and the
model carries on. The model here is the SDK's own ``ScriptedModel``, so no OpenAI key or
network is needed: it asks for one payment over the cap, which a person approves.

With COUNTERSIGN_URL and COUNTERSIGN_TOKEN set (the service, the agent's token):

    python examples/openai_agents_gated.py
"""

from __future__ import annotations

import asyncio

from agents import Agent, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from countersign import AsyncClient
from countersign.integrations.openai_agents import gated_tool


@function_tool
def pay(amount: str, currency: str, payee: str) -> str:
    """Pay an amount to a payee."""
    return f"paid {currency} {amount} to {payee}"


PAYMENT = {"amount": "1250.00", "currency": "USD", "payee": "bob"}
# Stands in for a real model: one payment, then a summary.
MODEL = ScriptedModel(
    [
        ModelStep(output=[function_call("pay", PAYMENT, call_id="call-1")]),
        ModelStep(output=[assistant_message("Invoice INV-0042 is settled.")]),
    ]
)


async def main() -> None:
    async with AsyncClient() as client:  # COUNTERSIGN_URL and COUNTERSIGN_TOKEN
        agent = Agent(
            name="payer",
            instructions="Pay the invoices.",
            model=MODEL,
            tools=[gated_tool(pay, client=client, run_id="example-run", deadline=120)],
        )
        result = await Runner.run(agent, "Pay invoice INV-0042: USD 1250.00 to bob.")
    for item in result.new_items:
        if item.type == "tool_call_output_item":
            print("done:", item.output)  # the tool's output, or why it did not run
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
