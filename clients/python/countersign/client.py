"""``Client`` and ``AsyncClient``: submit a tool call, wait for its decision, run it only on go.

Both build requests and read answers with ``countersign.protocol`` and wait by the plan in
``countersign.waiting``; only their I/O differs. The sync client uses websockets' own sync
client rather than an event loop of its own, so it also works where a loop is already
running (a notebook, sync code called from async code).

Fail-closed: anything but a final ``allowed`` or ``approved`` — a refusal, a denial, an error,
an unreachable service, a deadline passed — ends in a ``NotApproved`` from ``gated``, never in
running the function. A wait's deadline is kept by the wall clock, whatever the service does:
the sync client runs a wait with a deadline where it can be abandoned (``countersign.bounded``),
the async one under ``asyncio.timeout``.

A wait says once, at INFO on the ``countersign`` logger, which call it waits for, why it is
held and the page where a person decides it; a wait interrupted (Ctrl-C, a cancelled task)
withdraws its call, as one that reaches its deadline does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, ParamSpec, Self, TypeVar

import httpx
from websockets.asyncio.client import connect as connect_async
from websockets.sync.client import connect as connect_sync

from countersign import bounded, errors, protocol, waiting
from countersign.protocol import CallState
from countersign.receipts import receipt_context

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("countersign")


class Client:
    """The agent API over HTTP and WebSockets, for synchronous code.

    ``base_url`` is the service (``http://127.0.0.1:8000``) and ``token`` the agent's API
    token; either left out is read from ``COUNTERSIGN_URL`` / ``COUNTERSIGN_TOKEN`` (a
    ``ValueError`` naming the variable when it is not set). ``timeout`` is the seconds allowed
    for each HTTP request or WebSocket handshake (a long-poll gets its own wait on top).
    ``reconnect_for`` bounds how long a wait keeps trying to reach a service it lost, from the
    last time the service answered, before it raises ``ServiceUnavailable`` (None: for as long
    as its deadline allows). ``http`` is an ``httpx.Client`` to use instead of one of its own
    (proxies, TLS settings, tests); it is left open by ``close``.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        reconnect_for: float | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        self.base_url = protocol.base_url(protocol.configured_url(base_url))
        self.timeout = timeout
        self.reconnect_for = reconnect_for
        self._auth = protocol.auth_headers(protocol.configured_token(token))
        self._shown_url = str(httpx.URL(self.base_url).copy_with(userinfo=b""))
        self._own_http = http is None
        self._http = httpx.Client(timeout=timeout) if http is None else http

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def submit(
        self,
        tool: str,
        arguments: object,
        *,
        principal: str | None = None,
        run_id: str | None = None,
        context: str | None = None,
        usage: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> CallState:
        """Submit a call and return its state, whose status is the verdict (``pending`` if
        held). ``arguments`` is JSON text (sent as is) or anything ``json.dumps`` takes, and
        ``Decimal`` amounts, sent as strings of their exact decimal text (``"12.34"``); so is
        a ``Decimal`` cost in ``usage``.

        Network errors and 502/503/504 are retried with the same Idempotency-Key, so a retry
        never creates a second call; other errors raise at once."""
        body = protocol.submit_body(
            tool, arguments, principal=principal, run_id=run_id, context=context, usage=usage
        )
        headers = protocol.submit_headers(self._auth, idempotency_key)
        return self._request("POST", protocol.CALLS_PATH, content=body, headers=headers)

    def get(self, call: CallState | str) -> CallState:
        """The call's current state (``call`` is a state or a call id)."""
        return self._request("GET", protocol.call_path(call))

    def cancel(self, call: CallState | str) -> CallState:
        """Withdraw a pending call; ``Conflict`` if it is final already. Not retried: the retry
        of a cancel that went through would be told ``Conflict``."""
        return self._request("POST", protocol.call_path(call, "/cancel"), attempts=1)

    def wait(
        self, call: CallState | str, *, deadline: float | None = None, cancel: bool = True
    ) -> CallState:
        """The call's final state: by WebSocket, else by long-poll, reconnecting with backoff
        for as long as it takes. ``deadline`` (seconds from now) bounds that: past it the call
        is cancelled, so that nobody approves a call that will not run, and ``TimedOut`` says
        so; with ``cancel=False`` it is left pending (for a caller that waits in pieces). A
        call decided just as it was being cancelled returns its final state. Interrupted
        (``KeyboardInterrupt``), it withdraws the call too, unless ``cancel=False``, and
        re-raises."""
        if protocol.is_final(call):
            return call
        plan = waiting.WaitPlan(deadline, reconnect_for=self.reconnect_for)
        try:
            logger.info(waiting.held_notice(call, page=protocol.page_url(self._shown_url, call)))
            return self._wait_by_deadline(call, plan)
        except waiting.DeadlineReached as reached:
            seconds = reached.seconds
        except KeyboardInterrupt:
            if cancel:
                self._withdraw(call)
            raise
        return self._give_up(call, seconds=seconds, cancel=cancel)

    def _wait_by_deadline(self, call: CallState | str, plan: waiting.WaitPlan) -> CallState:
        """``_wait``, ended at the plan's deadline even while a request is held (a service
        dribbling its answer): it runs on a thread that is abandoned there, and told to stop."""
        left = plan.time_left()
        if left is None:
            return self._wait(call, plan)
        try:
            return bounded.within(left, lambda: self._wait(call, plan))
        except bounded.NoAnswer:
            raise plan.overran() from None
        finally:
            plan.abandon()

    def _withdraw(self, call: CallState | str) -> None:
        failure: Exception | None = None
        try:
            bounded.within(
                waiting.WITHDRAW_TIMEOUT,
                lambda: self._request(
                    "POST",
                    protocol.call_path(call, "/cancel"),
                    attempts=1,
                    timeout=min(self.timeout, waiting.WITHDRAW_TIMEOUT),
                ),
            )
        except (errors.NotApproved, bounded.NoAnswer) as error:
            failure = error
        logger.info(waiting.withdrawn_notice(call, failure))

    def _give_up(self, call: CallState | str, *, seconds: float, cancel: bool) -> CallState:
        if not cancel:
            raise errors.TimedOut(
                errors.DEADLINE_PASSED, call_id=protocol.call_id(call), cancelled=False
            )
        try:
            state = bounded.within(waiting.WITHDRAW_TIMEOUT, lambda: self._cancel_or_read(call))
        except (errors.NotApproved, bounded.NoAnswer) as error:
            raise waiting.not_cancelled(call, seconds=seconds, error=error) from error
        return waiting.gave_up(state, seconds=seconds)

    def _cancel_or_read(self, call: CallState | str) -> CallState:
        """The call's state once cancelled, or, final already, as it ended."""
        timeout = min(self.timeout, waiting.WITHDRAW_TIMEOUT)
        try:
            return self._request("POST", protocol.call_path(call, "/cancel"), timeout=timeout)
        except errors.Conflict:  # final already: decided meanwhile, or a retried cancel
            return self._request("GET", protocol.call_path(call), timeout=timeout)

    def _wait(self, call: CallState | str, plan: waiting.WaitPlan) -> CallState:
        while True:
            if plan.websocket:
                try:
                    return self._wait_socket(call, plan)
                except waiting.SocketRefused:
                    plan.websocket = False
                except waiting.SocketLost:
                    pass
            try:
                state = self._poll(call, plan)
            except waiting.PollFailed:
                time.sleep(plan.pause())
                continue
            plan.reached()
            if protocol.is_final(state):
                return state

    def call(
        self,
        tool: str,
        arguments: object,
        *,
        principal: str | None = None,
        run_id: str | None = None,
        context: str | None = None,
        usage: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        deadline: float | None = None,
    ) -> CallState:
        """``submit`` and ``wait``: the final state, whatever it is (past ``deadline``, the
        call is cancelled and ``TimedOut`` raised)."""
        state = self.submit(
            tool,
            arguments,
            principal=principal,
            run_id=run_id,
            context=context,
            usage=usage,
            idempotency_key=idempotency_key,
        )
        return self.wait(state, deadline=deadline)

    def gated(
        self,
        tool: str,
        *,
        principal: str | None = None,
        run_id: str | None = None,
        context: protocol.GatedContext = None,
        deadline: float | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: each call of the function is submitted as ``tool`` with the function's
        arguments by parameter name, and the function runs only if the call is allowed or
        approved (with the approver's edited arguments, by parameter name, when they edited
        them). Otherwise it does not run and a ``NotApproved`` says why: ``Denied`` (with the
        status and comment), ``TimedOut`` when ``deadline`` seconds pass first (the call is
        cancelled), ``EditDoesNotFit`` for an edit the function's parameters cannot take (the
        call stays approved and counted), or the error that kept the answer away (an
        unreachable service too). While the function runs, ``countersign.current_receipt()``
        is the call's receipt (docs/receipts.md), for a function under ``requires_receipt``
        or a service it calls that verifies it.

        ``context`` is what the approver reads as the reason for the call: a string, or a
        function given the arguments as submitted (name → value, defaults included) that
        returns one for each call (docs/api.md, "The Python client")."""

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            signature = inspect.signature(function)

            @functools.wraps(function)
            def gate(*args: P.args, **kwargs: P.kwargs) -> R:
                arguments = protocol.bound_arguments(signature, args, kwargs)
                state = self.call(
                    tool,
                    arguments,
                    principal=principal,
                    run_id=run_id,
                    context=protocol.gated_context(context, arguments),
                    deadline=deadline,
                )
                protocol.raise_unless_go(state)
                run_args, run_kwargs = protocol.gated_call(signature, args, kwargs, state)
                with receipt_context(state.get("receipt")):
                    return function(*run_args, **run_kwargs)

            return gate

        return decorate

    def _request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        attempts: int = protocol.ATTEMPTS,
        timeout: float | None = None,
    ) -> CallState:
        failure = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(protocol.backoff(attempt))
            try:
                response = self._http.request(
                    method,
                    self.base_url + path,
                    content=content,
                    headers=headers or self._auth,
                    timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
                )
            except httpx.TransportError as error:
                failure = errors.UNREACHABLE.format(kind=type(error).__name__, url=self._shown_url)
                continue
            if response.status_code not in protocol.RETRY_STATUSES:
                return protocol.state_from(response)
            failure = f"HTTP {response.status_code}"
        raise protocol.unavailable(failure)

    def _poll(self, call: CallState | str, plan: waiting.WaitPlan) -> CallState:
        query, read = plan.poll(self.timeout)
        try:
            response = self._http.get(
                self.base_url + protocol.call_path(call, "/wait"),
                params=query,
                headers=self._auth,
                timeout=httpx.Timeout(self.timeout, read=read),
            )
        except httpx.TransportError:
            raise waiting.PollFailed from None
        return waiting.poll_state(response)

    def _wait_socket(self, call: CallState | str, plan: waiting.WaitPlan) -> CallState:
        url = protocol.socket_url(self.base_url, call)
        try:
            with connect_sync(
                url,
                additional_headers=self._auth,
                open_timeout=plan.open_timeout(self.timeout),
                close_timeout=waiting.CLOSE_TIMEOUT,
            ) as socket:
                plan.reached()
                while True:
                    state = waiting.call_message(socket.recv(timeout=plan.time_left()))
                    if state is not None and protocol.is_final(state):
                        return state
        except waiting.SOCKET_ERRORS as error:
            raise waiting.socket_failure(error) from None


class AsyncClient:
    """``Client`` for asyncio code: the same methods, as coroutines; ``http`` is an
    ``httpx.AsyncClient``; close with ``aclose`` or ``async with``."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        reconnect_for: float | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = protocol.base_url(protocol.configured_url(base_url))
        self.timeout = timeout
        self.reconnect_for = reconnect_for
        self._auth = protocol.auth_headers(protocol.configured_token(token))
        self._shown_url = str(httpx.URL(self.base_url).copy_with(userinfo=b""))
        self._own_http = http is None
        self._http = httpx.AsyncClient(timeout=timeout) if http is None else http
        # Withdrawals of interrupted waits, each a task of its own (see ``_withdraw``).
        self._withdrawals: set[asyncio.Task[None]] = set()

    async def aclose(self) -> None:
        if self._withdrawals:
            await asyncio.wait(set(self._withdrawals), timeout=waiting.WITHDRAW_TIMEOUT)
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def submit(
        self,
        tool: str,
        arguments: object,
        *,
        principal: str | None = None,
        run_id: str | None = None,
        context: str | None = None,
        usage: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> CallState:
        """As ``Client.submit``."""
        body = protocol.submit_body(
            tool, arguments, principal=principal, run_id=run_id, context=context, usage=usage
        )
        headers = protocol.submit_headers(self._auth, idempotency_key)
        return await self._request("POST", protocol.CALLS_PATH, content=body, headers=headers)

    async def get(self, call: CallState | str) -> CallState:
        """As ``Client.get``."""
        return await self._request("GET", protocol.call_path(call))

    async def cancel(self, call: CallState | str) -> CallState:
        """As ``Client.cancel``."""
        return await self._request("POST", protocol.call_path(call, "/cancel"), attempts=1)

    async def wait(
        self, call: CallState | str, *, deadline: float | None = None, cancel: bool = True
    ) -> CallState:
        """As ``Client.wait``; the task cancelled (``CancelledError``) is the interruption."""
        if protocol.is_final(call):
            return call
        plan = waiting.WaitPlan(deadline, reconnect_for=self.reconnect_for)
        try:
            logger.info(waiting.held_notice(call, page=protocol.page_url(self._shown_url, call)))
            return await self._wait_by_deadline(call, plan)
        except waiting.DeadlineReached as reached:
            seconds = reached.seconds
        except asyncio.CancelledError:
            if cancel:
                await self._withdraw(call)
            raise
        return await self._give_up(call, seconds=seconds, cancel=cancel)

    async def _wait_by_deadline(self, call: CallState | str, plan: waiting.WaitPlan) -> CallState:
        """``_wait``, cancelled at the plan's deadline even while a request is held (a service
        dribbling its answer)."""
        bound = asyncio.timeout(plan.time_left())
        try:
            async with bound:
                return await self._wait(call, plan)
        except TimeoutError:
            if not bound.expired():
                raise
            raise plan.overran() from None

    async def _withdraw(self, call: CallState | str) -> None:
        """The cancel runs as a task of its own: a caller cancelled again, or a cancel scope
        that goes on cancelling (anyio's), stops waiting for it but does not stop it."""
        withdrawal = asyncio.ensure_future(self._withdraw_now(call))
        self._withdrawals.add(withdrawal)
        withdrawal.add_done_callback(self._withdrawals.discard)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(withdrawal)

    async def _withdraw_now(self, call: CallState | str) -> None:
        failure: Exception | None = None
        try:
            async with asyncio.timeout(waiting.WITHDRAW_TIMEOUT):
                await self._request("POST", protocol.call_path(call, "/cancel"), attempts=1)
        except errors.NotApproved as error:
            failure = error
        except TimeoutError:
            failure = bounded.NoAnswer(waiting.WITHDRAW_TIMEOUT)
        logger.info(waiting.withdrawn_notice(call, failure))

    async def _give_up(self, call: CallState | str, *, seconds: float, cancel: bool) -> CallState:
        if not cancel:
            raise errors.TimedOut(
                errors.DEADLINE_PASSED, call_id=protocol.call_id(call), cancelled=False
            )
        try:
            async with asyncio.timeout(waiting.WITHDRAW_TIMEOUT):
                try:
                    state = await self._request("POST", protocol.call_path(call, "/cancel"))
                except errors.Conflict:  # final already: decided meanwhile, or a retried cancel
                    state = await self.get(call)
        except errors.NotApproved as error:
            raise waiting.not_cancelled(call, seconds=seconds, error=error) from error
        except TimeoutError:
            no_answer = bounded.NoAnswer(waiting.WITHDRAW_TIMEOUT)
            raise waiting.not_cancelled(call, seconds=seconds, error=no_answer) from no_answer
        return waiting.gave_up(state, seconds=seconds)

    async def _wait(self, call: CallState | str, plan: waiting.WaitPlan) -> CallState:
        while True:
            if plan.websocket:
                try:
                    return await self._wait_socket(call, plan)
                except waiting.SocketRefused:
                    plan.websocket = False
                except waiting.SocketLost:
                    pass
            try:
                state = await self._poll(call, plan)
            except waiting.PollFailed:
                await asyncio.sleep(plan.pause())
                continue
            plan.reached()
            if protocol.is_final(state):
                return state

    async def call(
        self,
        tool: str,
        arguments: object,
        *,
        principal: str | None = None,
        run_id: str | None = None,
        context: str | None = None,
        usage: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        deadline: float | None = None,
    ) -> CallState:
        """As ``Client.call``."""
        state = await self.submit(
            tool,
            arguments,
            principal=principal,
            run_id=run_id,
            context=context,
            usage=usage,
            idempotency_key=idempotency_key,
        )
        return await self.wait(state, deadline=deadline)

    def gated(
        self,
        tool: str,
        *,
        principal: str | None = None,
        run_id: str | None = None,
        context: protocol.GatedContext = None,
        deadline: float | None = None,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
        """As ``Client.gated``, for ``async def`` functions (a ``context`` function is a plain
        one: it is called, not awaited)."""

        def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
            if not inspect.iscoroutinefunction(function):
                raise TypeError(errors.NOT_ASYNC)
            signature = inspect.signature(function)

            @functools.wraps(function)
            async def gate(*args: P.args, **kwargs: P.kwargs) -> R:
                arguments = protocol.bound_arguments(signature, args, kwargs)
                state = await self.call(
                    tool,
                    arguments,
                    principal=principal,
                    run_id=run_id,
                    context=protocol.gated_context(context, arguments),
                    deadline=deadline,
                )
                protocol.raise_unless_go(state)
                run_args, run_kwargs = protocol.gated_call(signature, args, kwargs, state)
                with receipt_context(state.get("receipt")):
                    return await function(*run_args, **run_kwargs)

            return gate

        return decorate

    async def _request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        attempts: int = protocol.ATTEMPTS,
    ) -> CallState:
        failure = ""
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(protocol.backoff(attempt))
            try:
                response = await self._http.request(
                    method, self.base_url + path, content=content, headers=headers or self._auth
                )
            except httpx.TransportError as error:
                failure = errors.UNREACHABLE.format(kind=type(error).__name__, url=self._shown_url)
                continue
            if response.status_code not in protocol.RETRY_STATUSES:
                return protocol.state_from(response)
            failure = f"HTTP {response.status_code}"
        raise protocol.unavailable(failure)

    async def _poll(self, call: CallState | str, plan: waiting.WaitPlan) -> CallState:
        query, read = plan.poll(self.timeout)
        try:
            response = await self._http.get(
                self.base_url + protocol.call_path(call, "/wait"),
                params=query,
                headers=self._auth,
                timeout=httpx.Timeout(self.timeout, read=read),
            )
        except httpx.TransportError:
            raise waiting.PollFailed from None
        return waiting.poll_state(response)

    async def _wait_socket(self, call: CallState | str, plan: waiting.WaitPlan) -> CallState:
        url = protocol.socket_url(self.base_url, call)
        try:
            async with (
                asyncio.timeout(plan.time_left()),
                connect_async(
                    url,
                    additional_headers=self._auth,
                    open_timeout=plan.open_timeout(self.timeout),
                    close_timeout=waiting.CLOSE_TIMEOUT,
                ) as socket,
            ):
                plan.reached()
                while True:
                    state = waiting.call_message(await socket.recv())
                    if state is not None and protocol.is_final(state):
                        return state
        except waiting.SOCKET_ERRORS as error:
            raise waiting.socket_failure(error) from None
