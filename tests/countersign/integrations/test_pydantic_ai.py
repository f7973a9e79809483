"""A PydanticAI agent whose payment tool needs approval, scripted with PydanticAI's own
``FunctionModel``, against a live server: its run ends with the deferred calls,
``approve_deferred`` answers them, and the resumed run runs the tool when allowed, approved or
approved with edits; when denied or Countersign is away the tool does not run and the model
reads why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from approvals.models import Call, RunCounter
from countersign import RECEIPT_META_KEY, AsyncClient, Client
from countersign.integrations.pydantic_ai import approve_deferred, approve_deferred_async
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

DENIED = (
    "Countersign: The call was denied: do not run the tool; a reviewer denied it, so do "
    "not retry it unchanged. Comment: Use the other card."
)


@pytest.fixture(autouse=True)
def world(transactional_db: None) -> None:
    world_create()


@pytest.fixture
def client(server: LiveServer) -> Iterator[Client]:
    with Client(server.url, TOKEN) as running:
        yield running


class Payments:
    """An agent that pays the given amounts in one turn, then says what its tools returned;
    ``paid`` is what the tool really paid."""

    def __init__(self, *amounts: str, tokens: int = 0) -> None:
        self.paid: list[tuple[Decimal, str]] = []
        self.receipts: list[Any] = []  # the tool's metadata from the approval, payment by payment
        self.amounts = amounts
        self.tokens = tokens
        self.agent = Agent(FunctionModel(self.respond), output_type=[str, DeferredToolRequests])

        @self.agent.tool(requires_approval=True)
        def pay(ctx: RunContext[object], amount: Decimal, payee: str) -> str:
            """Pay an amount in USD to a payee."""
            self.paid.append((amount, payee))
            self.receipts.append((ctx.tool_call_metadata or {}).get(RECEIPT_META_KEY))
            return f"paid USD {amount} to {payee}"

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            part
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        if returns:  # the model reads what each call gave: the tool's output, or the denial
            return ModelResponse(parts=[TextPart(" | ".join(str(r.content) for r in returns))])
        calls = [
            ToolCallPart("pay", json.dumps({"amount": amount, "payee": "ACME"}), f"call-{n}")
            for n, amount in enumerate(self.amounts)
        ]
        return ModelResponse(
            parts=list(calls),
            usage=RequestUsage(input_tokens=self.tokens, output_tokens=self.tokens),
        )

    def start(self) -> Any:
        result = self.agent.run_sync("Pay ACME")
        assert isinstance(result.output, DeferredToolRequests)
        return result

    def resume(self, paused: Any, results: DeferredToolResults) -> str:
        resumed = self.agent.run_sync(
            message_history=paused.all_messages(), deferred_tool_results=results
        )
        assert isinstance(resumed.output, str)
        return resumed.output


def test_an_allowed_call_runs_and_its_tokens_are_reported(client: Client) -> None:
    payments = Payments("12.50", tokens=150)
    paused = payments.start()
    results = approve_deferred(paused.output, client=client, usage=paused.usage)
    assert results.approvals == {"call-0": True}
    assert payments.resume(paused, results) == "paid USD 12.50 to ACME"
    assert payments.paid == [(Decimal("12.50"), "ACME")]
    call = Call.objects.get()
    assert (call.tool, call.status, call.context) == ("pay", "allowed", "PydanticAI agent")
    assert RunCounter.objects.get(scope="run").tokens == 300  # the budget counts them
    assert payments.receipts == [call.receipt]  # the tool is handed the call's receipt


def test_a_held_call_approved_at_the_form_runs(server: LiveServer, client: Client) -> None:
    payments = Payments("600.00")
    paused = payments.start()
    with person(server, APPROVE):
        results = approve_deferred(paused.output, client=client)
    assert payments.resume(paused, results) == "paid USD 600.00 to ACME"
    assert payments.paid == [(Decimal("600.00"), "ACME")]
    assert payments.receipts == [Call.objects.get(status="approved").receipt]


def test_a_denied_call_does_not_run_and_the_model_reads_why(
    server: LiveServer, client: Client
) -> None:
    payments = Payments("600.00")
    paused = payments.start()
    with person(server, DENY):
        results = approve_deferred(paused.output, client=client)
    assert results.approvals == {"call-0": ToolDenied(DENIED)}
    assert results.metadata == {}  # no receipt for a call that must not run
    assert payments.resume(paused, results) == DENIED
    assert payments.paid == []


def test_when_countersign_is_unreachable_the_tool_does_not_run() -> None:
    payments = Payments("1.00")
    paused = payments.start()
    with Client(nowhere(), TOKEN, timeout=1) as away:
        results = approve_deferred(paused.output, client=away)
    told = payments.resume(paused, results)
    assert told.startswith("Countersign: The approval service could not be reached")
    assert payments.paid == []


def test_an_edited_approval_runs_the_tool_with_the_edited_arguments(
    server: LiveServer, client: Client
) -> None:
    payments = Payments("1250.00")
    paused = payments.start()
    with person(server, EDIT):
        results = approve_deferred(paused.output, client=client)
    assert payments.resume(paused, results) == "paid USD 400.00 to ACME"
    assert payments.paid == [(Decimal("400.00"), "ACME")]
    assert Call.objects.get().arguments == EDITED_ARGUMENTS


@pytest.mark.asyncio
async def test_calls_of_one_turn_are_waited_for_together(server: LiveServer) -> None:
    payments = Payments("12.50", "600.00")
    paused = await payments.agent.run("Pay ACME")
    assert isinstance(paused.output, DeferredToolRequests)
    async with AsyncClient(server.url, TOKEN) as client:
        with person(server, DENY):
            results = await approve_deferred_async(paused.output, client=client)
    assert results.approvals == {"call-0": True, "call-1": ToolDenied(DENIED)}
    resumed = await payments.agent.run(
        message_history=paused.all_messages(), deferred_tool_results=results
    )
    assert resumed.output == f"paid USD 12.50 to ACME | {DENIED}"
    assert payments.paid == [(Decimal("12.50"), "ACME")]
