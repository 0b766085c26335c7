"""How a store call reaches its engine, from blocking code and from async code.

Each store call is declared once per face with the same signature: by hand in `aio.AsyncStore`, and in
`Store`, generated from it (`_blocking.py`, written by `tools/async_to_sync.py`). A call's body makes the
core's coroutine for it (a `Program`) and hands it to its face's one routing helper, defined here.

`StoreBase._run` drives it to its end at once: the engine behind a `Store` never waits (SQLite, PostgreSQL's
blocking pool), so the coroutine never suspends.

`AsyncStoreBase._call` takes one of three ways, by what the store offers: SQLite's calls take microseconds
on a local file and run inline; PostgreSQL's run as coroutines on its async pool while `serving` holds that
open; anything else runs in a worker thread. A transaction spanning several calls (`atomically`) takes the
same way as its calls.

Every way runs a call to its end once it started, as a worker thread always did: a caller cancelled
meanwhile (the client cancelled, the server stopping) is cancelled after it, so a commit under way is
neither lost half-way nor left on a connection in the middle of a statement.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ParamSpec, TypeAlias, TypeVar

import anyio
import anyio.to_thread

from mcp_elicit.store._engine import run_now
from mcp_elicit.store._sql import SQLCore
from mcp_elicit.store.protocol import Interest

if TYPE_CHECKING:
    from mcp_elicit.store._blocking import Store

P = ParamSpec("P")
R = TypeVar("R")

Program: TypeAlias = Callable[[SQLCore], Coroutine[Any, Any, R]]
"""One store call on a core, to be run there: `lambda core: core.get_decision(elicitation_id, caller)`."""


class StoreBase(ABC):
    """What a `Store` holds besides its calls: the engine's core, and what differs from engine to engine.

    An engine with an async driver offers a core on it as `asynchronous` while `serving` holds it open;
    `AsyncStore` then runs its calls there instead of here.
    """

    def __init__(self, core: SQLCore, listeners: list[Callable[[str], None]]) -> None:
        self._core = core
        self._change_listeners = listeners

    def _run(self, program: Program[R]) -> R:
        """Make one call on this store's core, here and now."""
        return run_now(program(self._core))

    @property
    @abstractmethod
    def display_url(self) -> str:
        """The store's URL with any password masked: safe for logs and error messages."""

    @abstractmethod
    def schema_version(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    @property
    def runs_inline(self) -> bool:
        """Whether a call takes microseconds on local files, so async code may make it on the event loop."""
        return False

    @property
    def asynchronous(self) -> SQLCore | None:
        """The store's core on a driver that waits on the event loop, while `serving` holds it open on the
        running loop; `None` where there is no such driver (SQLite, whose calls run inline) or outside
        `serving`. `AsyncStore` picks what to use."""
        return None

    def serving(self) -> AbstractAsyncContextManager[None]:
        """Hold the async driver open on this event loop for as long as the block runs (a server's lifespan)."""
        return nullcontext()

    async def listen(  # noqa: B027 (an engine without a channel between processes has nothing to listen to)
        self, on_change: Callable[[str], None], interest: Interest | None = None
    ) -> None:
        """Call `on_change(subject)` for each change other instances announce, until cancelled.

        With `interest`, only while something in this process waits (and a little after): a process nobody
        waits in neither receives notices nor has the database signal it. Returns at once on an engine
        without a channel between processes: waiters then rely on polling.
        """

    def add_change_listener(self, listener: Callable[[str], None]) -> None:
        """Called after each commit that moved something a call may wait on, with its subject: a decision's
        id for its transitions, an operation's id for its journal, its claims and its end."""
        self._change_listeners.append(listener)

    def atomically(self, work: Callable[[], R]) -> R:
        """Run `work`'s calls to this store (on this thread) in one transaction: all commit, or none do."""
        return run_now(self._core.atomically(functools.partial(_returning, work)))


async def _returning(work: Callable[[], R]) -> R:
    return work()


_IN_WORKER = ContextVar("mcp_elicit_in_worker_unit", default=False)
"""Set while a worker thread runs an `atomically` unit: its calls run right there, in its transaction."""


class AsyncStoreBase:
    """What an `AsyncStore` holds besides its calls: the blocking store it wraps, and the ways to its engine."""

    def __init__(self, store: Store) -> None:
        self.sync = store
        self._inline = store.runs_inline

    async def _call(self, program: Program[R]) -> R:
        """Make one call inline, on the async engine or in a worker thread, as the store fits."""
        if self._inline or _IN_WORKER.get():
            return self.sync._run(program)
        engine = self.sync.asynchronous
        if engine is not None:
            with anyio.CancelScope(shield=True):
                return await program(engine)
        return await anyio.to_thread.run_sync(self.sync._run, program)

    async def _batch(self, program: Program[R]) -> R:
        """A call that may take long (a sweep's thousand rows): on the async engine where there is one, which
        waits on the database without holding the loop; else in a worker thread, even for an inline store."""
        engine = None if _IN_WORKER.get() else self.sync.asynchronous
        if engine is not None:
            with anyio.CancelScope(shield=True):
                return await program(engine)
        return await anyio.to_thread.run_sync(self.sync._run, program)

    async def _abandonable(self, program: Program[R]) -> R:
        """A long call its caller may give up on half-way, since it reads and then writes in one transaction that
        commits whole or not at all (an audit seal): as `_batch`, but cancelled with its caller on the async
        engine (psycopg drops the connection, and the database the transaction), and in a worker thread left to
        end by itself. A caller that must not hang on a database that does not answer bounds it."""
        engine = None if _IN_WORKER.get() else self.sync.asynchronous
        if engine is not None:
            return await program(engine)
        return await anyio.to_thread.run_sync(self.sync._run, program, abandon_on_cancel=True)

    async def call_blocking(self, function: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call `function`, blocking code of the caller's own that uses the store (a page's lookup, the vault
        sealing a secret before storing it): inline where the store's calls run inline, else in a worker
        thread, never on the event loop."""
        if self._inline or _IN_WORKER.get():
            return function(*args, **kwargs)
        return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs))

    async def atomically(self, work: Callable[[], Awaitable[R]]) -> R:
        """Run `work`'s calls through this object in one transaction: all commit, or none do.

        `work` must await nothing but those calls: on an inline or threaded store it runs to its end
        without an event loop's help.
        """
        if self._inline or _IN_WORKER.get():
            return self.sync.atomically(lambda: run_now(_awaited(work)))
        engine = self.sync.asynchronous
        if engine is not None:
            with anyio.CancelScope(shield=True):
                result: R = await engine.atomically(work)
            return result
        return await anyio.to_thread.run_sync(functools.partial(self._in_worker, work))

    def _in_worker(self, work: Callable[[], Awaitable[R]]) -> R:
        token = _IN_WORKER.set(True)
        try:
            return self.sync.atomically(lambda: run_now(_awaited(work)))
        finally:
            _IN_WORKER.reset(token)


async def _awaited(work: Callable[[], Awaitable[R]]) -> R:
    return await work()
