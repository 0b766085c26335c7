"""Keeping the claims a process's calls hold alive, with one task for all of them.

A call holds a claim while it runs a step or carries a question, and for a moment after, until the commit
that makes what it did durable lets go of it. The claim's lease must not lapse meanwhile, or another call
would take over work that is not lost. Renewing from one task per claim would cost every step a task of
its own; one keeper per process renews every claim it was given each third of a lease instead, and a
call's only cost is putting its claim in and taking it out.

Guarantees: a claim kept here, by a process whose event loop runs, is renewed at least every `lease / 3`
while it is kept; a renewal that fails (the store away) is tried again at the next tick, and one that
finds the claim taken over stops keeping it, with a warning.

Does not guarantee: anything once the process stops or its loop stalls for a whole lease: the claim then
lapses and another call may take over, which is what a lease is for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import anyio

from mcp_elicit.model import Principal
from mcp_elicit.store import StoreError
from mcp_elicit.store.aio import AsyncStore

log = logging.getLogger(__name__)


class Kept:
    """One claim in the keeper's care, until `drop`."""

    __slots__ = ("_leases", "caller", "dropped", "holder", "name", "operation_id")

    def __init__(self, leases: Leases, operation_id: str, name: str, holder: str, caller: Principal) -> None:
        self.operation_id, self.name, self.holder, self.caller = operation_id, name, holder, caller
        self.dropped = False
        self._leases = leases

    def drop(self) -> None:
        """Stop renewing (the claim itself stays as it is in the store: released, or left to lapse)."""
        if not self.dropped:
            self.dropped = True
            self._leases._kept.discard(self)


class Leases:
    def __init__(self, store: AsyncStore, lease: timedelta, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._lease = lease
        self._clock = clock
        self._kept: set[Kept] = set()
        self._wake = anyio.Event()

    def keep(self, operation_id: str, name: str, holder: str, caller: Principal) -> Kept:
        kept = Kept(self, operation_id, name, holder, caller)
        self._kept.add(kept)
        self._wake.set()
        return kept

    async def run(self) -> None:
        """Renew what is kept every third of a lease, for as long as the task runs; idle while nothing is.
        One task per keeper (see `background.Shared`)."""
        while True:
            if not self._kept:
                await self._wake.wait()
                self._wake = anyio.Event()
            await anyio.sleep(self._lease.total_seconds() / 3)
            for kept in list(self._kept):
                await self._renew(kept)

    async def _renew(self, kept: Kept) -> None:
        try:
            renewed = await self._store.renew_claim(
                kept.operation_id,
                kept.name,
                holder=kept.holder,
                lease_until=self._clock() + self._lease,
                caller=kept.caller,
            )
        except StoreError as error:
            log.warning("operation %s: cannot renew the claim on %s: %s", kept.operation_id, kept.name, error)
            return
        if not renewed and not kept.dropped:
            log.warning(
                "operation %s: the claim on %s lapsed and another call took it over", kept.operation_id, kept.name
            )
            kept.drop()
