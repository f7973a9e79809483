"""Decision latency through the TypeScript client; prints one JSON object on its last line.

N agents wait on N held calls in ONE Node process, each through the TypeScript client's
``client.wait`` (clients/typescript/bench/wait.mjs): half on the WebSocket (the ``ws``
package, which Node 20 needs), half forced onto the long-poll (``webSocket: false``). The
calls are approved one by one through the approver's own form, as bench/decision_bench.py
does (a logged-in session, CSRF, ``POST /calls/<id>/approve``), and each call's latency is
measured from the moment its approval request's first byte is written to the moment the
agent's ``wait`` resolved with the final state in the Node process.

Both sides read CLOCK_MONOTONIC (Python's ``perf_counter``, Node's ``process.hrtime``): the
bench checks that the clock Node reports at start lies between Python's readings around
the start, and stops otherwise.

Needs clients/typescript/node_modules (``npm ci`` there; ``make bench-ts`` runs it when the
folder is missing). The built package (clients/typescript/dist) is built with
``npm run build`` when it is missing or older than a file in src/.

Usage: python bench/ts_decision_bench.py [--agents 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import (
    AGENT_SETUP,
    ROOT,
    BenchServer,
    database,
    latency_summary,
    manage,
    on_sent,
    server,
)
from decision_bench import ARGUMENTS, DIGEST, SETUP, _login, _proc_status

TYPESCRIPT = ROOT / "clients" / "typescript"
WAITER = TYPESCRIPT / "bench" / "wait.mjs"
DELIVERY_TIMEOUT = 120  # seconds without progress before the bench gives up
TOKEN = "cs_bench"  # the token of the agent ``bench`` (AGENT_SETUP)
assert TOKEN in AGENT_SETUP


def _check_clock() -> None:
    """Latencies subtract a Node reading from a Python one: both must be CLOCK_MONOTONIC."""
    implementation = time.get_clock_info("perf_counter").implementation
    if "CLOCK_MONOTONIC" not in implementation:
        raise SystemExit(f"perf_counter is {implementation}, not CLOCK_MONOTONIC: cannot compare")


def _ensure_built() -> None:
    """The package as src/ now is: built when dist/ is missing or older than a source."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise SystemExit("the TypeScript bench needs Node.js 20 or later and npm on PATH")
    if not (TYPESCRIPT / "node_modules").is_dir():
        raise SystemExit("clients/typescript/node_modules is missing: run `npm ci` there")
    built = TYPESCRIPT / "dist" / "index.js"
    newest = max(source.stat().st_mtime for source in (TYPESCRIPT / "src").glob("*.ts"))
    if not built.exists() or built.stat().st_mtime < newest:
        subprocess.run(["npm", "run", "build"], cwd=TYPESCRIPT, check=True, capture_output=True)


def _recorder(moments: dict[str, float], call_id: str) -> Callable[[float], None]:
    def record(moment: float) -> None:
        moments[call_id] = moment

    return record


async def _next_message(lines: asyncio.StreamReader) -> dict[str, Any]:
    raw = await asyncio.wait_for(lines.readline(), timeout=DELIVERY_TIMEOUT)
    if not raw:
        raise RuntimeError("the Node waiter stopped (its error is above)")
    message: dict[str, Any] = json.loads(raw)
    return message


