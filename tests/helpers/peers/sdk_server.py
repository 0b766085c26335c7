"""A stdio server of the SDK's own kind, written without mcp-elicit: a plain `MCPServer`.

`book` asks with `ctx.elicit`, the way tools written for the SDK ask: an `elicitation/create` request on the
live call, which 2026-07-28 connections do not have, so there the SDK fails the call; on 2025-11-25 the
question reaches the client. `reserve` asks the way FastMCP 4's `Context.elicit` does: on a 2026-07-28
connection it refuses before sending anything, in FastMCP's words, as a tool error. `connect` sends a
URL-mode request with `ctx.elicit_url`, which the SDK sends on any protocol (2025-06-18 included), and says
how the client answered. `capabilities` returns the client capabilities the server received. `crash` logs
a line and raises: the SDK answers only "Error executing tool crash" and logs the traceback to stderr.
`hold` writes a marker file and then sleeps, so that a test knows the call is in flight before it kills
the process (`pid`). Run it as `python -m tests.helpers.peers.sdk_server`; `server` is the same server for in-process
use. A peer of its own (not `tests.helpers.server`): it stands for tools written for the SDK, without mcp-elicit.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field


class Seats(BaseModel):
    seats: int = Field(ge=1, le=9, description="How many seats")


CRASH_LOG = "opening the ledger"
CONNECT_URL = "https://accounts.example/connect"

server = MCPServer("sdk-server")
log = logging.getLogger("tests.helpers.peers.sdk_server")


@server.tool()
async def book(ctx: Context, city: str) -> str:
    """Ask how many seats, then book them."""
    answer = await ctx.elicit(f"How many seats to {city}?", Seats)
    if answer.action == "accept":
        return f"booked {answer.data.seats} to {city}"
    return f"not booked ({answer.action})"


@server.tool()
async def reserve(ctx: Context, city: str) -> str:
    """Ask how many seats, refusing up front where the protocol has no server-initiated requests."""
    if ctx.protocol_version == "2026-07-28":
        raise ToolError(
            f"elicitation via server-initiated requests is unavailable on {ctx.protocol_version} connections."
        )
    return await book(ctx, city)


@server.tool()
async def connect(ctx: Context) -> str:
    """Send the person to a page to connect an account."""
    try:
        answer = await ctx.elicit_url("Connect your account", CONNECT_URL, "connect-1")
    except MCPError as refused:
        return f"refused: {refused.code} {refused.error.message}"
    return answer.action


@server.tool()
async def capabilities(ctx: Context) -> str:
    """The client capabilities of this connection."""
    declared = ctx.client_capabilities
    return json.dumps(declared.model_dump(mode="json", by_alias=True, exclude_none=True) if declared else None)


@server.tool()
async def crash() -> str:
    """Fail the way a bug does."""
    log.warning(CRASH_LOG)
    ledger: dict[str, int] = {}
    return str(ledger["read-only ledger"])


@server.tool()
async def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
async def hold(marker: str, seconds: float) -> str:
    """Write `marker`, then sleep."""
    Path(marker).write_text("holding")
    await anyio.sleep(seconds)
    return f"held {seconds} s"


if __name__ == "__main__":
    server.run("stdio")
