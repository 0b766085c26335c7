"""What the store tells an observer above it (telemetry), so that the store never needs to know who listens.

An observer subclasses `StoreHooks`, overrides what it cares about and installs itself with `install`. The
store calls the hooks around its transitions (so a span can wrap one), when a compare-and-set lost, and once
a change committed; with none installed it skips them without building anything. Hooks observe only: the
store runs the same statements, commits and raises the same errors whether or not any are installed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mcp_elicit.model import Decision, DecisionStatus, Operation, OperationStatus, SubjectKind
from mcp_elicit.store.protocol import SweepResult


@dataclass(frozen=True, slots=True)
class DecisionCreated:
    """A decision was created (requested)."""

    decision: Decision


@dataclass(frozen=True, slots=True)
class DecisionEnded:
    """A transition gave a decision a terminal status (an expiry is `Expired` instead)."""

    decision: Decision


@dataclass(frozen=True, slots=True)
class Expired:
    """The clock ended `count` records of `kind` (a sweep's batch, or a late signal)."""

    kind: SubjectKind
    count: int


Committed = DecisionCreated | DecisionEnded | Expired


class StoreHooks:
    """The store's hooks, each doing nothing here: an around-call hook only runs its call."""

    async def creating(self, decision: Decision, create: Callable[[], Awaitable[Decision]]) -> Decision:
        """Around `create_decision`; must return what `create` returns, and let its errors through."""
        return await create()

    async def transitioning(
        self, snapshot: Decision, to: DecisionStatus, transition: Callable[[], Awaitable[Decision]]
    ) -> Decision:
        """Around `transition` from `snapshot` to `to`."""
        return await transition()

    async def finishing(
        self, snapshot: Operation, to: OperationStatus, finish: Callable[[], Awaitable[Operation]]
    ) -> Operation:
        """Around `finish_operation` from `snapshot` to `to`."""
        return await finish()

    async def sweeping(self, sweep: Callable[[], Awaitable[SweepResult]]) -> SweepResult:
        """Around `sweep_expired`."""
        return await sweep()

    def conflict(self, kind: SubjectKind) -> None:
        """A compare-and-set on a `kind` record lost to another writer: told at once, for it happened whether
        or not the transaction that found it commits."""

    def committed(self, change: Committed) -> None:
        """`change` committed; a change rolled back is never told."""


_installed: StoreHooks | None = None


def install(hooks: StoreHooks | None) -> None:
    """Make `hooks` the ones every store of this process calls (`None`: none), in place of any before."""
    global _installed
    _installed = hooks


def installed() -> StoreHooks | None:
    """The hooks installed now, if any."""
    return _installed
