"""The server's background work (the lease keeper, the change listener, completion notices) and its hosts.

A server's lifespan hosts that work. The SDK runs one lifespan per connection for some transports (the
in-memory client, SSE), so several may be up at once and end in any order: the work must run once, and
keep running for as long as any host is up. A call served without any lifespan (a lowlevel `Server`)
hosts what it needs itself, for its own duration.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio


class Shared:
    """One task that several hosts share: the first runs it; when that host ends, one still up takes over."""

    def __init__(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._work = work
        self._handover = anyio.Event()
        self.running = False

    async def host(self) -> None:
        """Run the work, or stand by to take it over; returns only if the work itself returns."""
        while True:
            if self.running:
                await self._handover.wait()
                continue
            self.running = True
            try:
                await self._work()
                return
            finally:
                self.running = False
                self._handover.set()
                self._handover = anyio.Event()


@asynccontextmanager
async def beside(task: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Run `task` for as long as the block runs; the block's own exception comes out as it was raised, never
    wrapped in an exception group."""
    failure: BaseException | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(task)
        try:
            yield
        except BaseException as error:
            failure = error
        finally:
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
