"""The engine interface: what an engine gives the store's logic, and how that logic runs on it.

An engine (`sqlite`, `postgres`) supplies transactions whose statements are coroutines (`Tx`). Over a driver
that never waits, those coroutines never suspend, so `run_now` drives them to their end without an event
loop; over an async driver, the same coroutines are awaited on the loop. Engine adapters translate their
driver's errors into the store errors below or those of `mcp_elicit.store.errors`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Protocol, TypeVar

from mcp_elicit.store.errors import StoreCorrupt, StoreError

R = TypeVar("R")


class Tx(Protocol):
    """One transaction's statements. Every call may wait on the engine; one that never does (SQLite, a
    blocking driver) lets the same code run synchronously (see `run_now`)."""

    async def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run a statement; the number of rows it changed."""
        ...

    async def one(self, sql: str, params: Sequence[object] = ()) -> Any:
        """The statement's first row, or `None`."""
        ...

    async def all(self, sql: str, params: Sequence[object] = ()) -> list[Any]: ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None: ...

    def stream(
        self, sql: str, params: Sequence[object] = (), *, size: int = 1000
    ) -> AbstractAsyncContextManager[AsyncIterator[list[Any]]]:
        """The statement's rows, `size` at a time, without holding them all (a server-side cursor where the
        engine has one); only inside a read-only snapshot. The cursor is closed when the block ends, however it
        ends (read to the end, left midway, an exception), so streams may follow or nest in one transaction."""
        ...

    def defer(self, sql: str, params: Sequence[object] = ()) -> None:
        """A write whose result nobody reads (an audit row, a notice): the engine may hold it back and send it,
        in order, with the next statement it must answer or with the commit."""
        ...


class Transaction(Protocol):
    """What an engine's `_begin` gives: entered, a `Tx`; left without an error, committed."""

    async def __aenter__(self) -> Tx: ...

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None: ...


def run_now(coroutine: Coroutine[Any, Any, R]) -> R:
    """Run a store coroutine whose engine never waits to its end, here and now, without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: R = done.value
        return result
    coroutine.close()
    raise RuntimeError("a store call waited on an engine that runs synchronously")


class UniqueViolation(StoreError):
    """Raised by an engine adapter for a primary-key or unique clash."""


class ForeignKeyViolation(StoreError):
    """Raised by an engine adapter when a referenced record is missing."""


class BadValue(StoreCorrupt):
    """A stored value of a kind mcp-elicit never writes there, met while decoding it.

    The row codecs turn it into `UnreadableRow`, which names the row and the column; where no row is at
    hand it is raised as it is: a store error saying what is wrong, not a `TypeError` far from the store.
    """


class NotUTF8(bytes):
    """Stored text that is not UTF-8 (written by hand, or by another program), as an engine whose driver would
    otherwise fail the whole statement hands it to the row codecs: they refuse it as a value of the wrong kind,
    for that row alone."""
