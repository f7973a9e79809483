"""``countersign mcp proxy``: an MCP server in front of one upstream MCP server, on the
official ``mcp`` SDK, that asks Countersign before every ``tools/call`` (docs/integrations.md).

The proxy connects to the upstream first (a command spawned over stdio, or a streamable HTTP
URL), then serves the MCP client — over stdio, or over streamable HTTP with ``listen`` — as the
upstream would: the upstream's ``initialize`` answer (server info, capabilities,
instructions), tools, resources, prompts and completions go through unchanged. A ``tools/call``
is submitted to Countersign first and forwarded only on a final ``allowed`` or ``approved``,
with the approver's arguments when they were edited; anything else — refused, denied, expired,
cancelled, the service unreachable or answering an error, anything unforeseen — is a
``CallToolResult`` with ``isError`` and one text item saying why, and the upstream is never
called. A call forwarded carries its receipt in the request's
``_meta["dev.countersign/receipt"]``, for an upstream that verifies it (docs/receipts.md). A
held call waits as long as its hold, sending progress notifications while it waits (to
clients that asked for progress); an MCP client that cancels its request cancels the call.

Upstream tool annotations are the upstream's own claims: they are shown to the approver but
decide nothing — the service's policies do. At start the proxy logs (INFO, on the
``countersign`` logger) the tool names it will submit, ``NAME:tool`` under ``--name``: the
names rules must match.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import anyio
import mcp.types as types
import uvicorn
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from countersign import errors, protocol
from countersign.client import AsyncClient
from countersign.receipts import RECEIPT_META_KEY

logger = logging.getLogger(__name__)

EXIT_FAILED = 2

# Each request to Countersign is short, and a service lost while waiting is given up on after
# RECONNECT_FOR seconds, so that a call fails closed rather than hanging the MCP client.
REQUEST_TIMEOUT = 5.0
RECONNECT_FOR = 20.0
PROGRESS_EVERY = 5.0
CONTEXT_LIMIT = 4000  # the service's limit on a call's context
# The proxy's own environment goes to a spawned upstream (the MCP client's env block is meant
# for the server it launches), except the agent's token, which is Countersign's business only.
KEPT_FROM_UPSTREAM = (protocol.TOKEN_VARIABLE,)

NOT_APPROVED = "Countersign: {message}"
FAILED = "Countersign could not decide this call ({kind}): the tool did not run."
BAD_EDIT = (
    "Countersign: the approver's edited arguments are not a JSON object, so the tool did not "
    "run; submit the call again."
)
WAITING = "Waiting for a person to approve {tool} in Countersign (call {call_id})"
CONTEXT = "MCP tool {tool} of the {server} server: {description}"
NO_DESCRIPTION = "no description"
HINTS = " (the server calls it {hints}; hints from the server, not checked)"
READ_ONLY = "read-only"
DESTRUCTIVE = "destructive"
NOT_DESTRUCTIVE = "not destructive"
START_FAILED = "countersign mcp proxy: {message}"
SUBMITS_AS = (
    "The tools of {server} are submitted to Countersign as {names}: "
    "cap and permission rules match these names exactly."
)
NO_TOOLS = "(none listed yet)"
UPSTREAM_FAILED = "the upstream MCP server could not be started or reached ({kind}: {detail})"


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the upstream server is: a command to spawn over stdio, or a streamable HTTP URL."""

    command: Sequence[str] = ()
    url: str | None = None

    def connect(
        self,
    ) -> AbstractAsyncContextManager[tuple[Any, Any]]:
        # The SDK names the two streams' types only in private modules; ClientSession
        # checks them where they are used.
        if self.url is not None:
            return streamable_http_client(self.url)
        environment = {k: v for k, v in os.environ.items() if k not in KEPT_FROM_UPSTREAM}
        command, *args = self.command
        return stdio_client(StdioServerParameters(command=command, args=args, env=environment))


