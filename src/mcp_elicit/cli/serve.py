"""`mcp-elicit serve`: the reference server over stdio or streamable HTTP."""

from __future__ import annotations

import logging
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
import uvicorn
from rich.console import Console
from rich.markup import escape

from mcp_elicit.cli._listening import LOOPBACK, LogFormatOption, http_address
from mcp_elicit.logging import LogFormat
from mcp_elicit.logging import configure as configure_logging
from mcp_elicit.reference import Workspace, build_reference_server
from mcp_elicit.reference.deployment import HttpSettings, build_http_deployment, http_settings
from mcp_elicit.server import Elicitation, IdentityPolicy, Notifications, RequestState
from mcp_elicit.settings import Settings, SettingsError, variable
from mcp_elicit.store import ENV_VAR, StoreError, default_store_path
from mcp_elicit.web import Health

err = Console(stderr=True)
log = logging.getLogger(__name__)


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"


def public_url_of(public_url: str | None, host: str, port: int) -> str:
    """The public URL given, or the address serve listens on."""
    if public_url:
        return public_url
    return http_address(host, port)


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
    log_format: LogFormatOption = LogFormat.TEXT,
) -> None:
    """Run the reference server: deploy, procure, delete_files and create_ticket, all asking before acting.

    Over HTTP it also serves its own authorization server (sign-in for MCP clients and browsers), the
    URL-mode pages, and the connect_account / set_api_key tools whose credentials stay in the vault.
    """
    configure_logging(log_format)
    root = workspace or default_store_path().parent / "workspace"
    public = public_url_of(public_url, host, port)
    deployment = None
    settings: HttpSettings | None = None
    try:
        # Every setting is checked before anything is created, and every problem is said at once.
        if transport is Transport.HTTP and not dev_loopback:
            settings = http_settings(os.environ, public)
        else:
            keys, notifications = _local_settings()
    except SettingsError as error:
        count = f"{len(error.problems)} setting{'s' if len(error.problems) > 1 else ''}"
        _fail(
            f"mcp-elicit serve{' --transport http' if transport is Transport.HTTP else ''} cannot start; "
            f"fix {count} in its environment:",
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
            if transport is Transport.HTTP and keys is None and not single_process:
                _fail(
                    f"set {variable('state_keys')} (the key ring all instances share) or pass --single-process",
                    log_format=log_format,
                )
            elicitation = Elicitation(
                store,
                request_state=RequestState(keys=keys, single_process=keys is None),
                identity=IdentityPolicy(allow_unauthenticated_loopback=dev_loopback),
                notifications=notifications,
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


def _local_settings() -> tuple[list[bytes] | None, Notifications | None]:
    """What serve reads besides its options over stdio or --dev-loopback: the state key ring (unless one process
    seals with a key of its own) and the webhook; all their problems at once."""
    problems: list[str] = []
    keys = notifications = None
    try:
        ring = Settings.read(only=["state_keys"]).state_keys
        keys = None if ring is None else list(ring)
    except SettingsError as error:
        problems.extend(error.problems)
    try:
        notifications = Notifications.from_env()
    except SettingsError as error:
        problems.extend(error.problems)
    except ValueError as error:
        problems.append(str(error))
    if problems:
        raise SettingsError(problems)
    return keys, notifications


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
