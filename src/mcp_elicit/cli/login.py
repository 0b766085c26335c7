"""`mcp-elicit login URL`: sign in to an MCP server's authorization server in the browser, and keep the token.

It is the MCP authorization flow a desktop client runs, done once at the command line: the server's 401
leads to its protected-resource metadata, that to its authorization server's metadata; the client registers
itself dynamically when the server offers it (or uses `--client-id`), then authorization code with PKCE
(S256) through the person's browser, back to a one-off listener on loopback (RFC 8252). The SDK's
`OAuthClientProvider` runs the flow, with its checks (the resource named by the metadata, the issuer,
`state`, the RFC 9207 `iss` of the answer). The token, with its refresh token if the server issued one,
is kept per server with mode 0600 (`mcp_elicit.client.tokens`); `mcp-elicit call URL ...` then uses it
without `--token` and renews it when it is due.

The browser starts only where it would open a window (a graphical session, or `$BROWSER` set); otherwise,
and with `--no-browser`, the address is printed for the person to open, on this machine (the listener is
on its loopback). The listener answers only the one redirect that carries this sign-in's `state`, and
stops when the sign-in ends.

Exit codes: 0 signed in, 1 the sign-in failed or was refused, 2 it could not start (bad arguments, the
server unreachable or not asking for authorization).
"""

from __future__ import annotations

import logging
import socket
import time
import webbrowser
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.to_thread
import httpx2
import typer
import uvicorn
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.exceptions import OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from rich.console import Console
from rich.markup import escape as markup_escape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from mcp_elicit.cli._browser import graphical_session
from mcp_elicit.cli._failures import CALL_FAILED, USAGE, CommandFailed
from mcp_elicit.cli._logs import one_line_warnings
from mcp_elicit.client.tokens import LoginStore, SavedLogin, canonical_server
from mcp_elicit.web.html import page, text

LOOPBACK = "127.0.0.1"
CALLBACK_PATH = "/callback"
CLIENT_NAME = "mcp-elicit (command line)"
DEFAULT_WAIT = 300.0
INITIALIZE_PROBE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "mcp-elicit", "version": "0"},
    },
}
"""The `initialize` request `login` POSTs to learn whether the server asks for a sign-in (any MCP client's)."""

err = Console(stderr=True, highlight=False)


