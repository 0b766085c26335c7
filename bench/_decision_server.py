"""The decision reference of `bench.gateway_gated`: an mcp-elicit server over stdio whose `echo` runs only once the
person approved the call (`Gate()`: one durable approval decision, the one a gateway's gate asks), on its own
SQLite store (`--store`).

What one durable decision costs a call is this server's `echo` against the SDK's bare `echo`
(`bench._gateway_upstream`), both called directly, in the same run.
"""

from __future__ import annotations

import argparse

from mcp_elicit.approvals import Gate
from mcp_elicit.server import Elicitation, Flow, RequestState


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    args = parser.parse_args()
    elicitation = Elicitation(args.store, request_state=RequestState(keys=[b"b" * 32]))
    server = elicitation.server("gateway-bench-decision")

    @elicitation.tool(gate=Gate())
    async def echo(flow: Flow, message: str) -> str:
        """Say `message` back, once the person approved it."""
        return message

    server.run("stdio")


if __name__ == "__main__":
    main()
