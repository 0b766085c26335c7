"""Servers that stand for third parties: not built on `tests.helpers.server`, on purpose.

Each is what another author would write (the SDK's own kind, a hand-written one-era server, a FastMCP 4
server), so the tests show how mcp-elicit's client and FastMCP integration meet servers that are not the
test server's: folding them into its options would make them mcp-elicit servers.
"""
