"""The gateway's stdio transport: the SDK's `stdio_server`, its bytes carried by the event loop's pipe transports.

Why: the SDK reads and writes the standard streams through `anyio.wrap_file`, a worker thread for each line read
and two for each line written (write, flush). A relay pays those hand-offs on every call, in and out, and they
were most of what a forwarded call cost beyond its upstream (`bench.gateway`). When the standard streams are pipes
or sockets, as they are when a host launches a server, the same JSON lines go through asyncio's pipe transports
on the loop, with no thread. The SDK still parses and serializes every message (`stdio_server(stdin=...,
stdout=...)`): only what carries the bytes changes.

What it guarantees, as the SDK's own stream claim does: the wire is served from private duplicates of fd 0 and
fd 1, and meanwhile fd 1 points at stderr and fd 0 at the null device, so a stray `print` or a library writing to
stdout cannot corrupt the protocol stream; both are put back on the way out. Input is decoded as UTF-8 with
replacement, as the SDK decodes it, and a line has no length limit.

What it does not: stdin or stdout that is not a pipe or a socket (a file, a terminal), a stdout that shares its
open file with stderr (`2>&1`: the loop makes the wire non-blocking, and a log line on stderr could then fail),
one socket for both stdin and stdout (`_pipes`),
an event loop that is not asyncio's and a platform that is not POSIX are served by the SDK's transport as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from mcp.server.stdio import stdio_server


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[Any]:
    """The read and write streams of `Server.run` over this process's stdin and stdout."""
    loop = _asyncio_loop()
    if loop is None or not _pipes():
        async with stdio_server() as streams:
            yield streams
        return
    claim = _Claim.of_standard_streams()
    reading: asyncio.BaseTransport | None = None
    writing: asyncio.WriteTransport | None = None
    try:
        reader = asyncio.StreamReader(limit=sys.maxsize // 2)
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(claim.wire_in, "rb", buffering=0)
        )
        writing, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), os.fdopen(claim.wire_out, "wb", buffering=0)
        )
        writer = asyncio.StreamWriter(writing, protocol, None, loop)
        async with stdio_server(stdin=_Lines(reader), stdout=_Out(writer)) as streams:  # type: ignore[arg-type]
            yield streams
        with contextlib.suppress(ConnectionError):
            await writer.drain()
    finally:
        claim.release()
        for transport in (reading, writing):
            if transport is not None:
                transport.close()


class _Lines:
    """Stdin as the SDK iterates it: decoded lines, each with its newline (the last may have none)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _Out:
    """Stdout as the SDK writes to it: text, then a flush that waits while the reader lags behind."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    if os.name != "posix":
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio): no asyncio loop runs this task
        return None


def _pipes() -> bool:
    """Whether stdin and stdout are pipes or sockets, and no two of the three standard streams are one file.

    One socket for stdin and stdout (`socat ... EXEC:`, inetd): the write transport watches its descriptor for the
    peer going away, and would take every request arriving on it for that. Stdout or stdin that is stderr's file
    (`2>&1`): the loop makes the wire non-blocking, and a log line on stderr could then fail."""
    try:
        given = [os.fstat(fd) for fd in (0, 1, 2)]
    except OSError:  # a standard stream closed: the SDK's transport says what it makes of that
        return False
    if not all(stat.S_ISFIFO(each.st_mode) or stat.S_ISSOCK(each.st_mode) for each in given[:2]):
        return False
    return len({(each.st_dev, each.st_ino) for each in given}) == len(given)


@dataclass
class _Claim:
    """The wire's private duplicates (`wire_in`, `wire_out`, which the transports own and close), and fd 0 and
    fd 1 as they were, put back by `release`."""

    wire_in: int
    wire_out: int
    saved: tuple[int, int]

    @classmethod
    def of_standard_streams(cls) -> _Claim:
        claim = cls(os.dup(0), os.dup(1), (os.dup(0), os.dup(1)))
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.dup2(2, 1)
        return claim

    def release(self) -> None:
        """fd 0 and fd 1 as they were, blocking again (the loop made the wire's open files non-blocking)."""
        for fd, saved in zip((0, 1), self.saved, strict=True):
            with contextlib.suppress(OSError):
                os.set_blocking(saved, True)
                os.dup2(saved, fd)
            os.close(saved)
