"""Expiring what is overdue while a server runs, so nothing pending waits for a late signal or an operator.

A decision nobody answers, an operation nobody calls again: without a sweep they stay `requested` and
`open` in every listing until a late signal or `mcp-elicit decisions sweep` touches them. The server's
lifespan runs one `Sweeper`, which calls the store's `sweep_expired` every `interval`, jittered by a fifth
either way so that instances started together do not sweep in step. The store audits each expiry as the
clock's (`system:clock`) and announces it, so a call waiting on the record looks again at once.

Guarantees: while the server's event loop runs, overdue records are expired within about `interval` of
their deadline; a sweep that fails (the store away) is logged and tried again at the next tick. On
PostgreSQL one instance sweeps at a time; the others find the sweep taken and skip it.

Does not guarantee: that a waiting call learns of an expiry from the sweep. It does not need to: every wait
ends at its decision's deadline and expires the decision itself (see `Execution.settle`).
"""

from __future__ import annotations

import logging
import random
from datetime import timedelta

import anyio

from mcp_elicit.store import StoreError, SweepResult
from mcp_elicit.store.aio import AsyncStore

log = logging.getLogger(__name__)

DEFAULT_SWEEP_INTERVAL = timedelta(seconds=30)
JITTER = 0.2
"""How far a pause between two sweeps strays from the interval, either way, as a fraction of it."""


class Sweeper:
    """Sweeps one store every jittered `interval` for as long as `run` runs."""

    def __init__(self, store: AsyncStore, interval: timedelta) -> None:
        if interval <= timedelta(0):
            raise ValueError(f"sweep_interval must be positive, got {interval}")
        self._store = store
        self._interval = interval.total_seconds()

    def pause(self) -> float:
        """Seconds until the next sweep: the interval, give or take a fifth."""
        return self._interval * random.uniform(1 - JITTER, 1 + JITTER)  # noqa: S311 (spreading, not secrecy)

    async def run(self) -> None:
        """Sweep after each pause until cancelled (the server runs it once however many lifespans are up, see
        `background`)."""
        while True:
            await anyio.sleep(self.pause())
            await self.sweep()

    async def sweep(self) -> SweepResult | None:
        """One sweep, which `AsyncStore` runs as a batch: a thousand rows are not a call to run inline on the
        event loop. None when the store failed."""
        try:
            result = await self._store.sweep_expired()
        except StoreError as error:
            log.warning(
                "cannot sweep %s for overdue records (trying again later): %s", self._store.sync.display_url, error
            )
            return None
        if result.decisions or result.operations:
            log.info("expired %d overdue decisions and %d operations", result.decisions, result.operations)
        return result
