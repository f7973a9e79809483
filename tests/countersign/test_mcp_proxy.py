"""The MCP gateway as MCP clients use it: a real ``mcp`` ClientSession talks to
``countersign mcp proxy`` — over stdio (the proxy a subprocess spawning the upstream as its
own) and over streamable HTTP (``--listen``, the upstream over streamable HTTP too) — in front
of the test bank in ``mcp_upstream.py``, against a live Countersign server. Allowed calls come
back exactly as the upstream answers them; held ones wait for a person at the approver's
form; everything else is an ``isError`` result, and the upstream's log proves it was never
called."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from countersign.integrations import mcp_proxy
from tests.countersign import mcp_upstream
from tests.countersign.world import APPROVER, PASSWORD, TOKEN, world_create
from tests.live import Approver, LiveServer, free_port, start_server

pytestmark = pytest.mark.django_db(transaction=True)

UPSTREAM = Path(mcp_upstream.__file__)
TRANSPORTS = ["stdio", "http"]
WAIT = 20.0  # the longest any step here may take: a guard against hangs, not a measure
PROGRESS_EVERY = "0.1"
PAY = {"amount": 12.5, "invoice": "INV-1"}
BIG_PAY = {"amount": 1250.0, "invoice": "INV-2"}
BIG_WIRE = {"amount": 5000.0, "to": "ACME"}


@pytest.fixture(scope="module")
def countersign(django_db_setup: None) -> Iterator[LiveServer]:
    """One server for the module: every test makes the same world (committed, and flushed
    after it) in the database the server reads."""
    running = start_server()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "upstream.jsonl"


@pytest.fixture(autouse=True)
def world(transactional_db: None, log: Path) -> None:
    world_create()
    log.write_text("")


def proxy_env(url: str, log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env.update(
        {"COUNTERSIGN_URL": url, "COUNTERSIGN_TOKEN": TOKEN, mcp_upstream.LOG_VARIABLE: str(log)}
    )
    return env


def received(log: Path) -> list[dict[str, Any]]:
    """The calls the upstream received."""
    return [json.loads(line) for line in log.read_text().splitlines()]


def spawn(args: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """A server process, once it accepts connections on ``port``."""
    process = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{args} exited"
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return process
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError(f"{args} did not start")


def stop(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def listening_proxy(countersign_url: str, upstream_url: str, log: Path) -> tuple[str, Any]:
    port = free_port()
    args = [sys.executable, "-m", "countersign", "mcp", "proxy", "--upstream-url", upstream_url]
    args += ["--listen", f"127.0.0.1:{port}", "--progress-every", PROGRESS_EVERY]
    return f"http://127.0.0.1:{port}/mcp", spawn(args, proxy_env(countersign_url, log), port)


@pytest.fixture(scope="module")
def upstream_url(log: Path) -> Iterator[str]:
    """The test bank over streamable HTTP, for the HTTP proxy and for calling it directly."""
    port = free_port()
    env = {**os.environ, mcp_upstream.LOG_VARIABLE: str(log)}
    process = spawn([sys.executable, str(UPSTREAM), "--http", str(port)], env, port)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process)


@pytest.fixture(scope="module")
def http_proxy(countersign: LiveServer, upstream_url: str, log: Path) -> Iterator[str]:
    url, process = listening_proxy(countersign.url, upstream_url, log)
    try:
        yield url
    finally:
        stop(process)


class Ends:
    """How a test reaches the bank: through the proxy, or directly."""

    def __init__(self, transport: str, *, countersign_url: str, log: Path, **where: str) -> None:
        self.transport = transport
        self.countersign_url = countersign_url
        self.log = log
        self.where = where

    def proxy(self, *options: str, countersign_url: str | None = None) -> Any:
        if self.transport == "http":
            return _http(self.where["proxy"])
        args = ["-m", "countersign", "mcp", "proxy", "--progress-every", PROGRESS_EVERY]
        args += [*options, "--", sys.executable, str(UPSTREAM)]
        env = proxy_env(countersign_url or self.countersign_url, self.log)
        return _stdio(StdioServerParameters(command=sys.executable, args=args, env=env))

    def upstream(self) -> Any:
        if self.transport == "http":
            return _http(self.where["upstream"])
        env = {mcp_upstream.LOG_VARIABLE: str(self.log)}
        return _stdio(StdioServerParameters(command=sys.executable, args=[str(UPSTREAM)], env=env))


@asynccontextmanager
async def _stdio(parameters: StdioServerParameters) -> AsyncIterator[ClientSession]:
    async with stdio_client(parameters) as streams, ClientSession(*streams) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def _http(url: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as streams, ClientSession(*streams) as session:
        await session.initialize()
        yield session


@pytest.fixture(params=TRANSPORTS)
def ends(request: pytest.FixtureRequest, countersign: LiveServer, log: Path) -> Ends:
    if request.param == "stdio":
        return Ends("stdio", countersign_url=countersign.url, log=log)
    return Ends(
        "http",
        countersign_url=countersign.url,
        log=log,
        proxy=request.getfixturevalue("http_proxy"),
        upstream=request.getfixturevalue("upstream_url"),
    )


def calls(server: LiveServer, **query: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{server.url}/api/v1/calls",
        params=query,
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=WAIT,
    )
    return list(answer.json()["items"])


def held_call(server: LiveServer) -> dict[str, Any]:
    """The agent's pending call, once the proxy has submitted it."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if pending := calls(server, status="pending"):
            return pending[0]
        time.sleep(0.05)
    raise AssertionError("the proxy submitted nothing")


