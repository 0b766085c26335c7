"""`mcp-elicit gateway --upstream COMMAND|URL [--config gateway.toml]`: MCP servers of any kind, relayed to any
client.

Over stdio by default, so that a host launches the gateway where it launched the server. `--upstream` names one
upstream, relayed as it is; the `[[upstream]]` tables of the config file name one or more, each under its
prefix. Everything that can be checked is checked before anything starts (a config error exits 2 naming the
key), and every upstream is started (or reached) before the gateway answers anyone: one it cannot start or
reach is said at once, exit 2. A stdio upstream is started like a command typed at the shell, with this
environment, and its stderr is this command's.

Over streamable HTTP it signs its clients in as `mcp-elicit serve --transport http` does, from the same
environment (`mcp_elicit.gateway.deployment`), or with the external identity provider of `MCP_ELICIT_IDP_ISSUER`,
every missing or wrong setting named before anything starts; or,
with `--dev-loopback`, it listens on loopback only and every caller is one development principal.
"""

from __future__ import annotations

import logging
import os
import signal
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import anyio
import typer
import uvicorn
from rich.console import Console
from rich.markup import escape
from typer._click.core import ParameterSource  # the click typer builds on (its own copy)

from mcp_elicit.cli._listening import LOOPBACK, LogFormatOption, http_address
from mcp_elicit.gateway import DEFAULT_TIMEOUT, Gateway, Upstream, UpstreamUnavailable
from mcp_elicit.gateway.config import CONFIG_ENV, ConfigError, GateTable, read_config
from mcp_elicit.gateway.deployment import GatewayDeployment, build_gateway_deployment
from mcp_elicit.logging import LogFormat
from mcp_elicit.logging import configure as configure_logging
from mcp_elicit.server import IdentityPolicy, RequestState
from mcp_elicit.server.stdio import stdio_streams
from mcp_elicit.settings import Settings, SettingsError
from mcp_elicit.store import ENV_VAR, StoreError, open_store
from mcp_elicit.web.deployment import Problems, SignInSettings, read_sign_in
from mcp_elicit.web.vault import VaultKeyRing

err = Console(stderr=True)
log = logging.getLogger(__name__)


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "streamable-http"


class Era(StrEnum):
    AUTO = "auto"
    LEGACY = "legacy"
    V2026_07_28 = "2026-07-28"


_UPSTREAM_OPTIONS = ("era", "timeout", "sessions", "name")
"""The options that describe `--upstream`; an `[[upstream]]` table has keys of its own for them."""


