"""`mcp-elicit gateway`: any MCP server, in any language, behind mcp-elicit.

What it does today: it relays every request family of one upstream server (stdio or streamable HTTP), or of
several each under its prefix (`routing`, named in a `gateway.toml`: `config`), to a client of either protocol
era, supervises each upstream (restarts it with a backoff, times out a hang, refuses a malformed result), and
turns what an upstream asks during a `tools/call` into durable decisions, asked the way the client's era asks,
whichever era the upstream speaks (`questions`). A call that asks nothing writes nothing to the store. An upstream
with a credential (`credentials`) is connected by each signed-in person on the gateway's pages and reached with
their credential, in sessions of theirs alone (`connecting`).
"""

from mcp_elicit.gateway.config import ConfigError, GatewayConfig, read_config
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.gateway.predicate import Predicate, PredicateError
from mcp_elicit.gateway.relay import Gateway, GatewayServer
from mcp_elicit.gateway.upstream import (
    DEFAULT_TIMEOUT,
    ERAS,
    HTTP_SESSIONS,
    Upstream,
    UpstreamEra,
    UpstreamUnavailable,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "ERAS",
    "HTTP_SESSIONS",
    "ConfigError",
    "GateTable",
    "Gateway",
    "GatewayConfig",
    "GatewayServer",
    "Predicate",
    "PredicateError",
    "Upstream",
    "UpstreamEra",
    "UpstreamUnavailable",
    "read_config",
]