def decide(server: LiveServer, call_id: str, *, approve: bool, comment: str) -> None:
    approver = Approver(server, APPROVER, PASSWORD)
    try:
        assert approver.decide(call_id, approve=approve, comment=comment) == 303
    finally:
        approver.close()


def only_text(result: Any) -> str:
    assert result.is_error is True
    (item,) = result.content
    assert item.type == "text"
    return str(item.text)


def run(scenario: Any) -> Any:
    """``scenario()`` on an event loop, bounded so that a hang fails rather than waits."""

    async def bounded() -> Any:
        with anyio.fail_after(WAIT * 2):
            return await scenario()

    return anyio.run(bounded)


# --- pass-through -------------------------------------------------------------------------


def test_initialize_tools_resources_and_prompts_are_the_upstreams(ends: Ends) -> None:
    async def seen(connect: Any) -> list[Any]:
        async with connect() as session:
            assert session.initialize_result is not None
            initialized = session.initialize_result.model_dump(exclude={"protocol_version"})
            rates = await session.read_resource("bank://rates")
            prompt = await session.get_prompt("statement", {"account": "ACME"})
            return [
                initialized,
                (await session.list_tools()).model_dump(),
                (await session.list_resources()).model_dump(),
                rates.model_dump(),
                (await session.list_prompts()).model_dump(),
                prompt.model_dump(),
            ]

    through, direct = run(lambda: seen(ends.proxy)), run(lambda: seen(ends.upstream))
    assert through == direct
    tools = {tool["name"]: tool for tool in through[1]["tools"]}
    assert set(tools) == {"balance", "pay", "wire"}
    assert tools["wire"]["annotations"]["read_only_hint"] is True  # the hints go through


# --- decisions ----------------------------------------------------------------------------


def test_an_allowed_call_returns_the_upstreams_result_exactly(
    ends: Ends, countersign: LiveServer, log: Path
) -> None:
    small_wire = {"amount": 50.0, "to": "ACME"}

    async def answers(connect: Any) -> list[str]:
        async with connect() as session:
            return [
                (await session.call_tool(tool, arguments)).model_dump_json(by_alias=True)
                for tool, arguments in [("pay", PAY), ("wire", small_wire)]
            ]

    assert run(lambda: answers(ends.proxy)) == run(lambda: answers(ends.upstream))
    once = [
        {"tool": "pay", "arguments": {**PAY, "currency": "USD"}},
        {"tool": "wire", "arguments": small_wire},
    ]
    assert received(log) == once + once  # through the proxy, then directly
    wire, pay = calls(countersign)
    assert (pay["tool"], pay["status"], wire["tool"], wire["status"]) == (
        "pay",
        "allowed",
        "wire",
        "allowed",
    )


def test_a_call_over_the_cap_is_held_approved_and_forwarded_with_progress(
    ends: Ends, countersign: LiveServer, log: Path
) -> None:
    progress: list[tuple[float, str | None]] = []

    async def scenario() -> Any:
        waiting = anyio.Event()

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))
            waiting.set()

        async def approve() -> None:
            await waiting.wait()  # the client has heard that the call is held
            call = await anyio.to_thread.run_sync(held_call, countersign)
            await anyio.to_thread.run_sync(
                lambda: decide(countersign, call["id"], approve=True, comment="Go ahead.")
            )

        async with ends.proxy() as session, anyio.create_task_group() as group:
            group.start_soon(approve)
            return await session.call_tool("pay", BIG_PAY, progress_callback=on_progress)

    result = run(scenario)
    assert result.is_error is False
    assert result.content[0].text == "paid USD 1250.00 for INV-2"
    assert received(log) == [{"tool": "pay", "arguments": {**BIG_PAY, "currency": "USD"}}]
    (call,) = calls(countersign)
    assert (call["status"], call["decision"]["comment"]) == ("approved", "Go ahead.")
    assert progress[0] == (1.0, mcp_proxy.WAITING.format(tool="pay", call_id=call["id"]))


def test_a_denied_call_is_an_error_with_the_comment_and_never_reaches_the_upstream(
    ends: Ends, countersign: LiveServer, log: Path
) -> None:
    async def scenario() -> Any:
        async def deny() -> None:
            call = await anyio.to_thread.run_sync(held_call, countersign)
            await anyio.to_thread.run_sync(
                lambda: decide(countersign, call["id"], approve=False, comment="Use the card.")
            )

        async with ends.proxy() as session, anyio.create_task_group() as group:
            group.start_soon(deny)
            return await session.call_tool("pay", BIG_PAY)

    text = only_text(run(scenario))
    assert text.startswith("Countersign: The call was denied: do not run the tool")
    assert text.endswith("Comment: Use the card.")
    assert received(log) == []


