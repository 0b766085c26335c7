"""The gateway signing its clients in: `mcp-elicit gateway --transport streamable-http --public-url https://...`.

The same sign-in as `mcp-elicit serve --transport http`, from the same environment (`mcp_elicit.web.deployment`):
the local authorization server (MCP OAuth for clients, browser sign-in), the decision pages, the inbox and the
health routes, served beside the gateway's `/mcp`. What it adds to a plain gateway:

- Every request to `/mcp` carries an access token the authorization server issued (else HTTP 401, naming the
  protected-resource metadata), and runs for the principal the token names (`IdentityPolicy`).
- The upstream's questions become decisions bound to that principal (and its OAuth client): a round issued to
  one is refused to another, and only that principal answers it on the decision page.
- A client that cannot be asked gets the question's web page (`Fallback.WEB`), where its signed-in person
  answers; operators (`MCP_ELICIT_OPERATORS`) see and answer every pending decision in the inbox.
- A lane (an upstream session) carries the calls of one principal at a time, and a handshake session carries
  one principal's for its whole life (`mcp_elicit.gateway.upstream`).
- An upstream with a credential (`[upstream.credential]`) is connected by each person on the decision pages
  (`ApiKeyEntry`, `OAuthConnect`), their secret kept in the vault (`MCP_ELICIT_VAULT_KEYS`) and sent with their
  sessions only (`mcp_elicit.gateway.connecting`).

With an external identity provider (`MCP_ELICIT_IDP_ISSUER`, `mcp_elicit.web.deployment.external_sign_in`) in
place of the local authorization server, which is then not served: `/mcp` verifies the provider's JWT access
tokens (`JwksTokenVerifier`; its protected-resource metadata names the provider), and the pages sign people in
with it (`OidcSignIn`), so a decision is bound to `issuer#sub` on both sides.

Does not: give an upstream without a credential anything of the person. Their calls reach it as the gateway
(its command's environment, its URL), though each person's calls still reach sessions of their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from starlette.applications import Starlette
from starlette.routing import Route

from mcp_elicit.gateway.credentials import connect_key
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.gateway.relay import GATEWAY_NAME, Gateway
from mcp_elicit.gateway.upstream import Upstream
from mcp_elicit.server.fallback import Fallback
from mcp_elicit.server.flow import DEFAULT_FORM_TTL
from mcp_elicit.store import Store
from mcp_elicit.web.authserver import LocalAuthorizationServer
from mcp_elicit.web.deployment import SignInSettings, external_sign_in, sign_in_elicitation, sign_in_routes
from mcp_elicit.web.flows import ExternalFlow
from mcp_elicit.web.jwks import JwksTokenVerifier
from mcp_elicit.web.oidc import OidcSignIn
from mcp_elicit.web.vault import Vault, VaultKeyRing

__all__ = ["GatewayDeployment", "build_gateway_deployment"]


@dataclass(frozen=True, slots=True)
class GatewayDeployment:
    gateway: Gateway
    auth: LocalAuthorizationServer | JwksTokenVerifier
    """What checks the bearer tokens: the local authorization server, or an external identity provider's keys."""
    routes: Sequence[Route]
    """Served beside `/mcp` without bearer authorization: sign-in, decision pages, inbox, health."""
    public_url: str

    def http_app(self, host: str) -> Starlette:
        """The app to serve: `/mcp` behind the bearer check, the protected-resource metadata, the routes, and the
        local authorization server (its metadata listing only what it serves) unless an external one is used."""
        if isinstance(self.auth, JwksTokenVerifier):
            return self.gateway.server.streamable_http_app(
                auth=self.auth.auth_settings(),
                token_verifier=self.auth,
                custom_starlette_routes=list(self.routes),
                host=host,
            )
        return self.auth.http_app(
            self.gateway.server,
            resource_server_url=f"{self.public_url}/mcp",
            custom_starlette_routes=list(self.routes),
            host=host,
        )


def build_gateway_deployment(
    upstreams: Upstream | Sequence[Upstream],
    *,
    store: Store,
    settings: SignInSettings,
    question_ttl: timedelta = DEFAULT_FORM_TTL,
    gates: Sequence[GateTable] = (),
    vault_keys: VaultKeyRing | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayDeployment:
    """The signed-in gateway of `upstreams`, keeping its decisions in `store`; nothing is connected or served yet.

    An upstream with a credential needs `vault_keys` (`MCP_ELICIT_VAULT_KEYS`), and an OAuth one its client secret
    in `environ` (default: this process's environment) under the variable its `client_secret_env` names;
    `ValueError` naming the upstream's key path (`upstream[1].credential...`, counted as `upstreams` are) else.
    With `settings.identity_provider`, its discovery document is read here (`SettingsError` naming
    `MCP_ELICIT_IDP_ISSUER` when it cannot be used).
    """
    given = (upstreams,) if isinstance(upstreams, Upstream) else tuple(upstreams)
    environ = os.environ if environ is None else environ
    flows: dict[str, ExternalFlow] = {}
    for index, upstream in enumerate(given):
        if upstream.credential is None:
            continue
        if vault_keys is None:
            raise ValueError(
                f"upstream[{index}].credential: each person's credential is kept in the vault: set "
                "MCP_ELICIT_VAULT_KEYS (see the configuration guide)"
            )
        try:
            flows[connect_key(upstream.name)] = upstream.credential.flow(upstream.name, environ)
        except ValueError as error:
            raise ValueError(f"upstream[{index}].credential.{error}") from None
    vault = Vault(store, vault_keys) if flows and vault_keys is not None else None
    elicitation = sign_in_elicitation(store, settings)
    checks: LocalAuthorizationServer | JwksTokenVerifier
    sign_in: LocalAuthorizationServer | OidcSignIn
    if settings.identity_provider is not None:
        external = external_sign_in(settings)
        checks, sign_in = external.verifier, external.sign_in
    else:
        assert settings.users is not None  # the settings name users, or an identity provider
        checks = sign_in = LocalAuthorizationServer(
            settings.public_url, settings.users, store, signing_keys=settings.auth_keys, server_name=GATEWAY_NAME
        )
    gateway = Gateway(
        given, elicitation=elicitation, fallback=Fallback.WEB, question_ttl=question_ttl, gates=gates, vault=vault
    )
    routes = sign_in_routes(settings, elicitation, sign_in, server_title=GATEWAY_NAME, vault=vault, flows=flows)
    return GatewayDeployment(gateway=gateway, auth=checks, routes=routes, public_url=settings.public_url)
