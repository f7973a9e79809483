"""The MCP proxy's stdin and stdout (``countersign.integrations.mcp_stdio``), in a process of
their own as the proxy has them: lines in and out through the event loop's pipes, stray
output kept off the wire, and a regular file left to the SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WAIT = 20.0  # a guard against hangs, not a measure

# Echoes each line it reads, upper-cased, through the wire; a print in between must not
# reach the wire. Says on stderr which streams it was given.
ECHO = """
import anyio
from countersign.integrations.mcp_stdio import stdio_wire

async def main():
    async with stdio_wire() as (stdin, stdout):
        if stdin is None:
            import sys
            print("left to the SDK", file=sys.stderr)
            return
        async for line in stdin:
            print("stray output")
            await stdout.write(line.upper())
            await stdout.flush()

anyio.run(main)
"""


def _echo(
    *, stdin: int | None = None, data: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The echo's run: ``data`` through a pipe, or ``stdin`` as it is."""
    return subprocess.run(
        [sys.executable, "-c", ECHO],
        stdin=stdin,
        input=data,
        capture_output=True,
        timeout=WAIT,
        check=True,
    )


def test_lines_go_through_the_pipes_and_stray_output_goes_to_stderr() -> None:
    lines = ['{"jsonrpc": "2.0", "id": 1}\n', "é ünïcode\n", "x" * 200_000 + "\n", "last"]
    done = _echo(data="".join(lines).encode())
    assert done.stdout.decode() == "".join(line.upper() for line in lines)
    assert done.stderr.decode().count("stray output") == len(lines)


def test_a_regular_file_is_left_to_the_sdk(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"jsonrpc": "2.0", "id": 1}\n')
    with requests.open("rb") as stdin:
        done = _echo(stdin=stdin.fileno())
    assert done.stdout == b""
    assert "left to the SDK" in done.stderr.decode()
