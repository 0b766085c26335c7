"""One call in flight through the kit: what it is, the URL flows it waits on, and the host's hold on it.

Each `call_tool` / `get_prompt` / `read_resource` gets its own `CallInFlight`, and everything a round
needs (responses, `requestState`, pacing) lives in that call's own loop, so parallel calls never see each
other's state. The host's manual controls reach the call through it:

- `retry` goes on at once where the kit itself waits (between 2026-07-28 state-only rounds, or after
  `-32042` before retrying); on a 2025-era connection, where the server holds the request open while a
  URL flow runs, it cancels the request in flight (the SDK sends `notifications/cancelled`) and the call
  is sent again under a new JSON-RPC id, which a durable server attaches to the same operation: that is
  how a person says "I'm done" when the server's completion signal got lost. Only when the person is
  past consent (`may_reissue`, given by the client: a flow of the call is open or completed and none
  still awaits consent), since re-issuing while the person is still being asked would withdraw the
  question, and a server that is not durable runs the tool again;
- `stop` cancels the call wherever it is (a round in flight is cancelled as a request, nothing more); it
  then raises `UrlFlowStopped` when it stopped because of a flow, `CallStopped` when the host stopped a
  call that waits on the server with no URL flow of its own.

Where the kit itself waits on the server for a call (after `-32042`, between 2026-07-28 still-waiting
rounds), the wait is on the call too (`waiting`: since when, until when, for which flows), so that a host
can show the person how long it has been and when the kit gives up (`pending.FlowWaits` for the flows,
`mrtr_loop.RoundWaits` for still-waiting rounds no open flow of the call stands for).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import anyio

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Waiting:
    """One stretch of the kit's own waiting on the server for a call, on the client's clock."""

    started: float
    deadline: float | None
    """When the kit stops waiting (`Pacing.max_wait` after `started`); None: no limit."""
    flows: tuple[str, ...]
    """The flows of the call the server is waiting on, as far as the kit can tell."""
    said: str = ""
    """What the server says the call waits on, from its last still-waiting round (approvers, say); "" if nothing."""


@dataclass(eq=False)
class CallInFlight:
    kind: Literal["tool", "prompt", "resource"]
    name: str
    flows: list[str] = field(default_factory=list, init=False)
    """Every flow this call holds (asked during it, or adopted on `-32042`), in order."""
    consented: dict[str, tuple[str, str]] = field(default_factory=dict, init=False)
    """2026-07-28 input key -> (URL, flow id) the person already consented to in this call."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope, init=False)
    stopped_by: str | None = field(default=None, init=False)
    """The flow the call was stopped because of (None: not stopped, or stopped as a whole, see `stopped`)."""
    stopped: bool = field(default=False, init=False)
    stop_reason: str | None = field(default=None, init=False)
    waiting: Waiting | None = field(default=None, init=False)
    """The kit's own wait on the server for this call, while it lasts (set by the round loops)."""
    retry_requested: bool = field(default=False, init=False)
    """The host asked to go on now (read by the `-32042` wait, which also wakes for notifications)."""
    guessed: set[str] = field(default_factory=set, init=False)
    """Flows tied to this call only because it was the one call in flight (2025-era questions carry no
    reference to their request): when the call ends, one still awaiting consent is left to the person."""
    _held: anyio.CancelScope | None = field(default=None, init=False)
    _may_reissue: Callable[[], bool] | None = field(default=None, init=False)
    _waiting: bool = field(default=False, init=False)
    _wake: anyio.Event = field(default_factory=anyio.Event, init=False)

    def retry(self) -> bool:
        """Go on now: wake the kit's own wait, or re-issue a 2025-era request the server holds; else False."""
        if self._waiting:
            self.retry_requested = True
            self._wake.set()
            return True
        if self._held is not None and self._may_reissue is not None and self._may_reissue():
            self._held.cancel()
            return True
        return False

    def stop(self, flow_id: str | None, reason: str | None = None) -> None:
        """Stop the call because of this flow (`UrlFlowStopped`), or with no flow to blame (None: `CallStopped`)."""
        self.stopped, self.stopped_by, self.stop_reason = True, flow_id, reason
        self.scope.cancel()

    def wake(self) -> None:
        """Something the call waits for happened (a completion notification): look again now."""
        self._wake.set()

    def hold_request(self, scope: anyio.CancelScope | None, may_reissue: Callable[[], bool] | None = None) -> None:
        """The scope of the 2025-era request in flight, which `retry` cancels to re-issue it when `may_reissue`
        says the person is where a re-issue makes sense (None: no request to re-issue)."""
        self._held = scope
        self._may_reissue = may_reissue if scope is not None else None

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
