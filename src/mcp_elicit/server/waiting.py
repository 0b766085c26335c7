"""Waiting for a URL decision to settle, without a task per decision between polls.

Polling the store with growing pauses is the floor, and it alone is correct across processes. `Wakeups`
only shortens the wait: the store reports each URL decision it moves (in this process, and through
PostgreSQL LISTEN/NOTIFY from every instance), and a waiter on that decision looks again at once.
"""

from __future__ import annotations

from datetime import datetime

import anyio

from mcp_elicit.model import Decision
from mcp_elicit.server.flow import Flow

FIRST_POLL = 0.1
LONGEST_POLL = 1.0


class Wakeups:
    """One event per waiting decision, set when the store says the decision moved."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[anyio.Event]] = {}

    def changed(self, elicitation_id: str) -> None:
        for event in self._waiting.pop(elicitation_id, ()):
            event.set()

    async def wait(self, elicitation_id: str, seconds: float) -> None:
        event = anyio.Event()
        self._waiting.setdefault(elicitation_id, set()).add(event)
        try:
            with anyio.move_on_after(seconds):
                await event.wait()
        finally:
            waiters = self._waiting.get(elicitation_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiting[elicitation_id]


async def settle(flow: Flow, decision: Decision, *, until: datetime) -> Decision:
    """Look again until the decision is terminal or `until` passes: on a wake-up, or after a growing pause."""
    pause = FIRST_POLL
    await flow.commit()
    while not decision.is_terminal:
        remaining = (until - flow.now()).total_seconds()
        if remaining <= 0:
            break
        if flow.wakeups is None:
            await anyio.sleep(min(pause, remaining))
        else:
            await flow.wakeups.wait(decision.elicitation_id, min(pause, remaining))
        pause = min(pause * 2, LONGEST_POLL)
        decision = await flow.refresh(decision)
    return decision
