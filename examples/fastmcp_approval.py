"""A FastMCP server whose deploy tool runs only once a person approved the call (and may pick another region).

Run it as an MCP host runs it, over stdio (`mcp-elicit install HOST --server "python examples/fastmcp_approval.py"`),
or approve its calls yourself at this terminal (needs the `fastmcp` extra):

    mcp-elicit call "python examples/fastmcp_approval.py" deploy --arg service=web --arg region=eu

The decisions go to the embedded SQLite file unless `MCP_ELICIT_STORE` names another store.
"""

import sys
from typing import Literal

from mcp_elicit import Elicitation, Flow, Gate, RequestState
from mcp_elicit.fastmcp import FastMCPFlows
from mcp_elicit.settings import Settings


def deploy_now(service: str, region: str, idempotency_key: str) -> str:
    print(f"deploying {service} to {region} (key {idempotency_key})", file=sys.stderr)  # stdout is MCP's
    return f"{service} deployed to {region}"


settings = Settings.read(only=["store", "state_keys"])
state = RequestState(keys=settings.state_keys) if settings.state_keys else RequestState(single_process=True)
flows = FastMCPFlows(Elicitation(settings.store, request_state=state))
mcp = flows.server("deployments")


@flows.tool(gate=Gate(editable=["region"], message="Deploy to production?"))
async def deploy(flow: Flow, service: str, region: Literal["eu", "us"]) -> str:
    """Deploy a service to production, once a person approved it (they may change the region)."""
    return await flow.step("deploy", deploy_now, service, region, flow.idempotency_key("deploy"))


if __name__ == "__main__":
    mcp.run(show_banner=False)
