"""The OpenAI Agents SDK (``openai-agents``): Countersign decides each function tool call.

Two ways in, both fail-closed:

- ``gated_tool(tool, client=...)`` wraps a ``FunctionTool``: every invocation is submitted and
  waited for inside the run. Allowed or approved, the tool runs (with the approver's edited
  arguments when edited); anything else — refused, denied, expired, given up on, Countersign
  unreachable or failing — and it does not run: the tool's output is the reason, so the model
  can adapt, and no exception ends the run. While the tool runs,
  ``countersign.current_receipt()`` is the call's receipt (docs/receipts.md).
- ``await resolve_interruptions(result, client=...)`` answers a run paused by the SDK's own
  ``needs_approval``: each interruption is submitted and waited for, then approved or rejected
  on the run's state, which the caller resumes with ``Runner.run(agent, state)``.

Token usage: the run's usage (``RunContextWrapper.usage``) grows over the run, and the service
counts what an agent reports as spent since its previous call, so each submission carries the
tokens not reported yet (docs/api.md, budgets in docs/policies.md).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunResult, RunResultStreaming, RunState
from agents.items import ToolApprovalItem
from agents.tool_context import ToolContext
from agents.usage import Usage

from countersign import errors, protocol
from countersign.client import AsyncClient
from countersign.receipts import receipt_context

NOT_APPROVED = "Countersign: {message}"
FAILED = "Countersign could not decide this call ({kind}), so the tool did not run."
# The SDK approves a paused call as the model wrote it: it has no way to run other arguments.
EDIT_NOT_APPLIED = (
    "Countersign: the approver approved this call only with changed arguments, so it did not "
    "run as asked. Call the tool again with exactly these arguments if they still serve: "
    "{arguments}"
)
CONTEXT = "OpenAI Agents SDK agent {agent}"
NO_ARGUMENTS = "{}"

# Where the tokens already reported are kept: on the run's ``Usage`` itself, which the SDK
# copies along with the run when it pauses and resumes, so that a resumed run does not
# report them again.
_REPORTED = "_countersign_reported"


def unreported_usage(usage: Usage) -> dict[str, int] | None:
    """The run's tokens not yet reported to Countersign, as a submission's ``usage``, and mark
    them reported; None when there are none. Marked before the submit, so that tool calls of
    one turn, run side by side, never report the same tokens twice."""
    reported_in, reported_out = getattr(usage, _REPORTED, (0, 0))
    spent_in, spent_out = usage.input_tokens, usage.output_tokens
    setattr(usage, _REPORTED, (max(spent_in, reported_in), max(spent_out, reported_out)))
    unreported = {
        "input_tokens": max(spent_in - reported_in, 0),
        "output_tokens": max(spent_out - reported_out, 0),
    }
    return unreported if any(unreported.values()) else None


def _context(context: str | None, run: RunContextWrapper[Any]) -> str | None:
    if context is not None:
        return context
    agent = getattr(run, "agent", None)
    return CONTEXT.format(agent=agent.name) if agent is not None else None


def gated_tool(
    tool: FunctionTool,
    *,
    client: AsyncClient,
    run_id: str | None = None,
    principal: str | None = None,
    context: str | None = None,
    deadline: float | None = None,
) -> FunctionTool:
    """A copy of ``tool`` that runs only when Countersign allows or approves the call, as
    ``tool``'s name with the model's arguments; otherwise its output is why it did not run.
    ``context`` is what the approver reads (by default, the agent's name); ``deadline`` is the
    longest wait in seconds, after which the call is cancelled."""
    invoke = tool.on_invoke_tool

    async def gate(ctx: ToolContext[Any], arguments: str) -> Any:
        try:
            final = await client.call(
                tool.name,
                arguments or NO_ARGUMENTS,
                principal=principal,
                run_id=run_id,
                context=_context(context, ctx),
                usage=unreported_usage(ctx.usage),
                deadline=deadline,
            )
            protocol.raise_unless_go(final)
            protocol.edited_arguments(final)  # an edit that is not an object runs nothing
        except errors.NotApproved as no:
            return NOT_APPROVED.format(message=no)
        except Exception as error:  # whatever it is, the tool must not run
            return FAILED.format(kind=type(error).__name__)
        approved = final["arguments"] if final.get("edited") is True else arguments
        with receipt_context(final.get("receipt")):
            return await invoke(ctx, approved)

    gated = copy.copy(tool)  # the SDK's own copy: the same schema, guardrails and settings
    gated.on_invoke_tool = gate
    return gated


async def _verdict(
    item: ToolApprovalItem,
    *,
    client: AsyncClient,
    usage: dict[str, int] | None,
    run_id: str | None,
    principal: str | None,
    context: str | None,
    deadline: float | None,
) -> str | None:
    """None to approve the paused call, else the message to reject it with."""
    try:
        final = await client.call(
            item.name or "",
            item.arguments or NO_ARGUMENTS,
            principal=principal,
            run_id=run_id,
            context=context if context is not None else CONTEXT.format(agent=item.agent.name),
            usage=usage,
            deadline=deadline,
        )
        protocol.raise_unless_go(final)
        edited = protocol.edited_arguments(final)
    except errors.NotApproved as no:
        return NOT_APPROVED.format(message=no)
    except Exception as error:  # whatever it is, the tool must not run
        return FAILED.format(kind=type(error).__name__)
    if edited is not None:
        return EDIT_NOT_APPLIED.format(arguments=final["arguments"])
    return None


async def resolve_interruptions(
    result: RunResult | RunResultStreaming,
    *,
    client: AsyncClient,
    run_id: str | None = None,
    principal: str | None = None,
    context: str | None = None,
    deadline: float | None = None,
) -> RunState[Any]:
    """The run's state with every interruption of ``result`` decided by Countersign: all are
    submitted at once and waited for together; each allowed or approved one is approved, every
    other is rejected with the reason as the message the model gets. Resume with
    ``Runner.run(agent, state)``. An approval of edited arguments is a rejection that tells
    the model the approved arguments, as the SDK can only run the call as it was asked."""
    # Before ``to_state``, which copies the usage with the mark on it.
    usage = unreported_usage(result.context_wrapper.usage)
    state = result.to_state()
    items = list(result.interruptions)
    verdicts = await asyncio.gather(
        *(
            _verdict(
                item,
                client=client,
                usage=usage if index == 0 else None,
                run_id=run_id,
                principal=principal,
                context=context,
                deadline=deadline,
            )
            for index, item in enumerate(items)
        )
    )
    for item, rejection in zip(items, verdicts, strict=True):
        if rejection is None:
            state.approve(item)
        else:
            state.reject(item, rejection_message=rejection)
    return state
