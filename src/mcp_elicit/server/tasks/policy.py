"""Which tools may run as MCP tasks, and the lifetimes the server grants them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum


class TaskPolicy(StrEnum):
    """Per tool: never a task, a task when the client supports tasks, or only ever as a task.

    `OPTIONAL` falls back to running on the call itself when the client does not support tasks; `REQUIRED`
    refuses such a call the way its era says (2026-07-28: -32021 naming the tasks extension; 2025-11-25:
    -32601, as the spec demands for a call without `params.task`).
    """

    NEVER = "never"
    OPTIONAL = "optional"
    REQUIRED = "required"


class TaskStart(StrEnum):
    """Where a task begins: with the call, or where the body calls `flow.begin_task()`.

    With `FLOW` what the body asks before `begin_task` is asked on the call itself (2026-07-28 rounds, a
    2025-11-25 live request), as the tasks extension advises for what a task cannot start without; those
    questions and the task's own are different decisions, so their keys never meet.
    """

    CALL = "call"
    FLOW = "flow"


DEFAULT_TASK_TTL = timedelta(hours=24)
MAX_TASK_TTL = timedelta(days=7)
DEFAULT_POLL_INTERVAL = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """How long a task lives (a 2025-11-25 client may ask for less, never for more than `max_ttl`) and how
    often its client is told to poll."""

    default_ttl: timedelta = DEFAULT_TASK_TTL
    max_ttl: timedelta = MAX_TASK_TTL
    poll_interval: timedelta = DEFAULT_POLL_INTERVAL

    def __post_init__(self) -> None:
        if self.default_ttl <= timedelta(0) or self.max_ttl <= timedelta(0):
            raise ValueError("task TTLs must be positive")
        if self.poll_interval <= timedelta(0):
            raise ValueError("the poll interval must be positive")

    def ttl_for(self, requested_ms: int | None) -> timedelta:
        """The TTL granted: the one asked for (at least a second), else the default; never above `max_ttl`."""
        wanted = self.default_ttl if requested_ms is None else timedelta(milliseconds=max(requested_ms, 1000))
        return min(wanted, self.max_ttl)
