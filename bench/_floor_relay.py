"""The floor of `bench.gateway`: a relay made of the SDK's own server and client, and nothing else.

A lowlevel `Server` over stdio whose `tools/list` and `tools/call` handlers forward to a `Client` of the
upstream (`bench._gateway_upstream`, a process of its own), the way anyone would write a relay with the SDK
alone: no supervision, no lanes, no timeouts, no relay of anything but tools. Like the gateway, it relays the
upstream's results raw (`send_request` with a raw dict result, checked once by the SDK against the protocol
version), not through the typed `call_tool`, which would also build the result's models and validate it
against the tool's output schema: the two relays do the same work per call. What the gateway costs above it
is what the gateway adds. Run it as `python -m bench._floor_relay --mode legacy|2026-07-28`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp_types import CallToolRequest, CallToolRequestParams, ListToolsRequest
from mcp_types import PaginatedRequestParams as Page
from pydantic import RootModel

UPSTREAM = StdioServerParameters(command=sys.executable, args=["-m", "bench._gateway_upstream"])


class Raw(RootModel[dict[str, Any]]):
    """A result as the upstream sent it."""


async def main(mode: str) -> None:
    async with Client(UPSTREAM, mode=mode) as upstream:

        async def list_tools(ctx: ServerRequestContext[Any], params: Page | None) -> dict[str, Any]:
            return (await upstream.session.send_request(ListToolsRequest(params=params), Raw)).root

        async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> dict[str, Any]:
            return (await upstream.session.send_request(CallToolRequest(params=params), Raw)).root

        server = Server[Any]("floor-relay")
        server.add_request_handler("tools/list", Page, list_tools)
        server.add_request_handler("tools/call", CallToolRequestParams, call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench._floor_relay")
    parser.add_argument("--mode", choices=["legacy", "2026-07-28"], required=True)
    anyio.run(main, parser.parse_args().mode)