class _Held:
    """Progress notifications for a call while it is held: a count that only goes up, so that
    the upstream's own progress, relayed after it, continues from where the wait left it."""

    def __init__(self, context: ServerRequestContext[Any], *, every: float) -> None:
        self._context = context
        self._every = every
        self.sent = 0.0

    async def tick(self, message: str) -> None:
        while True:
            await anyio.sleep(self._every)
            self.sent += 1
            try:
                await self._context.session.report_progress(self.sent, None, message)
            except Exception:  # a client gone away: the request's cancel ends the wait
                return

    async def relay(self, progress: float, total: float | None, message: str | None) -> None:
        shifted = None if total is None else self.sent + total
        await self._context.session.report_progress(self.sent + progress, shifted, message)


class _Refused(Exception):
    """The call must not go to the upstream: the text the MCP client is given."""


def refusal(text: str) -> types.CallToolResult:
    """What the MCP client gets for a call that did not run: an error result saying why."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def approved_arguments(state: protocol.CallState, sent: str, original: Any) -> Any:
    """The arguments the upstream is called with: the approver's, when the approved text is not
    what was submitted (an edit by the approver), else the call's own, untouched."""
    approved = state.get("arguments")
    if not isinstance(approved, str) or approved == sent:
        return original
    try:
        edited = json.loads(approved)
    except ValueError:
        raise _Refused(BAD_EDIT) from None
    if not isinstance(edited, dict):
        raise _Refused(BAD_EDIT)
    return edited


def call_context(tool: types.Tool | None, *, name: str, server: str) -> str:
    """What the approver reads next to the call: the upstream's description of the tool, and
    its hints, said to be the server's claims."""
    description = (tool.description if tool is not None else None) or NO_DESCRIPTION
    context = CONTEXT.format(tool=name, server=server, description=description)
    annotations = tool.annotations if tool is not None else None
    if annotations is not None:
        hints = []
        if annotations.read_only_hint:
            hints.append(READ_ONLY)
        if annotations.destructive_hint is not None:
            hints.append(DESTRUCTIVE if annotations.destructive_hint else NOT_DESTRUCTIVE)
        if hints:
            context += HINTS.format(hints=", ".join(hints))
    return context[:CONTEXT_LIMIT]


