"""LangChain's ``create_agent`` with a fake chat model that calls a payment tool, against a
live server: through ``CountersignMiddleware`` the tool runs when allowed, approved or
approved with edits, and when denied or Countersign is away it does not run and the model
gets an error ``ToolMessage`` saying why; ``resolve_hitl_interrupt`` answers LangChain's own
``HumanInTheLoopMiddleware``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

import countersign
from approvals.models import Call, RunCounter
from countersign import AsyncClient, Client
from countersign.integrations.langchain import CountersignMiddleware, resolve_hitl_interrupt
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

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["server"]  # the module's fixture


@pytest.fixture(autouse=True)
def world(transactional_db: None) -> None:
    world_create()


@pytest.fixture
def client(server: LiveServer) -> Iterator[Client]:
    with Client(server.url, TOKEN) as running:
        yield running


class ToolCallingFakeModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering in turn; an agent binds its tools to it."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFakeModel:
        return self


def model(*payments: dict[str, Any], tokens: int = 0) -> ToolCallingFakeModel:
    usage = {"input_tokens": tokens, "output_tokens": tokens, "total_tokens": 2 * tokens}
    turns = [
        AIMessage(
            content="",
            tool_calls=[{"name": "pay", "args": args, "id": f"call-{n}", "type": "tool_call"}],
            usage_metadata=usage if tokens else None,
        )
        for n, args in enumerate(payments)
    ]
    return ToolCallingFakeModel(messages=iter([*turns, AIMessage(content="done")]))


class Ledger:
    def __init__(self) -> None:
        self.paid: list[tuple[str, str]] = []
        self.receipts: list[str | None] = []  # what the tool was handed, payment by payment

        @tool
        def pay(amount: str, payee: str) -> str:
            """Pay an amount in USD to a payee."""
            self.paid.append((amount, payee))
            self.receipts.append(countersign.current_receipt())
            return f"paid USD {amount} to {payee}"

        self.tool: BaseTool = pay


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    messages: list[BaseMessage] = result["messages"]
    return [message for message in messages if isinstance(message, ToolMessage)]


def run(
    chat: ToolCallingFakeModel, ledger: Ledger, gate: CountersignMiddleware
) -> list[ToolMessage]:
    agent = create_agent(chat, tools=[ledger.tool], middleware=[gate])
    return tool_messages(agent.invoke({"messages": [{"role": "user", "content": "Pay"}]}))


def test_an_allowed_call_runs_and_its_tokens_are_reported(client: Client) -> None:
    ledger = Ledger()
    (told,) = run(
        model({"amount": "12.50", "payee": "ACME"}, tokens=150),
        ledger,
        CountersignMiddleware(client),
    )
    assert ledger.paid == [("12.50", "ACME")]
    assert (told.status, told.content) == ("success", "paid USD 12.50 to ACME")
    call = Call.objects.get()
    assert (call.tool, call.status, call.context) == ("pay", "allowed", "LangChain agent")
    assert RunCounter.objects.get(scope="run").tokens == 300  # the budget counts them
    assert ledger.receipts == [call.receipt]  # the tool is handed the call's receipt


def test_a_held_call_approved_at_the_form_runs(server: LiveServer, client: Client) -> None:
    ledger = Ledger()
    with person(server, APPROVE):
        run(model({"amount": "600.00", "payee": "ACME"}), ledger, CountersignMiddleware(client))
    assert ledger.paid == [("600.00", "ACME")]
    assert ledger.receipts == [Call.objects.get(status="approved").receipt]


def test_a_denied_call_does_not_run_and_the_model_reads_why(
    server: LiveServer, client: Client
) -> None:
    ledger = Ledger()
    with person(server, DENY):
        (told,) = run(
            model({"amount": "600.00", "payee": "ACME"}), ledger, CountersignMiddleware(client)
        )
    assert ledger.paid == []
    assert told.status == "error"
    assert told.content == (
        "Countersign: The call was denied: do not run the tool; a reviewer denied it, so do "
        "not retry it unchanged. Comment: Use the other card."
    )


def test_tools_not_named_are_not_gated(client: Client) -> None:
    ledger = Ledger()
    run(
        model({"amount": "600.00", "payee": "ACME"}),
        ledger,
        CountersignMiddleware(client, tools=["wire"]),
    )
    assert ledger.paid == [("600.00", "ACME")]
    assert not Call.objects.exists()


def test_when_countersign_is_unreachable_the_tool_does_not_run() -> None:
    ledger = Ledger()
    with Client(nowhere(), TOKEN, timeout=1) as away:
        (told,) = run(
            model({"amount": "1.00", "payee": "ACME"}), ledger, CountersignMiddleware(away)
        )
    assert ledger.paid == []
    assert told.status == "error"
    assert str(told.content).startswith("Countersign: The approval service could not be reached")


def test_an_edited_approval_runs_the_tool_with_the_edited_arguments(
    server: LiveServer, client: Client
) -> None:
    ledger = Ledger()
    with person(server, EDIT):
        (told,) = run(
            model({"amount": "1250.00", "payee": "ACME"}), ledger, CountersignMiddleware(client)
        )
    assert ledger.paid == [("400.00", "ACME")]
    assert (told.status, told.content) == ("success", "paid USD 400.00 to ACME")
    assert Call.objects.get().arguments == EDITED_ARGUMENTS


@pytest.mark.asyncio
async def test_the_async_agent_with_an_async_client(server: LiveServer) -> None:
    ledger = Ledger()
    async with AsyncClient(server.url, TOKEN) as client:
        agent = create_agent(
            model({"amount": "600.00", "payee": "ACME"}),
            tools=[ledger.tool],
            middleware=[CountersignMiddleware(client)],
        )
        with person(server, DENY):
            result = await agent.ainvoke({"messages": [{"role": "user", "content": "Pay"}]})
    assert ledger.paid == []
    (told,) = tool_messages(result)
    assert told.status == "error"
    assert "Use the other card." in str(told.content)


def test_a_human_in_the_loop_interrupt_is_answered_by_countersign(
    server: LiveServer, client: Client
) -> None:
    ledger = Ledger()
    chat = ToolCallingFakeModel(
        messages=iter(
            [
                AIMessage(
                    content="",
                    tool_calls=[
                        {"name": "pay", "args": {"amount": "600.00", "payee": "ACME"}, "id": "c1"},
                        {
                            "name": "pay",
                            "args": {"amount": "700.00", "payee": "Initech"},
                            "id": "c2",
                        },
                    ],
                ),
                AIMessage(content="done"),
            ]
        )
    )
    agent = create_agent(
        chat,
        tools=[ledger.tool],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"pay": True})],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "thread-1"}}
    paused = agent.invoke({"messages": [{"role": "user", "content": "Pay both"}]}, config)
    (interrupt,) = paused["__interrupt__"]
    with person(server, APPROVE, DENY):
        answer = resolve_hitl_interrupt(interrupt.value, client=client, run_id="thread-1")
    first, second = Call.objects.order_by("created_at")
    assert (first.status, second.status) == ("approved", "denied")
    assert answer["decisions"][0] == {"type": "approve"}
    assert answer["decisions"][1]["type"] == "reject"
    assert "Use the other card." in answer["decisions"][1]["message"]
    result = agent.invoke(Command(resume=answer), config)
    assert ledger.paid == [("600.00", "ACME")]
    rejected = [m for m in tool_messages(result) if m.status == "error"]
    assert len(rejected) == 1
    assert "Use the other card." in str(rejected[0].content)


def test_an_interrupt_fails_closed_when_countersign_is_unreachable() -> None:
    value = {
        "action_requests": [{"name": "pay", "args": {"amount": "1.00"}, "description": "Pay"}],
        "review_configs": [{"action_name": "pay", "allowed_decisions": ["approve", "reject"]}],
    }
    with Client(nowhere(), TOKEN, timeout=1) as away:
        (decision,) = resolve_hitl_interrupt(value, client=away)["decisions"]
    assert decision["type"] == "reject"
    assert "could not be reached" in decision["message"]
