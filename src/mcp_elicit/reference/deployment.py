"""The reference HTTP deployment: MCP endpoint, local authorization server, URL-mode pages and vault, one app.

Configuration comes from the environment, each secret in its own variable so that it can be rotated on its
own: `MCP_ELICIT_USERS` (who can sign in), `MCP_ELICIT_AUTH_KEYS` (signs MCP tokens and browser sessions),
`MCP_ELICIT_STATE_KEYS` (seals requestState), `MCP_ELICIT_VAULT_KEYS` (encrypts third-party credentials),
and for the third party `MCP_ELICIT_PROVIDER_URL`, `MCP_ELICIT_PROVIDER_CLIENT_ID`,
`MCP_ELICIT_PROVIDER_CLIENT_SECRET`. Several instances given the same values and the same PostgreSQL store
serve each other's calls, tokens and callbacks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import Response

from mcp_elicit.reference.app import API_KEY_VAULT as API_KEY_VAULT_NAME
from mcp_elicit.reference.app import TOKEN_VAULT as TOKEN_VAULT_NAME
from mcp_elicit.reference.app import build_reference_server
from mcp_elicit.reference.workspace import Workspace
from mcp_elicit.server import Elicitation, IdentityPolicy
from mcp_elicit.web import (
    ApiKeyEntry,
    LocalAuthorizationServer,
    LocalUsers,
    OAuthConnect,
    UrlPages,
    Vault,
    VaultKeyRing,
)


class ConfigurationError(ValueError):
    """A setting the deployment cannot run with; the message names the variable."""


@dataclass(frozen=True, slots=True)
class Deployment:
    server: MCPServer
    elicitation: Elicitation
    public_url: str


def keys_from(environ: Mapping[str, str], name: str) -> list[bytes]:
    text = environ.get(name, "").strip()
    if not text:
        raise ConfigurationError(f"set {name}: comma-separated base64 keys of at least 32 bytes, the newest first")
    keys = []
    for index, part in enumerate(p.strip() for p in text.split(",")):
        try:
            key = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"key {index + 1} of {name} is not base64") from None
        if len(key) < 32:
            raise ConfigurationError(f"key {index + 1} of {name} has {len(key)} bytes; at least 32 are needed")
        keys.append(key)
    return keys


def build_http_deployment(
    *,
    store: str | None,
    workspace: Path,
    public_url: str,
    environ: Mapping[str, str],
) -> Deployment:
    """Everything `mcp-elicit serve --transport http` runs, checked before anything listens."""
    public_url = public_url.rstrip("/")
    try:
        users = LocalUsers.from_text(environ.get("MCP_ELICIT_USERS", ""))
        ring = VaultKeyRing.from_env(environ)
    except ValueError as error:
        raise ConfigurationError(str(error)) from None
    auth_keys = keys_from(environ, "MCP_ELICIT_AUTH_KEYS")
    elicitation = Elicitation(
        store,
        keys=keys_from(environ, "MCP_ELICIT_STATE_KEYS"),
        public_base_url=public_url,
        identity=IdentityPolicy(),
    )
    auth = LocalAuthorizationServer(public_url, users, elicitation.store, signing_keys=auth_keys)
    vault = Vault(elicitation.store, ring)
    provider = environ.get("MCP_ELICIT_PROVIDER_URL", "").rstrip("/")
    flows: dict[str, OAuthConnect | ApiKeyEntry] = {
        "set_api_key": ApiKeyEntry(vault_name=API_KEY_VAULT_NAME, service_title="Example")
    }
    if provider:
        flows["connect_account"] = OAuthConnect(
            vault_name=TOKEN_VAULT_NAME,
            provider_title="Example",
            authorize_url=f"{provider}/authorize",
            token_url=f"{provider}/token",
            client_id=environ.get("MCP_ELICIT_PROVIDER_CLIENT_ID", ""),
            client_secret=environ.get("MCP_ELICIT_PROVIDER_CLIENT_SECRET", ""),
            scope="profile",
        )
    server = build_reference_server(
        elicitation,
        Workspace.open(workspace),
        vault=vault,
        provider_api=provider or None,
        server_kwargs=auth.mcp_server_kwargs(f"{public_url}/mcp"),
    )
    auth.add_routes(server)
    page_key = hmac.new(auth_keys[0], b"mcp-elicit url pages", hashlib.sha256).digest()
    pages = UrlPages(
        elicitation=elicitation,
        sign_in=auth,
        vault=vault,
        flows=flows,
        page_key=page_key,
        server_title="mcp-elicit reference server",
        public_base_url=public_url,
    )
    for route in pages.routes():
        server.custom_route(route.path, methods=sorted(route.methods or ()), name=route.name)(_endpoint(route.endpoint))
    return Deployment(server=server, elicitation=elicitation, public_url=public_url)


def _endpoint(endpoint: object) -> object:
    async def call(request: Request) -> Response:
        response: Response = await endpoint(request)  # type: ignore[operator]
        return response

    return call
