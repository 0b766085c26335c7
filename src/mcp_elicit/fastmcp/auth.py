"""The local authorization server as a FastMCP `auth=` provider, so sign-in and decision pages share one origin.

`LocalOAuth` serves what `LocalAuthorizationServer.mcp_server_kwargs` gives an `MCPServer`: OAuth metadata,
dynamic client registration, `/authorize` (which sends the browser to `/signin`), `/token` and `/revoke`, and
bearer-token verification for `/mcp`. Every decision is the wrapped server's: codes, tokens and sessions are
its signed JWTs, its clients live in the store, so a FastMCP instance and an `MCPServer` instance with the
same keys and store serve each other's users.

Guarantees: those of `LocalAuthorizationServer` (see `mcp_elicit.web.authserver`); the principal a tool call
is bound to is the token's issuer and subject, as the page's principal check expects; the OAuth metadata
lists only the grants served (FastMCP's would also name `refresh_token`, which this server refuses); the
issuer is one string everywhere a client compares it (RFC 8414 §3.3 and RFC 9207 compare issuers as strings,
not as URLs): the protected-resource metadata's `authorization_servers`, the authorization-server metadata's
`issuer`, the `iss` of the authorization response and of the tokens, whether the server was configured with
a trailing slash or without.
"""

from __future__ import annotations

from typing import Any

from fastmcp.server.auth import OAuthProvider
from fastmcp.server.auth.auth import AccessToken as FastMCPAccessToken
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.provider import AccessToken, AuthorizationCode, AuthorizationParams, RefreshToken
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.routing import Route

from mcp_elicit.web.authserver import METADATA_PATH, SERVED_GRANT_TYPES, LocalAuthorizationServer

__all__ = ["LocalOAuth"]


class LocalOAuth(OAuthProvider):
    """FastMCP's OAuth provider interface over one `LocalAuthorizationServer`, whose issuer is the base URL."""

    def __init__(self, server: LocalAuthorizationServer) -> None:
        settings = server.auth_settings(f"{server.issuer}/mcp")  # the same registration, scopes and revocation
        # The issuer as a URL that renders as the tokens' `iss`: given the string, FastMCP's AnyHttpUrl would
        # add a trailing slash to the path-less origin and list `http://host/` in the protected-resource
        # metadata, which the SDK's client then refuses as another issuer than the metadata's `http://host`.
        super().__init__(
            base_url=settings.issuer_url,
            issuer_url=settings.issuer_url,
            client_registration_options=settings.client_registration_options,
            revocation_options=settings.revocation_options,
            required_scopes=settings.required_scopes,
        )
        self.server = server

    def get_routes(self, mcp_path: str | None = None) -> list[Route]:
        """FastMCP's OAuth routes, the authorization-server metadata as an `MCPServer` with this server serves
        it: listing only the grants served (not `refresh_token`)."""
        routes = super().get_routes(mcp_path)
        settings = self.server.auth_settings(f"{self.server.issuer}{mcp_path or '/mcp'}")
        metadata = build_metadata(
            settings.issuer_url,
            settings.service_documentation_url,
            settings.client_registration_options or ClientRegistrationOptions(),
            settings.revocation_options or RevocationOptions(),
        ).model_copy(update={"grant_types_supported": list(SERVED_GRANT_TYPES)})
        endpoint = cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"])
        for index, route in enumerate(routes):
            if isinstance(route, Route) and route.path == METADATA_PATH:
                routes[index] = Route(METADATA_PATH, endpoint=endpoint, methods=["GET", "OPTIONS"], name=route.name)
        return routes

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return await self.server.get_client(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        await self.server.register_client(client_info)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        return await self.server.authorize(client, params)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return await self.server.load_authorization_code(client, authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        return await self.server.exchange_authorization_code(client, authorization_code)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        return await self.server.load_refresh_token(client, refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        return await self.server.exchange_refresh_token(client, refresh_token, scopes)

    async def load_access_token(self, token: str) -> FastMCPAccessToken | None:
        found = await self.server.load_access_token(token)
        return None if found is None else _fastmcp_token(found)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        await self.server.revoke_token(token)


def _fastmcp_token(token: AccessToken) -> FastMCPAccessToken:
    """FastMCP's token type carries the claims, which hold the issuer the principal is named by."""
    fields: dict[str, Any] = token.model_dump()
    fields["claims"] = fields.get("claims") or {}
    return FastMCPAccessToken(**fields)
