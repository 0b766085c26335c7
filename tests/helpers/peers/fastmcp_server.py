"""A FastMCP 4 server of flow tools for the FastMCP tests, in-process or as its own process (stdio or HTTP).

The tools are the `flow` tools of `tests.helpers.server` written as FastMCP users write them, plus what only
FastMCP has to show: a plain `@mcp.tool` beside the flow tools, a FastMCP dependency (`CurrentContext`) in a
flow tool's signature, and bodies that fail with FastMCP's `ToolError` or with a bug; `reserve`
(`Fallback.WEB`) is served when the elicitation has a public base URL for its pages. Side effects are
counted in a file, so a test can prove a step ran once. Run it as
`python -m tests.helpers.peers.fastmcp_server --store URL --effects FILE [--port N] [--lease S]` (stdio without
`--port`). A peer of its own (not `tests.helpers.server`): it stands for a server another framework builds.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.dependencies import CurrentContext
from fastmcp.exceptions import ToolError

from mcp_elicit.fastmcp import FastMCPFlows
from mcp_elicit.model import ResumePolicy
from mcp_elicit.server import (
    Accepted,
    Completed,
    Declined,
    Elicitation,
    Fallback,
    Flow,
    IdentityPolicy,
    RequestState,
    Timing,
)
from mcp_elicit.store import open_store
from tests.helpers.server import Approval, Counter, Seats

SERVER_NAME = "fastmcp-flows"
STATE_KEY = b"f" * 32


def build(elicitation: Elicitation, counter: Counter, **options: Any) -> tuple[FastMCPFlows, FastMCP[Any]]:
    flows = FastMCPFlows(elicitation)
    mcp = flows.server(SERVER_NAME, **options)

    @flows.tool(asks=(Approval,), tags={"ops"})
    async def approve(flow: Flow, scope: str, ctx: Context = CurrentContext()) -> str:  # noqa: B008
        """Ask for approval of a scope, then apply it once."""
        planned = await flow.step("plan", lambda: counter.bump("plan") and f"plan for {scope}")
        answer = await flow.ask(f"Apply {planned}?", Approval, key="approve_scope")
        if isinstance(answer, Accepted) and answer.data.approve:
            await flow.step("apply", lambda: counter.bump("apply"))
            return f"applied {scope} on {ctx.fastmcp.name}" + (f" ({answer.data.note})" if answer.data.note else "")
        return "declined" if isinstance(answer, Declined) else "not approved"

    @flows.tool(fallback=Fallback.ARGUMENTS, name="book")
    async def book_with_fallback(flow: Flow, city: str) -> str:
        """Falls back to call arguments when the client cannot show forms."""
        seats = await flow.ask(f"How many seats to {city}?", Seats)
        return f"booked {seats.data.seats} to {city}" if isinstance(seats, Accepted) else "not booked"

    @flows.tool(description="A URL decision: -32042 on 2025-11-25, an input request on 2026-07-28.")
    async def connect_later(flow: Flow) -> str:
        outcome = await flow.ask_url("Connect your account", key="connect_account", resume=ResumePolicy.NOTIFICATION)
        return "connected" if isinstance(outcome, Completed) else type(outcome).__name__.lower()

    @flows.tool()
    async def set_key(flow: Flow) -> str:
        """Send the person to the server's own key page; the key stays on the server."""
        outcome = await flow.ask_url("Paste your Example API key on the page", key="set_api_key")
        return f"{flow.principal.principal_id} set the key" if isinstance(outcome, Completed) else "no key"

    @flows.tool()
    async def refuse(flow: Flow, why: str) -> str:
        """Journal a step, then fail the way an author means to (FastMCP's ToolError) or as a bug does."""
        await flow.step("prepare", lambda: counter.bump("prepare"))
        if why == "tool-error":
            raise ToolError("refused on purpose")
        if counter.bump("bug") == 1:
            raise RuntimeError("a bug the first time")
        return "went on"

    if elicitation.public_base_url is not None:

        @flows.tool(fallback=Fallback.WEB)
        async def reserve(flow: Flow, city: str) -> str:
            """Asks on the server's own page when the client cannot show the form."""
            seats = await flow.ask(f"How many seats to {city}?", Seats)
            return f"reserved {seats.data.seats} to {city}" if isinstance(seats, Accepted) else "not reserved"

    @mcp.tool
    def ping() -> str:
        """A plain FastMCP tool: no Flow, no operation."""
        return "pong"

    return flows, mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--port", type=int)
    parser.add_argument("--lease", type=float, default=30.0, help="seconds a dead call's claims outlive it")
    arguments = parser.parse_args()
    elicitation = Elicitation(
        open_store(arguments.store),
        request_state=RequestState(keys=[STATE_KEY]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        public_base_url=f"http://127.0.0.1:{arguments.port}" if arguments.port else None,
        timing=Timing(lease=timedelta(seconds=arguments.lease)),
    )
    _, mcp = build(elicitation, Counter(Path(arguments.effects)))
    if arguments.port is None:
        mcp.run(show_banner=False)
    else:
        mcp.run("http", host="127.0.0.1", port=arguments.port, show_banner=False, log_level="warning")


if __name__ == "__main__":
    main()
