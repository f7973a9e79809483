"""PydanticAI (``pydantic-ai-slim``): Countersign answers a run's deferred tool approvals.

An agent whose tools need approval (``requires_approval=True``, or ``ApprovalRequired`` raised
in a tool) and whose ``output_type`` includes ``DeferredToolRequests`` ends its run with the
calls it wants to make. ``approve_deferred(requests, client=...)`` submits every one of
``requests.approvals`` at once, waits for them together, and answers each: ``True`` when
allowed or approved, ``ToolApproved(override_args=...)`` when the approver edited the
arguments, and ``ToolDenied(message)`` otherwise — refused, denied, expired, given up on,
Countersign unreachable or failing — so the tool does not run and the model reads why. An
approved call's receipt (docs/receipts.md) goes with it as the tool's
``ctx.tool_call_metadata["dev.countersign/receipt"]``. The
caller resumes with ``agent.run(message_history=result.all_messages(),
deferred_tool_results=...)``. ``approve_deferred_async`` is the same for an ``AsyncClient``.

Token usage: the run's ``result.usage``, passed as ``usage``, goes with the first call
submitted, so that the run's tokens count once in its budget (a resumed run counts afresh).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.usage import RunUsage

from countersign import errors, protocol
from countersign.client import AsyncClient, Client
from countersign.receipts import RECEIPT_META_KEY

NOT_APPROVED = "Countersign: {message}"
FAILED = "Countersign could not decide this call ({kind}), so the tool did not run."
CONTEXT = "PydanticAI agent"

Approval = bool | ToolApproved | ToolDenied


def _usage(usage: RunUsage | None) -> dict[str, int] | None:
    if usage is None or not (usage.input_tokens or usage.output_tokens):
        return None
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}


def _submission(
    part: ToolCallPart,
    *,
    usage: dict[str, int] | None,
    run_id: str | None,
    principal: str | None,
    context: str | None,
) -> dict[str, Any]:
    return {
        "tool": part.tool_name,
        # The model's own text when it wrote text, so the approver reads what it asked for.
        "arguments": part.args_as_json_str(),
        "principal": principal,
        "run_id": run_id,
        "context": context if context is not None else CONTEXT,
        "usage": usage,
    }


def _approval(final: protocol.CallState | Exception) -> Approval:
    """The answer to one deferred call, from its final state (or what kept it away)."""
    if isinstance(final, Exception):
        if isinstance(final, errors.NotApproved):
            return ToolDenied(NOT_APPROVED.format(message=final))
        return ToolDenied(FAILED.format(kind=type(final).__name__))
    try:
        protocol.raise_unless_go(final)
        edited = protocol.edited_arguments(final)
    except errors.NotApproved as no:
        return ToolDenied(NOT_APPROVED.format(message=no))
    return True if edited is None else ToolApproved(override_args=edited)


def _results(
    parts: list[ToolCallPart], finals: list[protocol.CallState | Exception]
) -> DeferredToolResults:
    approvals = {
        part.tool_call_id: _approval(final) for part, final in zip(parts, finals, strict=True)
    }
    # Each approved call's receipt, which the tool reads as ``ctx.tool_call_metadata``.
    metadata = {
        part.tool_call_id: {RECEIPT_META_KEY: final["receipt"]}
        for part, final in zip(parts, finals, strict=True)
        if not isinstance(final, Exception)
        and not isinstance(approvals[part.tool_call_id], ToolDenied)
        and isinstance(final.get("receipt"), str)
    }
    return DeferredToolResults(approvals=approvals, metadata=metadata)


def approve_deferred(
    requests: DeferredToolRequests,
    *,
    client: Client,
    usage: RunUsage | None = None,
    run_id: str | None = None,
    principal: str | None = None,
    context: str | None = None,
    deadline: float | None = None,
) -> DeferredToolResults:
    """Countersign's answers to ``requests.approvals``, for ``deferred_tool_results=``: all
    are submitted first, so that a person has them all at once, then waited for. ``usage`` is
    the run's (``result.usage``); ``context`` what the approver reads; ``deadline`` the
    longest wait in seconds for them all, after which the undecided ones are cancelled and
    denied. ``requests.calls`` (external calls) are not Countersign's to answer."""
    parts = list(requests.approvals)
    tokens = _usage(usage)
    pending: list[protocol.CallState | Exception] = []
    for index, part in enumerate(parts):
        submission = _submission(
            part,
            usage=tokens if index == 0 else None,
            run_id=run_id,
            principal=principal,
            context=context,
        )
        try:
            pending.append(client.submit(**submission))
        except Exception as error:  # that call is denied; the others go on
            pending.append(error)
    # One deadline for the batch, not one per call waited for in turn.
    ends = None if deadline is None else time.monotonic() + deadline
    finals: list[protocol.CallState | Exception] = []
    for state in pending:
        if isinstance(state, Exception):
            finals.append(state)
            continue
        left = None if ends is None else max(ends - time.monotonic(), 0.0)
        try:
            finals.append(client.wait(state, deadline=left))
        except Exception as error:  # whatever it is, that tool must not run
            finals.append(error)
    return _results(parts, finals)


async def approve_deferred_async(
    requests: DeferredToolRequests,
    *,
    client: AsyncClient,
    usage: RunUsage | None = None,
    run_id: str | None = None,
    principal: str | None = None,
    context: str | None = None,
    deadline: float | None = None,
) -> DeferredToolResults:
    """``approve_deferred`` for an ``AsyncClient``: the calls are waited for together."""
    parts = list(requests.approvals)
    tokens = _usage(usage)

    async def decide(index: int, part: ToolCallPart) -> protocol.CallState | Exception:
        submission = _submission(
            part,
            usage=tokens if index == 0 else None,
            run_id=run_id,
            principal=principal,
            context=context,
        )
        try:
            return await client.wait(await client.submit(**submission), deadline=deadline)
        except Exception as error:  # whatever it is, that tool must not run
            return error

    finals = await asyncio.gather(*(decide(index, part) for index, part in enumerate(parts)))
    return _results(parts, list(finals))
