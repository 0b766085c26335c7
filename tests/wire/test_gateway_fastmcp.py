"""FastMCP on both sides of the gateway: a FastMCP server asking with `ctx.elicit` as the upstream (its own process,
over stdio), and FastMCP's `Client` as the host, over streamable HTTP, on either protocol era. The question reaches the
host's elicitation handler, its answer reaches the upstream, and the decision is recorded by the gateway."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from mcp_elicit.gateway import Gateway
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import IdentityPolicy
from mcp_elicit.store import open_store
from tests.helpers.gateway import stdio
from tests.helpers.http_harness import free_port, serving

pytestmark = pytest.mark.anyio
UPSTREAM = (sys.executable, "-m", "tests.helpers.peers.fastmcp_plain")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_fastmcp_clients_answer_reaches_a_fastmcp_upstreams_ctx_elicit(mode: str, tmp_path: Path) -> None:
    asked: list[str] = []

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append(message)
        return response_type(value=3) if response_type is not None else 3

    store = open_store(f"sqlite://{tmp_path / 'gateway.db'}")
    try:
        loopback = IdentityPolicy(allow_unauthenticated_loopback=True)  # as the command serves loopback
        gateway = Gateway(stdio(UPSTREAM), store=store, identity=loopback)
        with serving(gateway.server.streamable_http_app(host="127.0.0.1"), free_port()) as base:
            async with Client(f"{base}/mcp", mode=mode, elicitation_handler=handler) as client:
                result = await client.call_tool("book", {"city": "Oslo"})
        [decision] = store.list_decisions(Operator("test"))
    finally:
        store.close()
    assert result.data == "booked 3 to Oslo"
    assert asked == ["How many seats to Oslo?"]
    assert decision.status is DecisionStatus.ACCEPTED
