"""A `Store` whose calls run on the PostgreSQL store's async engine, so the store suite proves both engines.

The adapter is a `Store` whose `_run` awaits each call's program (the very lambda `Store` and `AsyncStore`
build) on the async core, on an event loop of the adapter's own, inside `serving`: the path the server takes
on PostgreSQL. `atomically` opens the core's async unit on that loop; the work runs here, and the unit's task
awaits each of its calls in the unit's own context, so they share its transaction as a server call's do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from mcp_elicit.store import Store
from mcp_elicit.store._facade import Program
from mcp_elicit.store._sql import SQLCore
from mcp_elicit.store.postgres import PostgresStore
from mcp_elicit.store.protocol import Interest

R = TypeVar("R")
_SECONDS = 60

_Call = tuple[Coroutine[Any, Any, Any], "concurrent.futures.Future[Any]"]


class _End:
    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure


class ThroughAsyncEngine(Store):
    def __init__(self, store: PostgresStore) -> None:
        self._store = store  # first: `__getattr__` reads it
        super().__init__(store._core, store._change_listeners)
        self._local = threading.local()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="async-engine", daemon=True)
        self._thread.start()
        opened = threading.Event()
        self._done = asyncio.Event()

        async def hold() -> None:
            async with self._store.serving():
                opened.set()
                await self._done.wait()

        self._holding = asyncio.run_coroutine_threadsafe(hold(), self._loop)
        if not opened.wait(_SECONDS):
            raise RuntimeError("the async engine did not open")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)  # what only the PostgreSQL store has (its pool, for one)

    @property
    def display_url(self) -> str:
        return self._store.display_url

    def schema_version(self) -> int:
        return self._store.schema_version()

    @property
    def asynchronous(self) -> SQLCore | None:
        return self._store.asynchronous

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        async with self._store.serving():
            yield

    async def listen(self, on_change: Callable[[str], None], interest: Interest | None = None) -> None:
        await self._store.listen(on_change, interest)

    def _run(self, program: Program[R]) -> R:
        result: R = self._await(self._on_engine(program))
        return result

    async def _on_engine(self, program: Program[R]) -> R:
        engine = self._store.asynchronous
        assert engine is not None, "the async engine is open on this loop"
        return await program(engine)

    def _await(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        inbox: asyncio.Queue[_Call | _End] | None = getattr(self._local, "inbox", None)
        if inbox is None:
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_SECONDS)
        answer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(inbox.put_nowait, (coroutine, answer))
        return answer.result(_SECONDS)

    def atomically(self, work: Callable[[], R]) -> R:
        if getattr(self._local, "inbox", None) is not None:
            return work()  # a nested unit joins the one under way
        inbox: asyncio.Queue[_Call | _End] = asyncio.Queue()

        async def run_calls() -> None:
            while True:
                item = await inbox.get()
                if isinstance(item, _End):
                    if item.failure is not None:
                        raise item.failure
                    return
                coroutine, answer = item
                try:
                    answer.set_result(await coroutine)
                except Exception as error:
                    answer.set_exception(error)

        async def unit() -> None:
            engine = self._store.asynchronous
            assert engine is not None
            await engine.atomically(run_calls)

        holding = asyncio.run_coroutine_threadsafe(unit(), self._loop)
        self._local.inbox = inbox
        try:
            result = work()
        except BaseException as failure:
            self._local.inbox = None
            self._loop.call_soon_threadsafe(inbox.put_nowait, _End(failure))
            try:
                holding.result(_SECONDS)
            except BaseException as raised:
                if raised is not failure:
                    raise
            raise
        self._local.inbox = None
        self._loop.call_soon_threadsafe(inbox.put_nowait, _End(None))
        holding.result(_SECONDS)
        return result

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._done.set)
        self._holding.result(_SECONDS)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_SECONDS)
        self._loop.close()
        self._store.close()


def through_async_engine(store: Store) -> Store:
    assert isinstance(store, PostgresStore)
    return ThroughAsyncEngine(store)
