"""Cutting a call only when the server is silent, never while a person decides.

A fixed read timeout cannot tell a dead server from a person who takes twenty minutes to read a deploy
plan: on 2025-era connections the `tools/call` stays open while the question is on screen. So the SDK's
own read timeouts are switched off (`ElicitingClient` passes none, and its HTTP client has no read
timeout), and this watch cuts a call instead when the server has sent nothing on the connection for
`limit` seconds *while no person was deciding*: time inside the handler does not count, and every
incoming message (a result, a progress notification, the next question) starts the count again.

A person also decides in the browser: after consenting to a URL, a 2025-11-25 server holds the call open
until the flow is done, and sends nothing meanwhile. A guarded call whose `busy` check says so (it holds
an open URL flow) is not cut either, and gets the full `limit` again once the flow no longer counts:
the client decides how long it does (a flow counts for at most `Pacing.max_wait` after it was opened),
so a server that took consent and then went silent for good is still cut. On
2026-07-28 no request stays open during a flow (the kit polls with short rounds), so there the browser
time is bounded by `Pacing.max_wait` instead.

One watcher task per client looks at every guarded call; a call pays nothing but a cancel scope.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import anyio

from mcp_elicit.client.errors import ServerSilent

T = TypeVar("T")

Clock = Callable[[], float]


@dataclass(eq=False)
class _Guarded:
    started: float
    busy: Callable[[], bool] | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class SilenceWatch:
    """Guards calls against a silent server; `limit=None` never cuts anything."""

    def __init__(self, limit: float | None, clock: Clock = time.monotonic, tick: float | None = None) -> None:
        self.limit = limit
        self._clock = clock
        self._tick = tick if tick is not None else _tick_for(limit)
        self._heard = clock()
        self._deciding = 0
        self._guarded: set[_Guarded] = set()
        self._wake = anyio.Event()

    def heard(self) -> None:
        """Something arrived from the server."""
        self._heard = self._clock()

    @contextmanager
    def person_deciding(self) -> Iterator[None]:
        """While inside, no call is cut; afterwards the server gets the full `limit` again."""
        self._deciding += 1
        try:
            yield
        finally:
            self._deciding -= 1
            self._heard = self._clock()

    async def guard(self, operation: Callable[[], Awaitable[T]], busy: Callable[[], bool] | None = None) -> T:
        """Run one call; raise `ServerSilent` if the watch had to cut it.

        `busy`: whether a person is working on something this call waits for (an open URL flow).
        """
        if self.limit is None:
            return await operation()
        guarded = _Guarded(started=self._clock(), busy=busy)
        self._guarded.add(guarded)
        self._wake.set()
        try:
            with guarded.scope:
                return await operation()
        finally:
            self._guarded.discard(guarded)
        raise ServerSilent(self.limit)

    async def run(self) -> None:
        """The watcher; runs until cancelled, idle while nothing is guarded."""
        if self.limit is None:
            return
        limit = self.limit
        while True:
            if not self._guarded:
                await self._wake.wait()
                self._wake = anyio.Event()
            await anyio.sleep(self._tick)
            if self._deciding:
                continue
            now = self._clock()
            for guarded in list(self._guarded):
                if guarded.busy is not None and guarded.busy():
                    guarded.started = now
                elif now - max(guarded.started, self._heard) > limit:
                    guarded.scope.cancel()


def _tick_for(limit: float | None) -> float:
    """How often the watcher looks: an eighth of the limit, so a call is cut at most 12.5 % late, but no more
    than once a second (a limit is minutes in practice) and no less than every 50 ms (short test limits)."""
    if limit is None:
        return 1.0
    return min(1.0, max(0.05, limit / 8))
