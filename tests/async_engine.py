"""A `Store` whose calls run on the PostgreSQL store's async engine, so the store suite proves both engines.

Each call is the async core's coroutine of the same name, awaited on an event loop of the adapter's own,
inside `serving`: the path the server takes on PostgreSQL. `atomically` opens the core's async unit on
that loop; the work runs here, and the unit's task awaits each of its calls in the unit's own context,
so they share its transaction as a server call's do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from mcp_elicit.store.postgres import PostgresStore
from mcp_elicit.store.protocol import Store

R = TypeVar("R")
_BLOCKING_ONLY = frozenset({"add_change_listener", "close", "listen", "serving"})
_SECONDS = 60

_Call = tuple[Coroutine[Any, Any, Any], "concurrent.futures.Future[Any]"]


class _End:
    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure


class ThroughAsyncEngine:
    def __init__(self, store: PostgresStore) -> None:
        self._store = store
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
        attribute = getattr(self._store, name)
        if name.startswith("_") or name in _BLOCKING_ONLY or not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._await(self._twin(name, args, kwargs))

        return call

    async def _twin(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        engine = self._store.asynchronous
        assert engine is not None, "the async engine is open on this loop"
        return await getattr(engine, name)(*args, **kwargs)

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
    adapted: Any = ThroughAsyncEngine(store)
    return adapted  # type: ignore[no-any-return]
