"""`mcp-elicit serve`: the reference server over stdio or streamable HTTP."""

from __future__ import annotations

import base64
import binascii
import logging
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
import uvicorn
from rich.console import Console
from rich.markup import escape

from mcp_elicit.logging import LOG_FORMAT_ENV, LogFormat
from mcp_elicit.logging import configure as configure_logging
from mcp_elicit.reference import Workspace, build_reference_server
from mcp_elicit.reference.deployment import ConfigurationError, build_http_deployment, http_settings
from mcp_elicit.server import Elicitation, IdentityPolicy, Notifications, RequestState
from mcp_elicit.store import ENV_VAR, StoreError, default_store_path
from mcp_elicit.web import Health

KEYS_ENV = "MCP_ELICIT_STATE_KEYS"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
err = Console(stderr=True)
log = logging.getLogger(__name__)


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"


def parse_keys(text: str) -> list[bytes]:
    """A key ring: comma-separated base64 keys of at least 32 bytes, the sealing key first."""
    keys = []
    for index, part in enumerate(p.strip() for p in text.split(",")):
        try:
            key = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        except (binascii.Error, ValueError):
            raise typer.BadParameter(f"key {index + 1} of {KEYS_ENV} is not base64") from None
        if len(key) < 32:
            raise typer.BadParameter(f"key {index + 1} of {KEYS_ENV} has {len(key)} bytes; at least 32 are needed")
        keys.append(key)
    return keys


def public_url_of(public_url: str | None, host: str, port: int) -> str:
    """The public URL given, or the address serve listens on."""
    if public_url:
        return public_url
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    transport: Annotated[Transport, typer.Option(help="stdio for a local client, http for streamable HTTP.")] = (
        Transport.STDIO
    ),
    host: Annotated[str, typer.Option(help="HTTP: the address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="HTTP: the port to listen on.")] = 8000,
    store: Annotated[
        str | None, typer.Option("--store", envvar=ENV_VAR, help="Store URL; default: the embedded SQLite file.")
    ] = None,
    workspace: Annotated[
        Path | None, typer.Option(help="Directory the tools act on; seeded with sample data when new.")
    ] = None,
    single_process: Annotated[
        bool, typer.Option(help="Seal requestState with a key that dies with this process (one instance only).")
    ] = False,
    dev_loopback: Annotated[
        bool, typer.Option(help="HTTP on loopback without authorization, every caller one development user.")
    ] = False,
    public_url: Annotated[
        str | None, typer.Option(help="HTTP: the URL clients and browsers reach this server at (default: host:port).")
    ] = None,
    log_format: Annotated[
        LogFormat,
        typer.Option(envvar=LOG_FORMAT_ENV, help="Log lines on stderr: text, or json (one object per line, with ids)."),
    ] = LogFormat.TEXT,
) -> None:
    """Run the reference server: deploy, procure, delete_files and create_ticket, all asking before acting.

    Over HTTP it also serves its own authorization server (sign-in for MCP clients and browsers), the
    URL-mode pages, and the connect_account / set_api_key tools whose credentials stay in the vault.
    """
    configure_logging(log_format)
    root = workspace or default_store_path().parent / "workspace"
    public = public_url_of(public_url, host, port)
    deployment = None
    try:
        # Every setting is checked before anything is created, and every problem is said at once.
        settings = http_settings(os.environ, public) if transport is Transport.HTTP and not dev_loopback else None
    except ConfigurationError as error:
        count = f"{len(error.problems)} setting{'s' if len(error.problems) > 1 else ''}"
        _fail(
            f"mcp-elicit serve --transport http cannot start; fix {count} in its environment:",
            *error.problems,
            log_format=log_format,
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
        if settings is not None:
            deployment = build_http_deployment(store=store, workspace=root, settings=settings)
            elicitation, server = deployment.elicitation, deployment.server
        else:
            if transport is Transport.HTTP and host not in LOOPBACK:
                _fail(f"--dev-loopback only listens on loopback, not on {host}", log_format=log_format)
            keys_text = os.environ.get(KEYS_ENV)
            keys = parse_keys(keys_text) if keys_text else None
            if transport is Transport.HTTP and keys is None and not single_process:
                _fail(
                    f"set {KEYS_ENV} (the key ring all instances share) or pass --single-process", log_format=log_format
                )
            elicitation = Elicitation(
                store,
                request_state=RequestState(keys=keys, single_process=keys is None),
                identity=IdentityPolicy(allow_unauthenticated_loopback=dev_loopback),
                notifications=Notifications.from_env(os.environ),
            )
            server = build_reference_server(elicitation, Workspace.open(root))
            if transport is Transport.HTTP:
                Health(elicitation).add_routes(server)
    except (StoreError, OSError, ValueError) as error:
        _fail(str(error), log_format=log_format)
    _tell(f"store {elicitation.store.display_url}, workspace {root}", log_format, style="dim")
    try:
        if transport is Transport.STDIO:
            server.run("stdio")
        else:
            app = deployment.http_app(host) if deployment is not None else server.streamable_http_app(host=host)
            _tell(f"serving MCP on {public}/mcp", log_format)
            uvicorn.run(app, host=host, port=port, log_level="warning", log_config=None)
    finally:
        elicitation.close()


def _tell(message: str, log_format: LogFormat, *, style: str = "") -> None:
    """A line about the server itself: on the terminal as text, or as a log record among the JSON lines."""
    if log_format is LogFormat.JSON:
        log.info("%s", message)
    else:
        err.print(escape(message), style=style or None)


def _fail(message: str, *items: str, log_format: LogFormat) -> NoReturn:
    """Say why the server cannot run, with one line per item (each a problem to fix), and exit 2."""
    if log_format is LogFormat.JSON:
        log.error("%s", " ".join([message, *(f"- {item}" for item in items)]))
        raise typer.Exit(2)
    err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    for item in items:
        err.print(f"  - {escape(item)}", soft_wrap=True)
    raise typer.Exit(2)
