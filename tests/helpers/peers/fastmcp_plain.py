"""A FastMCP server as its users write one, asking with `ctx.elicit`: the gateway's FastMCP upstream. Run it as
`python -m tests.helpers.peers.fastmcp_plain` (stdio)."""

from __future__ import annotations

from fastmcp import Context, FastMCP

mcp = FastMCP("fastmcp-plain")


@mcp.tool
async def book(city: str, ctx: Context) -> str:
    """Book seats to `city`, asking how many."""
    answer = await ctx.elicit(f"How many seats to {city}?", int)
    if answer.action != "accept":
        return f"no booking ({answer.action})"
    return f"booked {answer.data} to {city}"


if __name__ == "__main__":
    mcp.run("stdio", show_banner=False)
