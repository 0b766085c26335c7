"""Waiting for a URL decision to settle, without a task per decision between polls."""

from __future__ import annotations

from datetime import datetime

import anyio

from mcp_elicit.model import Decision
from mcp_elicit.server.flow import Flow

FIRST_POLL = 0.1
LONGEST_POLL = 1.0


async def settle(flow: Flow, decision: Decision, *, until: datetime) -> Decision:
    """Poll the store with growing pauses until the decision is terminal or `until` passes."""
    pause = FIRST_POLL
    while not decision.is_terminal:
        remaining = (until - flow.now()).total_seconds()
        if remaining <= 0:
            break
        await anyio.sleep(min(pause, remaining))
        pause = min(pause * 2, LONGEST_POLL)
        decision = await flow.refresh(decision)
    return decision
