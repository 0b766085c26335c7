"""The upstream of `bench.gateway`: one SDK `MCPServer` over stdio with one tool, `echo`, and nothing else.

Both relays the benchmark compares start a copy of their own, so neither shares a process with the other.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("gateway-bench-upstream")


@server.tool()
def echo(message: str) -> str:
    """Say `message` back."""
    return message


if __name__ == "__main__":
    server.run("stdio")
