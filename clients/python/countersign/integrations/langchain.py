"""LangChain v1 / LangGraph: Countersign decides the tool calls of a ``create_agent`` agent.

- ``CountersignMiddleware(client)`` is an ``AgentMiddleware``: each tool call (of every tool,
  or of the tools named) is submitted and waited for before the tool runs. Allowed or
  approved, the tool runs, with the approver's edited arguments when edited; anything else —
  refused, denied, expired, given up on, Countersign unreachable or failing — and the tool
  does not run: the model gets a ``ToolMessage`` with ``status="error"`` saying why. While
  the tool runs, ``countersign.current_receipt()`` is the call's receipt (docs/receipts.md).
- ``resolve_hitl_interrupt(value, client=...)`` answers the interrupt of LangChain's own
  ``HumanInTheLoopMiddleware`` (batched, its default) with Countersign's decisions, for
  ``agent.invoke(Command(resume=...), config)``.

Token usage: the middleware reports the ``usage_metadata`` of the model message that asked
for the call, with the first call it gates from that message, so that a message's tokens
count once in the run's budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command

from countersign import errors, protocol
from countersign.client import AsyncClient, Client
from countersign.receipts import receipt_context

NOT_APPROVED = "Countersign: {message}"
FAILED = "Countersign could not decide this call ({kind}), so the tool did not run."
NEEDS_ASYNC = (
    "CountersignMiddleware was given an AsyncClient, which cannot wait inside a synchronous "
    "agent.invoke: give it a countersign.Client, or run the agent with ainvoke/astream."
)
NOT_HITL = (
    "resolve_hitl_interrupt answers a HumanInTheLoopMiddleware interrupt in its batched mode "
    "(action_requests and review_configs); this value is not one, so nothing was decided."
)
EDIT_NOT_ALLOWED = (
    "Countersign: the approver approved this call only with changed arguments, which this "
    "tool's review does not accept, so it did not run. Call it again with exactly these "
    "arguments if they still serve: {arguments}"
)
CONTEXT = "LangChain agent"
CONTEXT_THREAD = "LangChain agent, thread {thread}"

ToolResult = ToolMessage | Command[Any]
# A gated call's outcome: the request to run and its receipt, or the refusal.
_Decided = tuple[ToolCallRequest, str | None] | ToolMessage


def _thread(request: ToolCallRequest) -> str | None:
    config = getattr(request.runtime, "config", None) or {}
    thread = (config.get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


def _messages(state: Any) -> Sequence[Any]:
    if isinstance(state, Mapping):
        return state.get("messages") or []
    return getattr(state, "messages", None) or []


class CountersignMiddleware(AgentMiddleware):
    """Asks Countersign before each tool call of a ``create_agent`` agent runs.

    ``client`` is a ``Client`` for ``invoke``/``stream`` (it also serves ``ainvoke``, waiting
    in a worker thread), or an ``AsyncClient`` for ``ainvoke``/``astream`` only. ``tools``
    names the tools to gate (None: every tool). ``run_id`` is the run whose budget counts the
    calls (None: the LangGraph thread's id, if the agent runs in one); ``context`` what the
    approver reads; ``deadline`` the longest wait in seconds, then the call is cancelled."""

    def __init__(
        self,
        client: Client | AsyncClient,
        tools: Iterable[str] | None = None,
        *,
        run_id: str | None = None,
        principal: str | None = None,
        context: str | None = None,
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.client = client
        self.gated_tools = None if tools is None else frozenset(tools)
        self.run_id = run_id
        self.principal = principal
        self.context = context
        self.deadline = deadline

    def _gates(self, name: str) -> bool:
        return self.gated_tools is None or name in self.gated_tools

    def _submission(self, request: ToolCallRequest) -> dict[str, Any]:
        call = request.tool_call
        thread = _thread(request)
        context = self.context
        if context is None:
            context = CONTEXT if thread is None else CONTEXT_THREAD.format(thread=thread)
        return {
            "tool": call["name"],
            "arguments": call.get("args") or {},
            "principal": self.principal,
            "run_id": self.run_id if self.run_id is not None else thread,
            "context": context,
            "usage": self._usage(request),
            "deadline": self.deadline,
        }

    def _usage(self, request: ToolCallRequest) -> dict[str, int] | None:
        """The tokens of the model message that asked for this call, when this is the first
        call from that message that is gated here."""
        call_id = request.tool_call.get("id")
        for message in reversed(_messages(request.state)):
            if not isinstance(message, AIMessage):
                continue
            gated = [call.get("id") for call in message.tool_calls if self._gates(call["name"])]
            if call_id not in gated:
                continue
            metadata = message.usage_metadata
            if gated[0] != call_id or not metadata:
                return None
            return {
                "input_tokens": metadata.get("input_tokens", 0),
                "output_tokens": metadata.get("output_tokens", 0),
            }
        return None

    def _outcome(self, request: ToolCallRequest, final: protocol.CallState) -> _Decided:
        """The request to run (edited when the approver edited it) with the call's receipt,
        or the refusal."""
        try:
            protocol.raise_unless_go(final)
            edited = protocol.edited_arguments(final)
        except errors.NotApproved as no:
            return self._refusal(request, NOT_APPROVED.format(message=no))
        receipt = final.get("receipt")
        if edited is not None:
            request = request.override(tool_call={**request.tool_call, "args": edited})
        return request, receipt if isinstance(receipt, str) else None

    @staticmethod
    def _refusal(request: ToolCallRequest, reason: str) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(
            content=reason, tool_call_id=call.get("id") or "", name=call["name"], status="error"
        )

    def _failed(self, request: ToolCallRequest, error: Exception) -> ToolMessage:
        if isinstance(error, errors.NotApproved):
            return self._refusal(request, NOT_APPROVED.format(message=error))
        return self._refusal(request, FAILED.format(kind=type(error).__name__))

    def _decide(self, request: ToolCallRequest) -> _Decided:
        if not isinstance(self.client, Client):
            raise TypeError(NEEDS_ASYNC)
        try:
            final = _call(self.client, **self._submission(request))
        except Exception as error:  # whatever it is, the tool must not run
            return self._failed(request, error)
        return self._outcome(request, final)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        if not self._gates(request.tool_call["name"]):
            return handler(request)
        decided = self._decide(request)
        if isinstance(decided, ToolMessage):
            return decided
        approved, receipt = decided
        with receipt_context(receipt):
            return handler(approved)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        if not self._gates(request.tool_call["name"]):
            return await handler(request)
        if isinstance(self.client, Client):
            decided = await asyncio.to_thread(self._decide, request)
        else:
            try:
                final = await _acall(self.client, **self._submission(request))
            except Exception as error:  # whatever it is, the tool must not run
                decided = self._failed(request, error)
            else:
                decided = self._outcome(request, final)
        if isinstance(decided, ToolMessage):
            return decided
        approved, receipt = decided
        with receipt_context(receipt):
            return await handler(approved)


def _call(client: Client, *, deadline: float | None, **submission: Any) -> protocol.CallState:
    return client.wait(client.submit(**submission), deadline=deadline)


async def _acall(
    client: AsyncClient, *, deadline: float | None, **submission: Any
) -> protocol.CallState:
    return await client.wait(await client.submit(**submission), deadline=deadline)


# --- HumanInTheLoopMiddleware's interrupt ---------------------------------------------------


def _requests(value: object) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The interrupt's action requests, and the decisions each tool's review allows."""
    value = getattr(value, "value", value)  # an ``Interrupt`` or its value
    if not isinstance(value, Mapping) or not isinstance(value.get("action_requests"), list):
        raise ValueError(NOT_HITL)
    allowed = {
        str(config.get("action_name")): list(config.get("allowed_decisions") or [])
        for config in value.get("review_configs") or []
        if isinstance(config, Mapping)
    }
    return list(value["action_requests"]), allowed


def _decision(
    action: Mapping[str, Any], allowed: list[str], final: protocol.CallState | Exception
) -> dict[str, Any]:
    """One HITL decision for one action, from its final state (or what kept it away)."""
    if isinstance(final, Exception):
        if isinstance(final, errors.NotApproved):
            return {"type": "reject", "message": NOT_APPROVED.format(message=final)}
        return {"type": "reject", "message": FAILED.format(kind=type(final).__name__)}
    try:
        protocol.raise_unless_go(final)
        edited = protocol.edited_arguments(final)
    except errors.NotApproved as no:
        return {"type": "reject", "message": NOT_APPROVED.format(message=no)}
    if edited is None:
        return {"type": "approve"}
    if "edit" not in allowed:
        return {"type": "reject", "message": EDIT_NOT_ALLOWED.format(arguments=final["arguments"])}
    return {"type": "edit", "edited_action": {"name": action["name"], "args": edited}}


def _submission(
    action: Mapping[str, Any],
    *,
    run_id: str | None,
    principal: str | None,
    context: str | None,
) -> dict[str, Any]:
    return {
        "tool": str(action.get("name", "")),
        "arguments": action.get("args") or {},
        "principal": principal,
        "run_id": run_id,
        "context": context if context is not None else action.get("description") or CONTEXT,
    }


def resolve_hitl_interrupt(
    value: object,
    *,
    client: Client,
    run_id: str | None = None,
    principal: str | None = None,
    context: str | None = None,
    deadline: float | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``{"decisions": [...]}`` for a ``HumanInTheLoopMiddleware`` interrupt (its value, or
    the ``Interrupt``): every action is submitted first, so that all are before a person at
    once, then each is waited for; ``approve``, ``edit`` with the approver's arguments, or
    ``reject`` with the reason. Resume with ``Command(resume=...)``. ``context`` defaults to
    the description the middleware wrote for each action."""
    actions, allowed = _requests(value)
    pending: list[protocol.CallState | Exception] = []
    for action in actions:
        try:
            pending.append(
                client.submit(
                    **_submission(action, run_id=run_id, principal=principal, context=context)
                )
            )
        except Exception as error:  # that action is rejected; the others go on
            pending.append(error)
    finals: list[protocol.CallState | Exception] = []
    for state in pending:
        try:
            finals.append(
                state if isinstance(state, Exception) else client.wait(state, deadline=deadline)
            )
        except Exception as error:  # whatever it is, that tool must not run
            finals.append(error)
    return {
        "decisions": [
            _decision(action, allowed.get(str(action.get("name")), []), final)
            for action, final in zip(actions, finals, strict=True)
        ]
    }


async def aresolve_hitl_interrupt(
    value: object,
    *,
    client: AsyncClient,
    run_id: str | None = None,
    principal: str | None = None,
    context: str | None = None,
    deadline: float | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``resolve_hitl_interrupt`` for an ``AsyncClient``: the actions are waited for together."""
    actions, allowed = _requests(value)

    async def decide(action: Mapping[str, Any]) -> protocol.CallState | Exception:
        submission = _submission(action, run_id=run_id, principal=principal, context=context)
        try:
            return await _acall(client, deadline=deadline, **submission)
        except Exception as error:  # whatever it is, that tool must not run
            return error

    finals = await asyncio.gather(*(decide(action) for action in actions))
    return {
        "decisions": [
            _decision(action, allowed.get(str(action.get("name")), []), final)
            for action, final in zip(actions, finals, strict=True)
        ]
    }
