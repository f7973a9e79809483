"""The proxy's stdin and stdout for the MCP SDK's stdio server, read and written by the event
loop as the pipes become ready.

The SDK's own ``stdio_server()`` reads each line and writes each message through a worker
thread (``anyio.wrap_file``): a thread round trip for the request and two for the answer (the
write, then the flush) of every ``tools/call``, about 0.4 ms of what the proxy adds to one
(bench/mcp_proxy_bench.py). Here the pipes are asyncio's pipe transports, and fd 0 and 1 are
diverted while serving as the SDK diverts them (0 from the null device, 1 to stderr), so
that stray output of the proxy's process cannot corrupt the wire. A stdin or stdout that is
not a pipe, socket or character device (a regular file) is left to the SDK's threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator, Iterator
from typing import cast

import anyio

# The SDK's reader takes a line of any length; so does this one, in practice.
LINE_LIMIT = 2**31


class Lines:
    """The lines of the wire's input, as the SDK iterates its stdin (text, newline kept)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class Output:
    """The wire's output, as the SDK writes its stdout: ``write`` then ``flush``. A client
    gone away closes it, as a closed stream ends the SDK's writer."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        if self._writer.is_closing():
            raise anyio.ClosedResourceError
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        try:
            await self._writer.drain()
        except ConnectionError:
            raise anyio.ClosedResourceError from None


async def _transports(
    wire_in: int, wire_out: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", buffering=0)
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _waitable(fd: int) -> bool:
    """What asyncio's pipe transports take: a pipe, a socket or a character device."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@contextlib.contextmanager
def _diverted() -> Iterator[None]:
    """fd 0 from the null device and fd 1 to stderr while serving; both put back after."""
    kept_in, kept_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield
    finally:
        os.close(null)
        os.dup2(kept_in, 0)
        os.dup2(kept_out, 1)
        os.close(kept_in)
        os.close(kept_out)


@contextlib.asynccontextmanager
async def stdio_wire() -> AsyncIterator[tuple[anyio.AsyncFile[str] | None, ...]]:
    """``(stdin, stdout)`` to give the SDK's ``stdio_server``; ``(None, None)`` for its own
    when either is not something the event loop can wait on. The SDK types them as anyio's
    ``AsyncFile`` and uses of them only what ``Lines`` and ``Output`` have (iterating the
    one, ``write`` and ``flush`` on the other): the proxy's stdio tests run through them."""
    if not (_waitable(0) and _waitable(1)):
        yield None, None
        return
    reader, writer = await _transports(os.dup(0), os.dup(1))
    try:
        with _diverted():
            yield (
                cast("anyio.AsyncFile[str]", Lines(reader)),
                cast("anyio.AsyncFile[str]", Output(writer)),
            )
    finally:
        writer.close()
