"""What the gateway keeps in memory about what it passed on, for a notice that may come later: bounded by count and
by age, so that a notice that never comes costs nothing for long."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

import anyio

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

REMEMBERED = 1024
"""Entries kept at most: the most recently remembered; older ones are forgotten."""
NOTICE_TIMEOUT = 2.0
"""Seconds a notification to one client may take before it is given up."""


class Remembered(Generic[K, V]):
    """Values by key, each for `ttl` seconds after it was remembered, and taken at most once (or looked at)."""

    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._values: dict[K, tuple[V, float]] = {}

    def watch(self, key: K, value: V) -> None:
        now = anyio.current_time()
        self._values.pop(key, None)
        self._values[key] = (value, now + self._ttl)
        while self._values:
            oldest = next(iter(self._values))
            if len(self._values) <= REMEMBERED and self._values[oldest][1] > now:
                break
            del self._values[oldest]

    def answered(self, key: K) -> V | None:
        found = self._values.pop(key, None)
        if found is None or found[1] <= anyio.current_time():
            return None
        return found[0]

    def get(self, key: K) -> V | None:
        """The value of `key` if it is still remembered, left in place (for a value several callers read)."""
        found = self._values.get(key)
        if found is None or found[1] <= anyio.current_time():
            return None
        return found[0]
