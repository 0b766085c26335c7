"""Calling the store from async code without stalling the event loop on network I/O.

Three ways, by what the store offers: SQLite's calls take microseconds on a local file and run inline;
PostgreSQL's run as coroutines on its async pool while `serving` holds that open; anything else runs in a
worker thread. A transaction spanning several calls (`atomically`) takes the same way as its calls.

Every way runs a call to its end once it started, as a worker thread always did: a caller cancelled
meanwhile (the client cancelled, the server stopping) is cancelled after it, so a commit under way is
neither lost half-way nor left on a connection in the middle of a statement.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from functools import partial
from typing import ParamSpec, TypeVar

import anyio.to_thread

from mcp_elicit.store import Store
from mcp_elicit.store._engine import run_now

P = ParamSpec("P")
R = TypeVar("R")

_IN_WORKER = ContextVar("mcp_elicit_in_worker_unit", default=False)
"""Set while a worker thread runs an `atomically` unit: its calls run right there, in its transaction."""


class AsyncStore:
    def __init__(self, store: Store) -> None:
        self.sync = store
        self._inline = store.runs_inline

    async def __call__(self, function: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call `function`: a method of `self.sync` as its coroutine twin where there is one, else inline or in
        a worker thread as the store fits; any other function that reads the store, inline or in a thread."""
        if self._inline or _IN_WORKER.get():
            return function(*args, **kwargs)
        twin = self._twin(function)
        if twin is not None:
            with anyio.CancelScope(shield=True):
                return await twin(*args, **kwargs)
        return await anyio.to_thread.run_sync(partial(function, *args, **kwargs))

    def _twin(self, function: Callable[..., R]) -> Callable[..., Awaitable[R]] | None:
        if getattr(function, "__self__", None) is not self.sync:
            return None
        engine = self.sync.asynchronous
        if engine is None:
            return None
        twin: Callable[..., Awaitable[R]] = getattr(engine, function.__name__)
        return twin

    async def batch(self, function: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """A call that may take long (a sweep's thousand rows): its coroutine twin where there is one, which
        waits on the database without holding the loop; else a worker thread, even for an inline store."""
        twin = None if _IN_WORKER.get() else self._twin(function)
        if twin is not None:
            with anyio.CancelScope(shield=True):
                return await twin(*args, **kwargs)
        return await anyio.to_thread.run_sync(partial(function, *args, **kwargs))

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
        return await anyio.to_thread.run_sync(partial(self._in_worker, work))

    def _in_worker(self, work: Callable[[], Awaitable[R]]) -> R:
        token = _IN_WORKER.set(True)
        try:
            return self.sync.atomically(lambda: run_now(_awaited(work)))
        finally:
            _IN_WORKER.reset(token)


async def _awaited(work: Callable[[], Awaitable[R]]) -> R:
    return await work()
