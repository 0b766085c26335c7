"""The write transaction under way in this context (a thread, or an async task), and what it will do at its commit.

One context variable for everything a unit holds until it commits, including what its commit tells the
installed hooks (`mcp_elicit.store.hooks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_elicit.store._core import Core
    from mcp_elicit.store._engine import Tx
    from mcp_elicit.store.protocol import NotificationEvent


class Unit:
    """One write transaction of a core and what it moved."""

    __slots__ = ("audits", "committed", "core", "moved", "notices", "tx")

    def __init__(self, core: Core, tx: Tx) -> None:
        self.core = core
        self.tx = tx
        self.audits: list[tuple[object, ...]] = []
        """Audit rows of the unit, written as one statement with its commit (or before a read of the trail)."""
        self.moved: list[str] = []
        self.notices: list[tuple[Sequence[NotificationEvent], Sequence[str], datetime]] = []
        """Outbox rows to write just before the commit, off the records as the whole unit leaves them."""
        self.committed: list[Callable[[], None]] = []
        """Run once the unit committed (hooks told what it changed); forgotten with a rollback."""


UNIT: ContextVar[Unit | None] = ContextVar("mcp_elicit_store_unit", default=None)


def after_commit(record: Callable[[], None]) -> None:
    """Run `record` once the write transaction under way commits; at once when none is (it has committed)."""
    unit = UNIT.get()
    if unit is None:
        record()
    else:
        unit.committed.append(record)