def test_a_refusal_holds_whatever_the_upstream_hints(
    ends: Ends, countersign: LiveServer, log: Path
) -> None:
    # wire says it is read-only: the rule refuses it all the same.
    async def scenario() -> Any:
        async with ends.proxy() as session:
            return await session.call_tool("wire", BIG_WIRE)

    text = only_text(run(scenario))
    assert text.startswith("Countersign: The call was refused")
    assert "over the limit of USD 100.00" in text
    assert received(log) == []
    (call,) = calls(countersign)
    assert "read-only; hints from the server, not checked" in call_page(countersign, call["id"])


def call_page(server: LiveServer, call_id: str) -> str:
    page = Approver(server, APPROVER, PASSWORD)
    try:
        return str(page.http.get(f"/calls/{call_id}/").text)
    finally:
        page.close()


def test_a_client_that_cancels_its_request_cancels_the_call(
    ends: Ends, countersign: LiveServer, log: Path
) -> None:
    async def scenario() -> None:
        async with ends.proxy() as session:
            with anyio.CancelScope() as scope:

                async def give_up() -> None:
                    await anyio.to_thread.run_sync(held_call, countersign)
                    scope.cancel()

                async with anyio.create_task_group() as group:
                    group.start_soon(give_up)
                    await session.call_tool("pay", BIG_PAY)
            # The session stays usable, and the proxy has withdrawn the call.
            await session.list_tools()

    run(scenario)
    deadline = time.monotonic() + WAIT
    while calls(countersign)[0]["status"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls(countersign)[0]["status"] == "cancelled"
    assert received(log) == []


# --- failing closed -------------------------------------------------------------------------


def test_countersign_stopped_is_an_error_and_the_upstream_is_never_called(
    ends: Ends, log: Path, upstream_url: str
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    if ends.transport == "http":
        url, process = listening_proxy(dead, upstream_url, log)
        ends = Ends("http", countersign_url=dead, log=log, proxy=url, upstream=upstream_url)
    else:
        process = None

    async def scenario() -> Any:
        async with ends.proxy(countersign_url=dead) as session:
            return await session.call_tool("balance", {"account": "ACME"})

    try:
        text = only_text(run(scenario))
    finally:
        if process is not None:
            stop(process)
    assert text.startswith("Countersign: The approval service could not be reached")
    assert received(log) == []


def test_with_a_name_tools_are_submitted_under_it(countersign: LiveServer, log: Path) -> None:
    ends = Ends("stdio", countersign_url=countersign.url, log=log)

    async def scenario() -> Any:
        async with ends.proxy("--name", "bank") as session:
            return await session.call_tool("balance", {"account": "ACME"})

    assert run(scenario).content[0].text == "ACME: USD 1,234.56"
    (call,) = calls(countersign)
    assert (call["tool"], call["status"]) == ("bank:balance", "allowed")


def test_at_start_it_logs_the_names_it_will_submit(countersign: LiveServer, log: Path) -> None:
    # Rules written for "pay" do not match "bank:pay": the proxy says which names it submits.
    args = ["-m", "countersign", "mcp", "proxy", "--name", "bank", "--", sys.executable]
    proxy = subprocess.Popen(
        [sys.executable, *args, str(UPSTREAM)],
        env=proxy_env(countersign.url, log),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    hang_guard = threading.Timer(WAIT, proxy.kill)  # a proxy that says nothing fails the test
    hang_guard.start()
    try:
        assert proxy.stderr is not None
        said = proxy.stderr.readline()
    finally:
        hang_guard.cancel()
        stop(proxy)
    names = "bank:balance, bank:pay, bank:wire"
    assert said == f"countersign: {mcp_proxy.SUBMITS_AS.format(server='bank', names=names)}\n"


def test_no_token_refuses_to_start(log: Path) -> None:
    env = proxy_env("http://127.0.0.1:9", log)
    del env["COUNTERSIGN_TOKEN"]
    done = subprocess.run(
        [sys.executable, "-m", "countersign", "mcp", "proxy", "--", sys.executable, str(UPSTREAM)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == mcp_proxy.EXIT_FAILED
    assert done.stdout == ""
    assert "COUNTERSIGN_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr


# --- the arguments the upstream is called with ----------------------------------------------


def test_edited_arguments_are_the_ones_forwarded() -> None:
    sent = '{"amount": 1250.0, "invoice": "INV-2"}'
    original = {"amount": 1250.0, "invoice": "INV-2"}
    edited = {
        "status": "approved",
        "edited": True,
        "arguments": '{"amount": 400, "invoice": "INV-2"}',
    }
    assert mcp_proxy.approved_arguments(edited, sent, original) == {
        "amount": 400,
        "invoice": "INV-2",
    }
    same = {"status": "approved", "arguments": sent}
    assert mcp_proxy.approved_arguments(same, sent, original) is original
    assert mcp_proxy.approved_arguments({"status": "allowed"}, sent, original) is original
    with pytest.raises(mcp_proxy._Refused, match="not a JSON object"):
        mcp_proxy.approved_arguments({"status": "approved", "arguments": "[1]"}, sent, original)
