"""The decision reference of `bench.gateway_gated`: an mcp-elicit server over stdio whose `echo` asks the person one
question (a yes/no form, a durable decision) before it answers, on its own SQLite store (`--store`).

What one durable decision costs a call is this server's `echo` against the SDK's bare `echo`
(`bench._gateway_upstream`), both called directly, in the same run.
"""

from __future__ import annotations

import argparse

from mcp_elicit.server import Elicitation, Flow, RequestState


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    args = parser.parse_args()
    elicitation = Elicitation(args.store, request_state=RequestState(keys=[b"b" * 32]))
    server = elicitation.server("gateway-bench-decision")

    @elicitation.tool()
    async def echo(flow: Flow, message: str) -> str:
        """Say `message` back, once the person said yes."""
        go = await flow.ask("Echo it?", bool)
        return message if go else "no"

    server.run("stdio")


if __name__ == "__main__":
    main()