async def _run(waiting: BenchServer, call_ids: list[str]) -> dict[str, Any]:
    sockets = call_ids[: len(call_ids) // 2]
    polls = call_ids[len(call_ids) // 2 :]
    async with httpx.AsyncClient(base_url=waiting.url, timeout=60) as approver:
        csrf = await _login(approver)
        before_start = time.perf_counter()
        node = await asyncio.create_subprocess_exec(
            "node",
            str(WAITER),
            cwd=TYPESCRIPT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 20,
        )
        assert node.stdin is not None
        assert node.stdout is not None
        try:
            node_clock = int((await _next_message(node.stdout))["clock_ns"]) / 1e9
            after_start = time.perf_counter()
            if not before_start <= node_clock <= after_start:
                raise RuntimeError("Node's clock is not Python's: latencies would be meaningless")
            node.stdin.write(
                json.dumps(
                    {"url": waiting.url, "token": TOKEN, "websocket": sockets, "long_poll": polls}
                ).encode()
            )
            await node.stdin.drain()
            node.stdin.close()
            resolved: dict[str, float] = {}
            arrived = asyncio.Event()
            totals: dict[str, Any] = {}

            async def read_waiter() -> None:
                while True:
                    message = await node.stdout.readline()  # type: ignore[union-attr]
                    if not message:
                        break
                    report = json.loads(message)
                    if "call" in report:
                        if report["status"] != "approved":
                            raise RuntimeError(f"a wait ended {report['status']}, not approved")
                        resolved[report["call"]] = int(report["resolved_ns"]) / 1e9
                    elif report.get("ready"):
                        totals["ready"] = True
                    elif report.get("done"):
                        totals.update(report)
                    arrived.set()

            reader = asyncio.create_task(read_waiter())

            async def until(condition: Callable[[], bool]) -> None:
                give_up = time.perf_counter() + DELIVERY_TIMEOUT
                while not condition():
                    if reader.done():
                        reader.result()  # the reader's error, if any
                        raise RuntimeError("the Node waiter stopped (its error is above)")
                    left = give_up - time.perf_counter()
                    if left <= 0:
                        raise TimeoutError(f"no progress in {DELIVERY_TIMEOUT} s")
                    arrived.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(arrived.wait(), timeout=min(left, 1.0))

            await until(lambda: "ready" in totals)
            await asyncio.sleep(1.0)  # let the last long-polls reach the server and park
            parked = _proc_status(waiting.pid)
            sent: dict[str, float] = {}
            retried: list[str] = []
            began = time.perf_counter()
            for call_id in call_ids:
                data = {"csrfmiddlewaretoken": csrf, "arguments_sha256": DIGEST, "comment": ""}
                headers = {"Referer": f"{waiting.url}/calls/{call_id}/"}
                for attempt in range(2):
                    try:
                        answer = await approver.post(
                            f"/calls/{call_id}/approve",
                            data=data,
                            headers=headers,
                            extensions=on_sent(_recorder(sent, call_id)),
                        )
                    except httpx.TransportError:
                        # A kept-alive connection the server had just closed: once more, and
                        # counted. On the retry, 409 means the first attempt was recorded.
                        if attempt:
                            raise
                        retried.append(call_id)
                        continue
                    assert answer.status_code == 303 or (attempt and answer.status_code == 409), (
                        answer.status_code
                    )
                    break
                # One approval at a time: its agent has it before the next is sent.
                await until(lambda: call_id in resolved)  # noqa: B023
            await until(lambda: "done" in totals)
            finished = time.perf_counter()
            if await asyncio.wait_for(node.wait(), timeout=DELIVERY_TIMEOUT) != 0:
                raise RuntimeError("the Node waiter failed (its error is above)")
        finally:
            if node.returncode is None:
                node.kill()
                await node.wait()
    latency = {call_id: resolved[call_id] - sent[call_id] for call_id in call_ids}

    def summary(ids: list[str]) -> dict[str, float]:
        return latency_summary([latency[i] for i in ids])

    return {
        "while_waiting": parked,
        "all_delivered_s": finished - began,
        "approvals_resent": len(retried),
        # Beyond one each: sockets the client opened again, long-polls it renewed.
        "sockets_reopened": totals["socket_opens"] - len(sockets),
        "long_polls_renewed": totals["long_polls"] - len(polls),
        "websocket": summary(sockets),
        "long_poll": summary(polls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=200)
    options = parser.parse_args()
    if options.agents < 2:
        parser.error("--agents must be at least 2 (half wait on each transport)")
    _check_clock()
    _ensure_built()
    node_version = subprocess.run(
        ["node", "--version"], check=True, capture_output=True, text=True
    ).stdout.strip()
    setup = SETUP.replace("ARGS", repr(ARGUMENTS)).replace("COUNT", str(options.agents))
    with database(None) as database_url:
        call_ids = manage(database_url, "shell", "-c", setup).strip().splitlines()[-1].split(",")
        # Every waiting agent is the agent ``bench``: its sockets may not be capped below them.
        extra = {"COUNTERSIGN_MAX_SOCKETS_PER_AGENT": str(options.agents)}
        with server(database_url, extra) as waiting:
            result = asyncio.run(_run(waiting, call_ids))
    print(
        json.dumps(
            {
                "benchmark": "decision-typescript",
                "mode": "latency",
                "request": "form",
                "agents": options.agents,
                "workers": 1,
                "database": "sqlite",
                "node": node_version,
                **result,
                "targets": {"p50_ms": 5, "p99_ms": 20},
            }
        )
    )


if __name__ == "__main__":
    main()
