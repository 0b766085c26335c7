"""The server process for `bench.fastmcp_flows`: one tool body served twice, by the SDK's `MCPServer` and by FastMCP.

Each also serves `echo`, a tool without a Flow: what FastMCP itself costs next to `MCPServer` for a call.
Both servers run in this one process, on one event loop, each behind its own uvicorn listener, over one
store: interpreter, loop, transport and store cost them alike, and what is left is what wraps the body.
Each has an `Elicitation` of its own (same store URL, same key ring), as two deployments would. A control
tool on the native server reports the process's CPU time, so the client can tell server work from waiting.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time

import uvicorn
from pydantic import BaseModel, Field

from mcp_elicit.fastmcp import FastMCPFlows
from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, RequestState
from mcp_elicit.store import open_store

TOOL = "approve_change"
BARE_TOOL = "echo"
CONTROL_TOOL = "bench_control"
KEY = "approve_change"
ANSWER: dict[str, str | int | float | bool | list[str] | None] = {"approve": True, "note": "ship it"}


class Approval(BaseModel):
    approve: bool = Field(description="Apply the change")
    note: str = Field(default="", max_length=80, description="A short note for the team")


async def approve_change(flow: Flow, n: int) -> str:
    """One journaled step and one durable form decision: the tool both servers serve."""
    planned = await flow.step("plan", lambda: f"change {n}")
    answer = await flow.ask(f"Apply {planned}?", Approval, key=KEY)
    return f"applied {n}" if isinstance(answer, Accepted) and answer.data.approve else f"not applied {n}"


async def echo(n: int) -> str:
    """No Flow: what each server costs for a call by itself, the floor under the tool above."""
    return f"applied {n}"


def runtime(store_url: str) -> Elicitation:
    return Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"b" * 32]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
    )


async def serve(store_url: str, native_port: int, fastmcp_port: int) -> None:
    native, flowing = runtime(store_url), runtime(store_url)
    server = native.server("fastmcp-bench")
    native.tool(name=TOOL)(approve_change)
    server.tool(name=BARE_TOOL)(echo)

    @server.tool(name=CONTROL_TOOL)
    async def bench_control() -> str:
        """This process's CPU seconds so far."""
        return repr(time.process_time())

    flows = FastMCPFlows(flowing)
    mcp = flows.server("fastmcp-bench")
    flows.tool(name=TOOL)(approve_change)
    mcp.tool(name=BARE_TOOL)(echo)
    apps = [(server.streamable_http_app(host="127.0.0.1"), native_port), (mcp.http_app(), fastmcp_port)]
    servers = [
        uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
        for app, port in apps
    ]
    try:
        await asyncio.gather(*(served.serve() for served in servers))
    finally:
        native.close()
        flowing.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._fastmcp_server")
    parser.add_argument("--store", required=True, help="store URL (sqlite://... or postgresql://...)")
    parser.add_argument("--native-port", type=int, required=True)
    parser.add_argument("--fastmcp-port", type=int, required=True)
    parser.add_argument("--cpu", type=int, help="run on this CPU only")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args.store, args.native_port, args.fastmcp_port))


if __name__ == "__main__":
    main()
