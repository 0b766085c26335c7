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
the body did between the last commit and that one was visible outside. The same holds for records two
overlapping calls both meant to create (the call's operation, a question under one key): the database
lets one in, and the other call runs again and finds it. An idempotency key the caller bound to another
request refuses the commit with `KeyRefused`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp_types import INVALID_PARAMS

from mcp_elicit.model import Operation
from mcp_elicit.server.signals import Signal, StaleSnapshot
from mcp_elicit.store import (
    AlreadyExists,
    DecisionConflict,
    DecisionExpired,
    IdempotencyKeyConflict,
    LeaseLost,
    NotFound,
    OperationConflict,
    StoreError,
)
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.telemetry.instruments import Ending

R = TypeVar("R")
log = logging.getLogger(__name__)


class KeyRefused(Signal):
    """The call's idempotency key names another request: nothing of this call may be stored."""

    def __init__(self, conflict: IdempotencyKeyConflict) -> None:
        self.conflict = conflict
        super().__init__(str(conflict))

    @property
    def ends_as(self) -> Ending:
        return Ending("refused", code=INVALID_PARAMS)  # the runtime answers it -32602


class OperationEnded(Signal):
    """Another call ended the operation this call was waiting in: its end, not this run, decides the result."""

    def __init__(self, operation: Operation) -> None:
        self.operation = operation
        super().__init__(f"operation {operation.operation_id} is {operation.status}")


class HeldWrites:
    def __init__(self, store: AsyncStore) -> None:
        self._store = store
        self._held: list[Callable[[], Awaitable[Any]]] = []
        self._after: list[Callable[[], None]] = []
        self._kept: list[Callable[[], Awaitable[Any]]] = []
        self._done: dict[Callable[[], Awaitable[Any]], Callable[[], None]] = {}
        self.committed = False
        """Whether anything of this call became durable: from then on other calls may see and add to it."""

    @property
    def pending(self) -> bool:
        return bool(self._held)

    def hold(
        self, write: Callable[[], Awaitable[Any]], *, keep: bool = False, done: Callable[[], None] | None = None
    ) -> None:
        """Hold `write` for the next commit. `keep`: if that commit loses on another write, commit this one on
        its own before saying so (a step's result: running the step again would repeat its side effect; a
        late answer's note: a call that ends because the commit lost would leave no trace of the answer).
        `done` is called once `write` is durable, by whichever commit makes it so, and never otherwise."""
        self._held.append(write)
        if keep:
            self._kept.append(write)
        if done is not None:
            self._done[write] = done

    def after_commit(self, done: Callable[[], None]) -> None:
        """Call `done` once the writes held now are durable; if their commit fails, never."""
        self._after.append(done)

    async def commit(self) -> None:
        if self._held:
            await self.commit_with(_nothing)

    async def commit_with(self, last: Callable[[], Awaitable[R]]) -> R:
        """Commit what is held and then `last` (whose result is returned) in one transaction.

        The writes and `last` await nothing but this call's store (see `AsyncStore.atomically`).
        """
        held, self._held = self._held, []
        after, self._after = self._after, []
        kept, self._kept = self._kept, []

        async def run() -> R:
            for write in held:
                await write()
            return await last()

        try:
            result = await self._store.atomically(run)
        except _LOST as lost:
            await self._keep(kept)
            raise _signal_of(lost) from lost
        except StaleSnapshot:  # a check of the call's own inside the commit (a question's claim taken meanwhile)
            await self._keep(kept)
            raise
        except BaseException:
            # The store failed, or the call: the results to keep ride the next commit, or `keep_results`.
            self._held = kept + self._held
            self._kept = kept + self._kept
            raise
        self.committed = self.committed or bool(held)
        self._durable(held)
        for done in after:
            done()
        return result

    async def keep_results(self) -> bool:
        """Commit, on their own, the writes to keep that no commit made durable yet (a step's results, held, or
        back from a commit that failed). True when none is left unrecorded: kept now, or lost to a call that
        took the operation over, whose record counts instead."""
        kept, self._kept = self._kept, []
        self._held = [write for write in self._held if write not in kept]
        return await self._keep(kept)

    async def _keep(self, kept: list[Callable[[], Awaitable[Any]]]) -> bool:
        """Commit the writes to keep of a commit that lost on another one, alone; if they lose too (the run lease
        passed on), they are left to whoever holds it now."""
        if not kept:
            return True

        async def run() -> None:
            for write in kept:
                await write()

        try:
            await self._store.atomically(run)
        except (*_LOST, NotFound) as lost:
            log.info("results of a commit that lost were not kept either: %s", lost)
            return True
        except StoreError as failed:
            log.warning("step results not recorded yet: %s", failed)
            self._kept = kept + self._kept
            return False
        self.committed = True
        self._durable(kept)
        return True

    def _durable(self, writes: list[Callable[[], Awaitable[Any]]]) -> None:
        for write in writes:
            done = self._done.pop(write, None)
            if done is not None:
                done()


_LOST = (DecisionConflict, DecisionExpired, AlreadyExists, LeaseLost, IdempotencyKeyConflict, OperationConflict)
"""What a commit loses on: another call's progress, not a fault."""


def _signal_of(lost: Exception) -> Signal:
    if isinstance(lost, IdempotencyKeyConflict):
        return KeyRefused(lost)
    if isinstance(lost, OperationConflict):
        return OperationEnded(lost.current)
    return StaleSnapshot(str(lost))


async def _nothing() -> None:
    return None