def login(
    url: Annotated[str, typer.Argument(help="The MCP server's http(s) endpoint, e.g. https://elicit.example/mcp.")],
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the sign-in address instead of starting a browser.")
    ] = False,
    client_id: Annotated[
        str | None,
        typer.Option(
            help="A client id registered for this command at the authorization server (a public client with "
            "loopback redirects); without it the command registers itself, if the server offers that.",
            show_default=False,
        ),
    ] = None,
    callback_port: Annotated[
        int, typer.Option(help="The loopback port of the redirect (0: any free port).", min=0, max=65535)
    ] = 0,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the sign-in in the browser.", min=1)] = DEFAULT_WAIT,
) -> None:
    """Sign in to an MCP server in the browser and keep its token for `mcp-elicit call`."""
    one_line_warnings()
    logging.getLogger("mcp.client.auth").setLevel(logging.CRITICAL)  # its failures are reported below, once
    try:
        server = _checked_url(url)
        settings = _Settings(server, no_browser, client_id, callback_port, wait)
        saved, path = anyio.run(_login, settings)
    except CommandFailed as failed:
        _fail(failed)
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None
    until = (
        datetime.fromtimestamp(saved.expires_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        if saved.expires_at is not None
        else "the server says nothing of its expiry"
    )
    renewal = "renewed on its own when it is due" if saved.refresh_token else "no refresh token: sign in again then"
    typer.echo(f"Signed in to {saved.server} (authorization server {saved.issuer or 'unnamed'}).")
    typer.echo(f"The token is kept in {path} (mode 0600), valid until {until}; {renewal}.")
    typer.echo(f"mcp-elicit call {saved.server} TOOL ... uses it.")


@dataclass(frozen=True, slots=True)
class _Settings:
    server: str
    no_browser: bool
    client_id: str | None
    callback_port: int
    wait: float


def _checked_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CommandFailed(f"{url!r} is not an http(s) URL: login signs in to an MCP server over HTTP")
    if parts.username or parts.password or parts.query:
        raise CommandFailed(f"{url!r} carries credentials or a query; give the MCP endpoint alone")
    return canonical_server(url)


@dataclass
class SignInStorage:
    """The SDK flow's storage (`TokenStorage`) for one sign-in, in memory: it starts empty, so the flow runs
    in full (registration, unless `client_info` is set first, then authorization code with PKCE)."""

    client_info: OAuthClientInformationFull | None = None
    tokens: OAuthToken | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class _Callback:
    """The loopback listener's one job: the redirect that carries this sign-in's `state`."""

    server: str
    state: str | None = None
    answered: anyio.Event = field(default_factory=anyio.Event)
    result: AuthorizationCodeResult | None = None
    refusal: str | None = None

    async def endpoint(self, request: Request) -> HTMLResponse:
        params = request.query_params
        if self.state is None or params.get("state") != self.state or self.answered.is_set():
            return _page(
                self.server,
                "Not this sign-in",
                "This address answers one sign-in only; start again from the terminal.",
                400,
            )
        error = params.get("error")
        if error:
            described = params.get("error_description") or error
            self.refusal = f"{error}: {described}"[:300] if described != error else error[:300]
            self.answered.set()
            return _page(self.server, "Sign-in refused", f"The server refused the sign-in ({described[:300]}).", 400)
        code = params.get("code")
        if not code:
            return _page(
                self.server,
                "Sign-in incomplete",
                "The server sent no authorization code; start again from the terminal.",
                400,
            )
        self.result = AuthorizationCodeResult(code=code, state=params.get("state"), iss=params.get("iss"))
        self.answered.set()
        return _page(
            self.server,
            "Signed in",
            f"You are signed in to {self.server}. You can close this tab and go back to the terminal.",
        )

    async def outcome(self, wait: float) -> AuthorizationCodeResult:
        with anyio.move_on_after(wait):
            await self.answered.wait()
        if self.result is not None:
            return self.result
        if self.refusal is not None:
            raise CommandFailed(f"the authorization server refused the sign-in ({self.refusal})", CALL_FAILED)
        raise CommandFailed(f"nobody finished signing in within {wait:.0f} s; run the command again", CALL_FAILED)


async def _login(settings: _Settings) -> tuple[SavedLogin, Path]:
    listener = socket.socket()
    try:
        listener.bind((LOOPBACK, settings.callback_port))
    except OSError as error:
        listener.close()
        raise CommandFailed(
            f"cannot listen on {LOOPBACK}:{settings.callback_port} for the redirect: {error.strerror}"
        ) from None
    listener.listen()
    redirect = f"http://{LOOPBACK}:{listener.getsockname()[1]}{CALLBACK_PATH}"
    callback = _Callback(settings.server)
    web = uvicorn.Server(
        uvicorn.Config(Starlette(routes=[Route(CALLBACK_PATH, callback.endpoint)]), log_level="error", lifespan="off")
    )
    storage = SignInStorage()
    metadata = OAuthClientMetadata(
        redirect_uris=[redirect],  # type: ignore[list-item]
        client_name=CLIENT_NAME,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",  # noqa: S106 (a public client: PKCE, no secret)
    )
    if settings.client_id is not None:
        storage.client_info = OAuthClientInformationFull(
            client_id=settings.client_id,
            redirect_uris=[redirect],  # type: ignore[list-item]
            token_endpoint_auth_method="none",  # noqa: S106
            grant_types=["authorization_code", "refresh_token"],
        )

    async def redirect_handler(authorization_url: str) -> None:
        callback.state = parse_qs(urlsplit(authorization_url).query).get("state", [None])[0]
        await _show(authorization_url, settings.no_browser)

    async def callback_handler() -> AuthorizationCodeResult:
        return await callback.outcome(settings.wait)

    provider = OAuthClientProvider(settings.server, metadata, storage, redirect_handler, callback_handler)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(web.serve, [listener])
            try:
                status = await _probe(settings.server, provider)
            finally:
                web.should_exit = True
    except* CommandFailed as failed:
        raise failed.exceptions[0] from None
    finally:
        listener.close()
    tokens, context = storage.tokens, provider.context
    if tokens is None or context.oauth_metadata is None or context.client_info is None:
        raise CommandFailed(
            f"{settings.server} did not ask for authorization (it answered HTTP {status} without a token): "
            "it needs no sign-in, or it is not an MCP endpoint"
        )
    if status in (401, 403):
        raise CommandFailed(f"{settings.server} refused the new token (HTTP {status})", CALL_FAILED)
    include_resource = context.should_include_resource_param(context.protocol_version)
    client = context.client_info
    saved = SavedLogin(
        server=settings.server,
        issuer=str(context.oauth_metadata.issuer),
        token_endpoint=str(context.oauth_metadata.token_endpoint),
        client_id=client.client_id,
        client_secret=client.client_secret,
        token_endpoint_auth_method=client.token_endpoint_auth_method,
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_at=time.time() + tokens.expires_in if tokens.expires_in is not None else None,
        scope=tokens.scope,
        resource=context.get_resource_url() if include_resource else None,
    )
    return saved, LoginStore().save(saved)


async def _probe(server: str, provider: OAuthClientProvider) -> int:
    """An `initialize` POST through the SDK's OAuth flow: its 401 starts the sign-in; the status it ends with."""
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        async with httpx2.AsyncClient(auth=provider, timeout=30, follow_redirects=False) as http:
            response = await http.post(server, json=INITIALIZE_PROBE, headers=headers)
    except (OAuthFlowError, OAuthRegistrationError, OAuthTokenError) as error:
        raise CommandFailed(f"signing in to {server} failed: {error}", CALL_FAILED) from None
    except httpx2.HTTPError as error:
        raise CommandFailed(f"cannot reach {server} ({type(error).__name__}: {error})") from None
    return response.status_code


async def _show(url: str, no_browser: bool) -> None:
    if not no_browser and graphical_session():
        opened = await anyio.to_thread.run_sync(webbrowser.open, url, 2)
        if opened:
            err.print("Opened the sign-in page in your browser. If it did not open, open this address:")
            typer.echo(url)
            return
        err.print("No browser could be started from here.")
    err.print("Open this address in a browser on this machine to sign in:")
    typer.echo(url)


def _page(server: str, title: str, words: str, status: int = 200) -> HTMLResponse:
    """The sign-in's answer in the browser, in the page shell of the server's own pages."""
    tone = "ok" if status == 200 else "error"
    return page(title, f'<h1>{text(title)}</h1><p class="{tone}">{text(words)}</p>', server=server, status=status)


def _fail(failed: CommandFailed) -> NoReturn:
    err.print(f"[red]error:[/red] {markup_escape(failed.message)}", soft_wrap=True)
    raise typer.Exit(failed.code or USAGE)
