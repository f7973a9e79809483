"""A PydanticAI agent whose payment tool needs approval, approved through Countersign.

The tool is declared ``requires_approval=True``, so the run ends with the calls the model
wants (``DeferredToolRequests``); ``approve_deferred`` submits them to Countersign and waits,
and the run resumes with the answers: allowed or approved calls run, the others come back to
the model as a denial saying why. The model here is PydanticAI's own ``FunctionModel``, so no
API key or network is needed: it asks for one payment over the cap, which a person approves.

With COUNTERSIGN_URL and COUNTERSIGN_TOKEN set (the service, the agent's token):

    python examples/pydantic_ai_deferred.py
"""

from __future__ import annotations

from decimal import Decimal

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from countersign import Client
from countersign.integrations.pydantic_ai import approve_deferred


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for a real model: one payment, then what the tool answered."""
    if len(messages) == 1:
        payment = {"amount": "1250.00", "currency": "USD", "payee": "bob"}
        return ModelResponse(parts=[ToolCallPart("pay", payment)])
    answer = messages[-1].parts[-1]
    return ModelResponse(parts=[TextPart(f"done: {getattr(answer, 'content', answer)}")])


agent = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])


@agent.tool_plain(requires_approval=True)
def pay(amount: Decimal, currency: str, payee: str) -> str:
    """Pay an amount to a payee."""
    return f"paid {currency} {amount} to {payee}"


def main() -> None:
    result = agent.run_sync("Pay invoice INV-0042: USD 1250.00 to bob.")
    with Client() as client:  # COUNTERSIGN_URL and COUNTERSIGN_TOKEN
        while isinstance(result.output, DeferredToolRequests):
            answers = approve_deferred(
                result.output, client=client, usage=result.usage, run_id="example-run"
            )
            result = agent.run_sync(
                message_history=result.all_messages(), deferred_tool_results=answers
            )
    print(result.output)  # the tool's output, or why it did not run


if __name__ == "__main__":
    main()
