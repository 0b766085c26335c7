"""`mcp-elicit gateway --upstream COMMAND|URL`: an MCP server of any kind, relayed to any client.

Over stdio by default, so that a host launches the gateway where it launched the server. The upstream is
started (or reached) before the gateway answers anyone: one it cannot start or reach is said at once, exit 2.
A stdio upstream is started like a command typed at the shell, with this environment, and its stderr is this
command's.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Annotated, NoReturn

import anyio
import typer
import uvicorn
from mcp.server.stdio import stdio_server
from rich.console import Console
from rich.markup import escape

from mcp_elicit.cli._listening import LOOPBACK, LogFormatOption, http_address
from mcp_elicit.gateway import DEFAULT_TIMEOUT, Gateway, Upstream, UpstreamUnavailable
from mcp_elicit.logging import LogFormat
from mcp_elicit.logging import configure as configure_logging
from mcp_elicit.server import IdentityPolicy, RequestState
from mcp_elicit.settings import Settings, SettingsError
from mcp_elicit.store import ENV_VAR, StoreError, open_store

err = Console(stderr=True)
log = logging.getLogger(__name__)


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "streamable-http"


class Era(StrEnum):
    AUTO = "auto"
    LEGACY = "legacy"
    V2026_07_28 = "2026-07-28"


def gateway(
    upstream: Annotated[
        str,
        typer.Option(
            "--upstream",
            help='The server to relay: a command line run over stdio ("npx -y some-server") or an http(s):// URL.',
        ),
    ],
    transport: Annotated[
        Transport, typer.Option(help="How clients reach the gateway: stdio (launched by a host) or streamable-http.")
    ] = Transport.STDIO,
    host: Annotated[str, typer.Option(help="streamable-http: the loopback address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="streamable-http: the port to listen on.")] = 8000,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar=ENV_VAR,
            help="Store URL (default: the embedded SQLite file): where the upstream's questions become decisions.",
        ),
    ] = None,
    era: Annotated[
        Era, typer.Option(help="How to talk to the upstream: auto (the handshake, else discovery), legacy, 2026-07-28.")
    ] = Era.AUTO,
    timeout: Annotated[
        float,
        typer.Option(min=0, help="Seconds an upstream request may go without an answer or progress; 0: no limit."),
    ] = DEFAULT_TIMEOUT,
    sessions: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Sessions with the upstream at most (each a process, for a command); default: 8 for a URL, 1 for a "
            "command.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="What errors and logs call the upstream (default: the --upstream text).")
    ] = None,
    log_format: LogFormatOption = LogFormat.TEXT,
) -> None:
    """Relay an MCP server (any language, stdio or streamable HTTP) to MCP clients of either protocol era.

    Every request is relayed as it came; the upstream is restarted if it exits, a request it leaves unanswered
    for TIMEOUT seconds fails, and what it asks during a tool call becomes a durable decision, asked of the client
    the way its protocol era asks (rounds are sealed with MCP_ELICIT_STATE_KEYS when set).
    """
    configure_logging(log_format)
    if transport is Transport.HTTP and host not in LOOPBACK:
        _fail(f"the gateway has no sign-in: it listens on loopback only ({', '.join(LOOPBACK)}), not on {host}")
    try:
        spec = Upstream.parse(upstream, name=name, era=era.value, timeout=timeout or None, sessions=sessions)
    except ValueError as error:
        _fail(f"--upstream: {error}")
    try:
        ring = Settings.read(only=["state_keys"]).state_keys
    except SettingsError as error:
        _fail("; ".join(error.problems))
    try:
        opened = open_store(store)
    except (StoreError, OSError, ValueError) as error:
        _fail(str(error))
    log.info("store %s; relaying upstream %r", opened.display_url, spec.name)
    # Without a key ring the 2026-07-28 rounds are sealed with a key of this process: a round outlives it only
    # with MCP_ELICIT_STATE_KEYS set.
    state = RequestState(keys=list(ring), single_process=False) if ring else RequestState(single_process=True)
    # Over HTTP it listens on loopback only and signs no one in: every caller is the one loopback principal.
    identity = IdentityPolicy(allow_unauthenticated_loopback=transport is Transport.HTTP)
    relay = Gateway(spec, store=opened, request_state=state, identity=identity)
    try:
        anyio.run(_serve, relay, transport, host, port)
    except UpstreamUnavailable as error:
        _fail(f"{error}")
    finally:
        opened.close()


async def _serve(relay: Gateway, transport: Transport, host: str, port: int) -> None:
    async with relay.running():
        if transport is Transport.STDIO:
            # It ends with its input, and the upstream with it. SIGTERM ends it at once, as it does `serve`: a
            # stdio upstream then reads the end of its input, and the SDK's servers (and most) stop there.
            async with stdio_server() as (read, write):
                await relay.server.run(read, write, relay.server.create_initialization_options())
        else:
            app = relay.server.streamable_http_app(host=host)
            config = uvicorn.Config(app, host=host, port=port, log_level="warning", log_config=None)
            log.info("serving MCP on %s/mcp", http_address(host, port))
            await uvicorn.Server(config).serve()


def _fail(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)
