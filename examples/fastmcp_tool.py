"""A FastMCP server with a flow tool: the same durable questions as a native tool, on FastMCP's own `@tool`.

Needs the `fastmcp` extra (`pip install ".[fastmcp]"` from a clone). Run it over stdio as a host does, or
answer it yourself at this terminal:

    mcp-elicit call "python examples/fastmcp_tool.py" refund --arg order=A-1042 --arg amount=49.5

`MCP_ELICIT_STORE` and `MCP_ELICIT_STATE_KEYS` as for any mcp-elicit server (the embedded SQLite file and a
key for this process alone when unset).
"""

from mcp_elicit import Accepted, Elicitation, Flow, RequestState
from mcp_elicit.fastmcp import FastMCPFlows
from mcp_elicit.settings import Settings

settings = Settings.read(only=["store", "state_keys"])
state = RequestState(keys=settings.state_keys) if settings.state_keys else RequestState(single_process=True)
flows = FastMCPFlows(Elicitation(settings.store, request_state=state))
mcp = flows.server("refunds")


@flows.tool(asks=(bool,))
async def refund(flow: Flow, order: str, amount: float) -> str:
    """Refund an order once the person approves the amount."""
    approved = await flow.ask(f"Refund {amount:.2f} EUR for order {order}?", bool)
    if isinstance(approved, Accepted) and approved.data:
        return await flow.step("refund", lambda: f"refunded {amount:.2f} EUR for {order}")
    return "no refund"


@mcp.tool
def order_total(order: str) -> str:
    """A plain FastMCP tool beside the flow tool: no Flow, no operation."""
    return f"{order}: 49.50 EUR"


if __name__ == "__main__":
    mcp.run(show_banner=False)
