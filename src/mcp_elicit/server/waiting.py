"""Waiting for what another call or another instance moves, without a task per waiter between polls.

Polling the store with growing pauses is the floor, and it alone is correct across processes. `Wakeups`
only shortens the wait: the store reports each subject it moves (a decision by its id, an operation by
its id when its journal, its claims or its end change), in this process and, on PostgreSQL, through
LISTEN/NOTIFY from every instance; a waiter on that subject looks again at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

FIRST_POLL = 0.1
LONGEST_POLL = 1.0


class Wakeups:
    """One event per waiter, set when the store says one of the subjects it waits on moved."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[anyio.Event]] = {}
        self._first = anyio.Event()

    def awaited(self, subject: str | None = None) -> bool:
        """Whether a call waits on `subject` (on anything, without one) now; safe to ask from any thread (a
        stale answer costs one poll)."""
        return bool(self._waiting) if subject is None else subject in self._waiting

    async def until_awaited(self) -> None:
        """Return once some call waits: what listens to other instances for waiters listens only then."""
        while not self._waiting:
            await self._first.wait()
            self._first = anyio.Event()

    def changed(self, subject: str) -> None:
        for event in self._waiting.pop(subject, ()):
            event.set()

    async def wait(self, subjects: str | Sequence[str], seconds: float) -> None:
        names = (subjects,) if isinstance(subjects, str) else tuple(subjects)
        event = anyio.Event()
        for name in names:
            self._waiting.setdefault(name, set()).add(event)
        self._first.set()
        try:
            with anyio.move_on_after(seconds):
                await event.wait()
        finally:
            for name in names:
                waiters = self._waiting.get(name)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiting[name]


class Backoff:
    """The growing pause between two looks at the store: short at first, then at most `LONGEST_POLL`."""

    def __init__(self) -> None:
        self._pause = FIRST_POLL

    def next(self, remaining: float) -> float:
        pause = min(self._pause, max(remaining, 0.0))
        self._pause = min(self._pause * 2, LONGEST_POLL)
        return pause