class Gateway:
    """The handlers of the proxy's MCP server, over one upstream session shared by every MCP
    client of the proxy (a stdio proxy has one; an HTTP one, as many as connect)."""

    def __init__(
        self,
        upstream: ClientSession,
        countersign: AsyncClient,
        *,
        name: str | None,
        progress_every: float = PROGRESS_EVERY,
    ) -> None:
        self.upstream = upstream
        self.countersign = countersign
        self.name = name
        self.progress_every = progress_every
        # The upstream's tools as last listed, for the description shown to the approver.
        self.tools: dict[str, types.Tool] = {}

    @property
    def server_name(self) -> str:
        info = self.upstream.server_info
        return self.name or (info.name if info is not None else "upstream")

    def countersign_tool(self, tool: str) -> str:
        return f"{self.name}:{tool}" if self.name else tool

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return await self._listed(params)

    async def _listed(self, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        result = await self.upstream.list_tools(params=_bare(params))
        self.tools.update({tool.name: tool for tool in result.tools})
        return result

    async def submitted_names(self) -> list[str]:
        """The name each of the upstream's tools is submitted under, every page listed."""
        cursor: str | None = None
        while True:
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            cursor = (await self._listed(params)).next_cursor
            if cursor is None:
                return [self.countersign_tool(name) for name in self.tools]

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        held = _Held(ctx, every=self.progress_every)
        try:
            arguments, receipt = await self._decide(params, held)
        except _Refused as refused:
            return refusal(str(refused))
        except errors.NotApproved as error:
            return refusal(NOT_APPROVED.format(message=error))
        except Exception as error:  # whatever it is, the tool must not run
            return refusal(FAILED.format(kind=type(error).__name__))
        return await self.upstream.call_tool(
            params.name,
            arguments,
            progress_callback=held.relay,
            input_responses=params.input_responses,
            request_state=params.request_state,
            # The receipt, for an upstream that verifies what it runs (docs/receipts.md).
            meta=_receipt_meta(receipt),
            allow_input_required=True,
        )

    async def _describe(self, tool: str) -> types.Tool | None:
        if tool not in self.tools:  # called without a listing first: list once to learn it
            await self._listed(None)
        return self.tools.get(tool)

    async def _decide(
        self, params: types.CallToolRequestParams, held: _Held
    ) -> tuple[Any, str | None]:
        """The arguments to call the upstream with, once the call may go, and the call's
        receipt; ``_Refused`` or a ``NotApproved`` otherwise."""
        sent = protocol.arguments_text(params.arguments or {})
        context = call_context(
            await self._describe(params.name), name=params.name, server=self.server_name
        )
        # Shielded: a cancel that came while the submission was on its way would leave a call
        # held that nobody withdraws. It is delivered in the client's wait, which withdraws it.
        with anyio.CancelScope(shield=True):
            state = await self.countersign.submit(
                self.countersign_tool(params.name), sent, context=context
            )
        if not protocol.is_final(state):
            state = await self._wait(state, held, tool=params.name)
        protocol.raise_unless_go(state)
        receipt = state.get("receipt")
        arguments = approved_arguments(state, sent, params.arguments)
        return arguments, receipt if isinstance(receipt, str) else None

    async def _wait(
        self, state: protocol.CallState, held: _Held, *, tool: str
    ) -> protocol.CallState:
        """The final state of a held call, however long its hold is. The MCP client cancelling
        the request cancels the client's wait, which withdraws the call on the service, so
        nobody approves a call nobody will run."""
        message = WAITING.format(tool=tool, call_id=state["id"])
        # Kept out of the task group, which would wrap it in an ExceptionGroup.
        failure: errors.NotApproved | None = None
        async with anyio.create_task_group() as ticking:
            ticking.start_soon(held.tick, message)
            try:
                final = await self.countersign.wait(state)
            except errors.NotApproved as error:
                failure = error
            finally:
                ticking.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return final

    # --- everything else passes through ----------------------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return await self.upstream.list_resources(params=_bare(params))

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return await self.upstream.list_resource_templates(params=_bare(params))

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        request = types.ReadResourceRequest(params=_bare(params))
        return await self.upstream.send_request(request, types.ReadResourceResult)

    async def subscribe_resource(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        request = types.SubscribeRequest(params=_bare(params))
        return await self.upstream.send_request(request, types.EmptyResult)

    async def unsubscribe_resource(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        request = types.UnsubscribeRequest(params=_bare(params))
        return await self.upstream.send_request(request, types.EmptyResult)

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return await self.upstream.list_prompts(params=_bare(params))

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        request = types.GetPromptRequest(params=_bare(params))
        return await self.upstream.send_request(request, types.GetPromptResult)

    async def complete(
        self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        request = types.CompleteRequest(params=_bare(params))
        return await self.upstream.send_request(request, types.CompleteResult)

    def server(self, initialized: types.InitializeResult) -> Server[Any]:
        """The MCP server the client talks to: the handlers of what the upstream offers, and
        the upstream's own ``initialize`` answer."""
        capabilities = initialized.capabilities
        handlers: dict[str, Any] = {}
        if capabilities.tools is not None:
            handlers.update(on_list_tools=self.list_tools, on_call_tool=self.call_tool)
        if capabilities.resources is not None:
            handlers.update(
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_resource_templates,
                on_read_resource=self.read_resource,
            )
            if capabilities.resources.subscribe:
                handlers.update(
                    on_subscribe_resource=self.subscribe_resource,
                    on_unsubscribe_resource=self.unsubscribe_resource,
                )
        if capabilities.prompts is not None:
            handlers.update(on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt)
        if capabilities.completions is not None:
            handlers.update(on_completion=self.complete)
        return _PassThrough(initialized, **handlers)


def _receipt_meta(receipt: str | None) -> types.RequestParamsMeta | None:
    """The upstream request's ``_meta``: the receipt under its key, or none."""
    if receipt is None:
        return None
    return cast("types.RequestParamsMeta", {RECEIPT_META_KEY: receipt})


def _bare(params: Any) -> Any:
    """Params as the upstream gets them: without the client's ``_meta`` (its progress token
    and protocol stamps are the proxy's connection's business, not the upstream's)."""
    return None if params is None else params.model_copy(update={"meta": None})


class _PassThrough(Server[Any]):
    """A low-level server that answers ``initialize`` (and ``server/discover``) with the
    upstream's server info, capabilities and instructions rather than its own: its
    ``create_initialization_options`` reads the capabilities from ``get_capabilities``."""

    def __init__(self, initialized: types.InitializeResult, **handlers: Any) -> None:
        info = initialized.server_info
        super().__init__(
            info.name,
            version=info.version,
            title=info.title,
            description=info.description,
            instructions=initialized.instructions,
            website_url=info.website_url,
            icons=info.icons,
            **handlers,
        )
        self._upstream_capabilities = initialized.capabilities

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        return self._upstream_capabilities


@asynccontextmanager
async def gateway(
    upstream: Upstream, *, name: str | None = None, progress_every: float = PROGRESS_EVERY
) -> AsyncIterator[tuple[Gateway, Server[Any]]]:
    """The gateway connected to its upstream and to Countersign (``COUNTERSIGN_URL`` and
    ``COUNTERSIGN_TOKEN``), and the MCP server to serve; both closed on the way out."""
    countersign = AsyncClient(timeout=REQUEST_TIMEOUT, reconnect_for=RECONNECT_FOR)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(countersign)
        streams = await stack.enter_async_context(upstream.connect())
        session = await stack.enter_async_context(ClientSession(*streams))
        initialized = await session.initialize()
        proxy = Gateway(session, countersign, name=name, progress_every=progress_every)
        if initialized.capabilities.tools is not None:
            names = ", ".join(await proxy.submitted_names()) or NO_TOOLS
            logger.info(SUBMITS_AS.format(server=proxy.server_name, names=names))
        yield proxy, proxy.server(initialized)


async def serve(
    upstream: Upstream,
    *,
    name: str | None = None,
    listen: tuple[str, int] | None = None,
    progress_every: float = PROGRESS_EVERY,
) -> None:
    """Serve the gateway over stdio, or over streamable HTTP at ``listen`` (``/mcp``), until
    the client goes away (stdio) or the process is stopped (HTTP)."""
    async with gateway(upstream, name=name, progress_every=progress_every) as (_, server):
        if listen is None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return
        host, port = listen
        app = server.streamable_http_app(host=host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        await uvicorn.Server(config).serve()


def main(
    upstream: Upstream,
    *,
    name: str | None,
    listen: tuple[str, int] | None,
    progress_every: float = PROGRESS_EVERY,
) -> int:
    """``countersign mcp proxy``: the exit status. A proxy that cannot start — no URL or token
    for Countersign, an upstream that cannot be started or reached — says why in one line on
    stderr and exits 2, having served nothing (so no tool can run through it)."""
    try:
        anyio.run(lambda: serve(upstream, name=name, listen=listen, progress_every=progress_every))
    except KeyboardInterrupt:
        return 0
    except Exception as failure:
        error = _leaf(failure)
        if isinstance(error, ValueError):  # a missing or unusable COUNTERSIGN_URL or TOKEN
            return _failed(str(error))
        if isinstance(error, OSError | MCPError):
            return _failed(UPSTREAM_FAILED.format(kind=type(error).__name__, detail=error))
        raise
    return 0


def _leaf(error: BaseException) -> BaseException:
    """The one error inside the task groups' exception groups it came out through."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _failed(message: str) -> int:
    sys.stderr.write(START_FAILED.format(message=" ".join(message.split())) + "\n")
    sys.stderr.flush()
    return EXIT_FAILED
