"""The writes of one call, held until something outside the process could observe them, then committed at once.

A call used to commit each record as it was made: the operation, then its question, then the answer, then
the result, each its own transaction. Nobody can tell the difference until something leaves the process,
so a call now commits what it has accumulated in one transaction at those points only: before a step's
function runs (its side effect must follow a durable answer), before a question goes to a person on a live
call, before waiting on a flow someone else completes, and before the response leaves (a round, a result,
an error). A crash in between loses only what nobody saw; the retry redoes it.

Optimism needs a check: a held answer is a compare-and-set on the decision as this call read it. If
someone else moved the decision meanwhile (an operator's cancel, a racing retry, the web page), the commit
fails as a whole with `StaleSnapshot` and the runtime runs the body again on what is stored now; nothing
the body did between the last commit and that one was visible outside.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mcp_elicit.store import DecisionConflict, DecisionExpired
from mcp_elicit.store.offload import AsyncStore

R = TypeVar("R")


class StaleSnapshot(Exception):
    """A held write lost its compare-and-set: the body ran on records that changed meanwhile."""


class HeldWrites:
    def __init__(self, store: AsyncStore) -> None:
        self._store = store
        self._held: list[Callable[[], Any]] = []

    @property
    def pending(self) -> bool:
        return bool(self._held)

    def hold(self, write: Callable[[], Any]) -> None:
        self._held.append(write)

    async def commit(self) -> None:
        if self._held:
            await self.commit_with(_nothing)

    async def commit_with(self, last: Callable[[], R]) -> R:
        """Commit what is held and then `last` (whose result is returned) in one transaction."""
        held, self._held = self._held, []
        sync = self._store.sync

        def run() -> R:
            for write in held:
                write()
            return last()

        try:
            return await self._store(sync.atomically, run)
        except (DecisionConflict, DecisionExpired) as lost:
            raise StaleSnapshot(str(lost)) from lost


def _nothing() -> None:
    return None
