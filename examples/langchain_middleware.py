"""A LangChain v1 agent (``create_agent``) whose tools are gated by Countersign.

``CountersignMiddleware`` submits each tool call before the tool runs: allowed or approved, it
runs (with the approver's edits); otherwise the model gets an error ``ToolMessage`` saying why.
The chat model here is LangChain's own fake, so no API key or network is needed: it asks for
one payment over the cap, which a person approves.

With COUNTERSIGN_URL and COUNTERSIGN_TOKEN set (the service, the agent's token):

    python examples/langchain_middleware.py
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from countersign import Client
from countersign.integrations.langchain import CountersignMiddleware


@tool
def pay(amount: str, currency: str, payee: str) -> str:
    """Pay an amount to a payee."""
    return f"paid {currency} {amount} to {payee}"


class FakeModel(GenericFakeChatModel):
    """Stands in for a real chat model; an agent binds its tools to it."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeModel:
        return self


PAYMENT = {"amount": "1250.00", "currency": "USD", "payee": "bob"}
MODEL = FakeModel(
    messages=iter(
        [
            AIMessage(content="", tool_calls=[{"name": "pay", "args": PAYMENT, "id": "call-1"}]),
            AIMessage(content="Invoice INV-0042 is settled."),
        ]
    )
)


def main() -> None:
    with Client() as client:  # COUNTERSIGN_URL and COUNTERSIGN_TOKEN
        agent = create_agent(
            MODEL,
            tools=[pay],
            middleware=[CountersignMiddleware(client, run_id="example-run", deadline=120)],
        )
        result = agent.invoke({"messages": [{"role": "user", "content": "Pay INV-0042."}]})
    for message in result["messages"]:
        if isinstance(message, ToolMessage):
            print("done:", message.content)  # the tool's output, or why it did not run
    print(result["messages"][-1].content)


if __name__ == "__main__":
    main()
