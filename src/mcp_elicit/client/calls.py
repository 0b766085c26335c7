"""One call in flight through the kit: what it is, the URL flows it waits on, and the host's hold on it.

Each `call_tool` / `get_prompt` gets its own `CallInFlight`, and everything a round needs (responses,
`requestState`, pacing) lives in that call's own loop, so parallel calls never see each other's state. The
host's manual controls reach the call through it: `retry_now` wakes the call where the kit itself waits
(between state-only rounds, or after `-32042` before retrying), and stopping cancels the call wherever it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import anyio

Sleep = Callable[[float], Awaitable[None]]


@dataclass(eq=False)
class CallInFlight:
    kind: Literal["tool", "prompt"]
    name: str
    flows: list[str] = field(default_factory=list, init=False)
    consented: dict[str, tuple[str, str]] = field(default_factory=dict, init=False)
    """2026-07-28 input key -> (URL, flow id) the person already consented to in this call."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope, init=False)
    stopped_by: str | None = field(default=None, init=False)
    retry_requested: bool = field(default=False, init=False)
    _waiting: bool = field(default=False, init=False)
    _wake: anyio.Event = field(default_factory=anyio.Event, init=False)

    def retry(self) -> bool:
        """Go on at once if the kit is pacing or waiting; False when the server holds the call instead."""
        if not self._waiting:
            return False
        self.retry_requested = True
        self._wake.set()
        return True

    def stop(self, flow_id: str) -> None:
        """Stop the call because of this flow; the call then raises `UrlFlowStopped`."""
        self.stopped_by = flow_id
        self.scope.cancel()

    def wake(self) -> None:
        """Something the call waits for happened (a completion notification): look again now."""
        self._wake.set()

    async def pause(self, seconds: float | None, sleep: Sleep) -> None:
        """Wait `seconds` (None: until woken), or less if the host retries now or a notification arrives."""
        self._waiting = True
        try:
            async with anyio.create_task_group() as group:

                async def timer() -> None:
                    assert seconds is not None
                    await sleep(seconds)
                    group.cancel_scope.cancel()

                async def woken() -> None:
                    await self._wake.wait()
                    group.cancel_scope.cancel()

                if seconds is not None:
                    group.start_soon(timer)
                group.start_soon(woken)
        finally:
            self._waiting = False
            self._wake = anyio.Event()
