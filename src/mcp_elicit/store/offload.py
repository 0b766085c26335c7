"""Calling the synchronous store from async code without stalling the event loop on network I/O."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ParamSpec, TypeVar

import anyio.to_thread

from mcp_elicit.store import Store

P = ParamSpec("P")
R = TypeVar("R")


class AsyncStore:
    """Calls of a store that `runs_inline` (SQLite: microseconds, local file) run inline; others in a worker thread."""

    def __init__(self, store: Store) -> None:
        self.sync = store
        self._inline = store.runs_inline

    async def __call__(self, function: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._inline:
            return function(*args, **kwargs)
        return await anyio.to_thread.run_sync(partial(function, *args, **kwargs))
