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
- A lane (an upstream session) carries the calls of one principal at a time (`mcp_elicit.gateway.upstream`).

Does not: hold upstream credentials per principal. Every principal's calls reach the upstream as the gateway
(its command's environment, its URL), and an upstream session is used by another principal once the first is
done with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from starlette.applications import Starlette
from starlette.routing import Route

from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.gateway.relay import GATEWAY_NAME, Gateway
from mcp_elicit.gateway.upstream import Upstream
from mcp_elicit.server.fallback import Fallback
from mcp_elicit.server.flow import DEFAULT_FORM_TTL
from mcp_elicit.store import Store
from mcp_elicit.web.authserver import LocalAuthorizationServer
from mcp_elicit.web.deployment import SignInSettings, sign_in_elicitation, sign_in_routes

__all__ = ["GatewayDeployment", "build_gateway_deployment"]


@dataclass(frozen=True, slots=True)
class GatewayDeployment:
    gateway: Gateway
    auth: LocalAuthorizationServer
    routes: Sequence[Route]
    """Served beside `/mcp` without bearer authorization: sign-in, decision pages, inbox, health."""
    public_url: str

    def http_app(self, host: str) -> Starlette:
        """The app to serve: `/mcp` behind the bearer check, the authorization server (its metadata listing only
        what it serves), the protected-resource metadata, and the routes."""
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
) -> GatewayDeployment:
    """The signed-in gateway of `upstreams`, keeping its decisions in `store`; nothing is connected or served yet."""
    elicitation = sign_in_elicitation(store, settings)
    auth = LocalAuthorizationServer(
        settings.public_url, settings.users, store, signing_keys=settings.auth_keys, server_name=GATEWAY_NAME
    )
    gateway = Gateway(upstreams, elicitation=elicitation, fallback=Fallback.WEB, question_ttl=question_ttl, gates=gates)
    routes = sign_in_routes(settings, elicitation, auth, server_title=GATEWAY_NAME)
    return GatewayDeployment(gateway=gateway, auth=auth, routes=routes, public_url=settings.public_url)
