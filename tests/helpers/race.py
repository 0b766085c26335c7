"""Several stores (several instances) attempting one thing at the same instant, each in a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from mcp_elicit.store import Store

T = TypeVar("T")


def race(stores: list[Store], attempt: Callable[[Store, int], T]) -> list[T | Exception]:
    barrier = threading.Barrier(len(stores))

    def run(index: int) -> T | Exception:
        barrier.wait()
        try:
            return attempt(stores[index], index)
        except Exception as error:
            return error

    with ThreadPoolExecutor(max_workers=len(stores)) as pool:
        return list(pool.map(run, range(len(stores))))
