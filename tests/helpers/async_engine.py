"""A `Store` whose calls run on the PostgreSQL store's async engine, so the store suite proves both engines.

Each call the suite makes on the blocking interface is made the way the server makes it: through `AsyncStore`,
awaited on an event loop of the adapter's own while `serving` holds the async engine open there. `atomically`
opens an `AsyncStore.atomically` unit on that loop; the work runs here, and the unit's task awaits each of its
calls in the unit's own context, so they share its transaction as a server call's do. Everything else (the
URL, listening, change listeners) is the PostgreSQL store's own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

from mcp_elicit.store import Store
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.postgres import PostgresStore

R = TypeVar("R")
_SECONDS = 60

_CALLS = frozenset(name for name, member in vars(AsyncStore).items() if inspect.iscoroutinefunction(member))
"""The store's calls: what `AsyncStore` declares (and `Store` is generated from)."""

_Call = tuple[Coroutine[Any, Any, Any], "concurrent.futures.Future[Any]"]


class _End:
    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure


class ThroughAsyncEngine:
    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._reached = AsyncStore(store)
        self._local = threading.local()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="async-engine", daemon=True)
        self._thread.start()
        opened = threading.Event()
        self._done = asyncio.Event()

        async def hold() -> None:
            async with store.serving():
                opened.set()
                await self._done.wait()

        self._holding = asyncio.run_coroutine_threadsafe(hold(), self._loop)
        if not opened.wait(_SECONDS):
            raise RuntimeError("the async engine did not open")

    def __getattr__(self, name: str) -> Any:
        if name not in _CALLS:
            return getattr(self._store, name)
        call = getattr(self._reached, name)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._await(call(*args, **kwargs))

        return blocking

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

        holding = asyncio.run_coroutine_threadsafe(self._reached.atomically(run_calls), self._loop)
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
    """`store`, a PostgreSQL store, with every call of the blocking interface made on its async engine."""
    assert isinstance(store, PostgresStore)
    return cast(Store, ThroughAsyncEngine(store))
