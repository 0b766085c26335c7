"""A real server for the client-kit tests: the `Flow` tools of `tests.helpers.serving`, plus two plain tools.

`capabilities` returns the client capabilities the server received with the call (from `initialize` on
2025-era connections, from the request's `_meta` on 2026-07-28), so a test can assert what the server saw.
`silent` sleeps without sending anything, for the silence watch. Run in-process (`build`) behind a loopback
HTTP server, or as a stdio subprocess (`python -m tests.helpers.kit_server --store ... --effects ...`).
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer

from mcp_elicit.server import Elicitation, IdentityPolicy, RequestState, Timing
from mcp_elicit.store import open_store
from tests.helpers.serving import Counter, build_tools

SERVER_NAME = "kit-test-server"
SERVER_VERSION = "7.1.0"
SERVER_TITLE = "Kit Test Server"


def build(
    store_url: str, effects: Path, *, public_base_url: str | None = None, long_poll: float = 0.2
) -> tuple[Elicitation, MCPServer]:
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"k" * 32]),
        public_base_url=public_base_url,
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        timing=Timing(long_poll=timedelta(seconds=long_poll)),
    )
    server = runtime.server(SERVER_NAME, version=SERVER_VERSION, title=SERVER_TITLE)
    build_tools(runtime, Counter(effects))

    @server.tool()
    async def capabilities(ctx: Context) -> str:
        """The client capabilities this call arrived with."""
        declared = ctx.client_capabilities
        return json.dumps(declared.model_dump(mode="json", by_alias=True, exclude_none=True) if declared else None)

    @server.tool()
    async def silent(seconds: float) -> str:
        """Sleep without sending anything."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    return runtime, server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--effects", type=Path, required=True)
    parser.add_argument("--public-base-url")
    parser.add_argument("--long-poll", type=float, default=0.2)
    args = parser.parse_args()
    runtime, server = build(args.store, args.effects, public_base_url=args.public_base_url, long_poll=args.long_poll)
    try:
        server.run("stdio")
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