def gateway(
    context: typer.Context,
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            help='The server to relay: a command line run over stdio ("npx -y some-server") or an http(s):// URL.',
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar=CONFIG_ENV,
            help="A gateway.toml, whose upstream tables name servers to relay, each under its prefix.",
            show_default=False,
        ),
    ] = None,
    transport: Annotated[
        Transport, typer.Option(help="How clients reach the gateway: stdio (launched by a host) or streamable-http.")
    ] = Transport.STDIO,
    host: Annotated[str, typer.Option(help="streamable-http: the address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="streamable-http: the port to listen on.")] = 8000,
    public_url: Annotated[
        str | None,
        typer.Option(
            help="streamable-http: the URL clients and browsers reach the gateway at (default: host:port).",
            show_default=False,
        ),
    ] = None,
    dev_loopback: Annotated[
        bool,
        typer.Option(help="streamable-http on loopback without sign-in, every caller one development principal."),
    ] = False,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar=ENV_VAR,
            help="Store URL (default: the embedded SQLite file): where the upstream's questions become decisions.",
        ),
    ] = None,
    era: Annotated[
        Era,
        typer.Option(
            help="How to talk to the upstream: auto (the handshake, else discovery), legacy, or 2026-07-28 (for an "
            "upstream that asks in its results)."
        ),
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
    """Relay MCP servers (any language, stdio or streamable HTTP) to MCP clients of either protocol era.

    Every request is relayed as it came; an upstream is restarted if it exits, a request it leaves unanswered
    for TIMEOUT seconds fails, and what it asks during a tool call becomes a durable decision, asked of the client
    the way its protocol era asks (rounds are sealed with MCP_ELICIT_STATE_KEYS when set).
    """
    configure_logging(log_format)
    signed_in = transport is Transport.HTTP and not dev_loopback
    if transport is Transport.HTTP and dev_loopback and host not in LOOPBACK:
        _fail(
            f"--dev-loopback signs no one in: it listens on loopback only ({', '.join(LOOPBACK)}), not on {host}; "
            "without it the gateway signs its clients in"
        )
    if transport is Transport.STDIO and (dev_loopback or public_url is not None):
        _fail(f"--{'dev-loopback' if dev_loopback else 'public-url'} is for --transport streamable-http")
    upstreams: tuple[Upstream, ...] = ()
    gates: list[GateTable] = []
    if config is not None:
        try:
            read = read_config(config)
        except ConfigError as error:
            _fail(str(error))
        upstreams, gates = read.upstreams, read.gate
    given = "--config" if context.get_parameter_source("config") is not ParameterSource.ENVIRONMENT else CONFIG_ENV
    if upstream is not None and upstreams:
        _fail(
            f"--upstream and the [[upstream]] tables of {config} ({given}) both name upstreams: give --upstream, "
            "or the tables"
        )
    if upstream is not None:
        try:
            upstreams = (
                Upstream.parse(upstream, name=name, era=era.value, timeout=timeout or None, sessions=sessions),
            )
        except ValueError as error:
            _fail(f"--upstream: {error}")
    elif not upstreams:
        whose = f"; {config} ({given}) has no [[upstream]] table" if config is not None else ""
        _fail(f"no upstream: give --upstream COMMAND|URL, or --config with [[upstream]] tables{whose}")
    else:
        for option in _UPSTREAM_OPTIONS:
            if context.get_parameter_source(option) not in (ParameterSource.DEFAULT, None):
                _fail(
                    f"--{option} describes --upstream; the [[upstream]] tables of {config} say it for each upstream "
                    f"(its key {option})"
                )
    credentialed = [index for index, each in enumerate(upstreams) if each.credential is not None]
    if credentialed and not signed_in:
        _fail(
            f"{config}: upstream[{credentialed[0]}].credential: each person connects it on the gateway's pages, which "
            "need its sign-in: serve the gateway with --transport streamable-http (without --dev-loopback)"
        )
    settings: SignInSettings | None = None
    vault_keys: VaultKeyRing | None = None
    try:
        if signed_in:
            problems = Problems()

            def vault() -> None:  # read after the key rings, as the configuration guide lists them
                nonlocal vault_keys
                if credentialed:
                    vault_keys = problems.read(lambda: VaultKeyRing.from_env(os.environ))

            settings = read_sign_in(
                os.environ, public_url or http_address(host, port), problems, then=vault, identity_provider=True
            )
            problems.check()
        else:
            ring = Settings.read(only=["state_keys"]).state_keys
    except SettingsError as error:
        if signed_in:
            count = f"{len(error.problems)} setting{'s' if len(error.problems) > 1 else ''}"
            _fail(
                "mcp-elicit gateway --transport streamable-http signs its clients in, and cannot start; fix "
                f"{count} in its environment (or pass --dev-loopback to serve loopback without sign-in):",
                *error.problems,
            )
        _fail("; ".join(error.problems))
    try:
        opened = open_store(store)
    except (StoreError, OSError, ValueError) as error:
        _fail(str(error))
    log.info("store %s; relaying %s", opened.display_url, _named(upstreams))
    deployment = None
    try:
        if settings is not None:
            deployment = build_gateway_deployment(
                upstreams, store=opened, settings=settings, gates=gates, vault_keys=vault_keys
            )
            relay = deployment.gateway
        else:
            # Without a key ring the 2026-07-28 rounds are sealed with a key of this process: a round outlives it
            # only with MCP_ELICIT_STATE_KEYS set.
            state = RequestState(keys=list(ring), single_process=False) if ring else RequestState(single_process=True)
            # --dev-loopback signs no one in: every caller is the one loopback principal.
            identity = IdentityPolicy(allow_unauthenticated_loopback=transport is Transport.HTTP)
            relay = Gateway(upstreams, store=opened, request_state=state, identity=identity, gates=gates)
    except SettingsError as error:  # the identity provider's discovery document
        opened.close()
        _fail("; ".join(error.problems))
    except ValueError as error:
        opened.close()
        _fail(f"{config}: {error}")
    try:
        anyio.run(_serve, relay, deployment, transport, host, port, public_url)
    except UpstreamUnavailable as error:
        _fail(f"{error}")
    finally:
        opened.close()


async def _serve(
    relay: Gateway,
    deployment: GatewayDeployment | None,
    transport: Transport,
    host: str,
    port: int,
    public_url: str | None,
) -> None:
    async with relay.running():
        if transport is Transport.STDIO:
            # It ends with its input, and the upstream with it. SIGTERM ends it at once, as it does `serve`: a
            # stdio upstream then reads the end of its input, and the SDK's servers (and most) stop there.
            async with stdio_streams() as (read, write):
                await relay.server.run(read, write, relay.server.create_initialization_options())
            # Once its input ended, it stops its stdio upstreams (the SDK closes their input, and ends the process
            # tree of one still running 2 s later), and SIGTERM does not cut that short: a host sends it 2 s after
            # closing the gateway's input (the TypeScript SDK's client does, and SIGKILL 2 s after that), and an
            # upstream that does not end with its input (server-everything, whose timers keep it alive) would
            # outlive a gateway that died then. A handler that does nothing, not SIG_IGN: an ignored signal stays
            # ignored across exec, so an upstream started meanwhile could not be ended with SIGTERM.
            signal.signal(signal.SIGTERM, _outlasted)
        else:
            app = deployment.http_app(host) if deployment is not None else relay.server.streamable_http_app(host=host)
            config = uvicorn.Config(app, host=host, port=port, log_level="warning", log_config=None)
            log.info("serving MCP on %s/mcp", public_url or http_address(host, port))
            await uvicorn.Server(config).serve()


def _outlasted(signum: int, frame: object) -> None:
    """SIGTERM once a stdio gateway's input ended: it goes on stopping its upstreams."""


def _named(upstreams: tuple[Upstream, ...]) -> str:
    if len(upstreams) == 1 and upstreams[0].prefix is None:
        return f"upstream {upstreams[0].name!r}"
    return "upstreams " + ", ".join(f"{each.name!r} (prefix {each.prefix})" for each in upstreams)


def _fail(message: str, *items: str) -> NoReturn:
    """Say why the gateway cannot run, with one line per item (each a problem to fix), and exit 2."""
    err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    for item in items:
        err.print(f"  - {escape(item)}", soft_wrap=True)
    raise typer.Exit(2)
