"""The identifier of the MCP tasks extension, which the server's era code and the client kit both put on the wire.

One name in one place: the server advertises and requires it, the tool-approval draft requires it beside its own,
and the client kit declares it.
"""

from __future__ import annotations

from typing import Final

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The 2026-07-28 tasks extension (`tasks/get`, `tasks/cancel`, a call answered with a task handle)."""
