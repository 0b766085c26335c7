"""`mount_web`: the URL-mode pages, the sign-in they rely on and the health routes, on your own server, in one call.

A URL decision (`flow.ask_url`) and a question answered on the web (`Fallback.WEB`) send the person to
`/elicit/{id}` on this server; those pages must know who sits at the browser, run the external flows and
keep what they obtain in the vault. `mount_web(server, elicitation, WebPages(...))` adds all of it to an
`MCPServer`, or to a FastMCP built with `FastMCPFlows`, as custom routes (served without bearer
authorization, since a browser carries no MCP token): the decision pages and the OAuth callback, the
decision inbox, the sign-in routes of a `SignIn` that serves its own (`LocalAuthorizationServer`:
`/signin`, `/signout`), `/healthz` and `/readyz`, and the audit's public keys when the `Elicitation` seals its
audit trail (`/.well-known/mcp-elicit/audit-keys`). The `mcp-elicit serve --transport http` deployment
is wired the same way.

Guarantees: everything is checked before a route is added (a public base URL to serve under, a vault for
any external flow, a page key of 32+ bytes, approver roles the sign-in can resolve), so a misconfiguration
fails at start-up, naming what is missing, instead of on a person's first click. The pages' own guarantees
are those of `mcp_elicit.web.pages`.

Does not guarantee: that `sign_in` knows the same people as the MCP tokens. The principal a page checks
is `sign_in.principal_of(request)`, and it must equal the MCP principal (`f"{iss}#{sub}"`): the local
authorization server does so by construction, and `OidcSignIn` signs browsers in with the external
provider whose tokens `JwksTokenVerifier` checks and names them the same way.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from mcp.server.mcpserver import MCPServer
from starlette.routing import Route

from mcp_elicit.server.notifications.links import DecisionLinks
from mcp_elicit.server.runtime import Elicitation
from mcp_elicit.web.audit_keys import audit_keys_routes
from mcp_elicit.web.authserver import LocalAuthorizationServer
from mcp_elicit.web.flows import ApiKeyEntry, ExternalFlow, OAuthConnect
from mcp_elicit.web.health import Health
from mcp_elicit.web.inbox import INBOX_PATH, DecisionInbox, InboxSettings
from mcp_elicit.web.pages import SignIn, UrlPages
from mcp_elicit.web.roles import ApproverRoles, ClaimsRoles, NamesUsers
from mcp_elicit.web.routes import RouteHost, add_routes
from mcp_elicit.web.vault import Vault

__all__ = ["ServedSignIn", "WebPages", "mount_web"]

MIN_PAGE_KEY_BYTES = 32
_PAGE_KEY_LABEL = b"mcp-elicit/web/pages/v1"
log = logging.getLogger(__name__)


@runtime_checkable
class ServedSignIn(SignIn, Protocol):
    """A `SignIn` that serves its own pages (a sign-in form, an identity provider's callback)."""

    def routes(self) -> list[Route]: ...


@dataclass(frozen=True, slots=True)
class WebPages:
    """What the pages need besides the server: who the browser user is, the flows and where their results go.

    `page_key` (at least 32 random bytes, the same on every instance) is the key the pages derive theirs
    from: it seals the OAuth `state` of the flows and the references of external completions, signs the
    pages' forms, and checks the signed links that notifications carry (give
    `Notifications(links=DecisionLinks(public_base_url, page_key))` the same key). `flows` maps a question
    key (`flow.ask_url(..., key=...)`) to its external flow; `vault` keeps what the OAuth and API-key flows
    obtain and is needed as soon as there is one of them (an `ExternalCompletion` stores nothing secret: its
    provider's webhooks arrive at `/elicit/hooks/{key}`). `title` is how the pages name the server (its MCP
    name by default).
    """

    sign_in: SignIn
    page_key: bytes = field(repr=False)
    vault: Vault | None = None
    flows: Mapping[str, ExternalFlow] = field(default_factory=dict)
    title: str | None = None
    health: bool = True
    inbox: InboxSettings | None = field(default_factory=InboxSettings)
    """The decision inbox at `/inbox` (its operators, its page size); None serves none."""
    approvers: ApproverRoles | None = None
    """Who holds the roles of decisions that approvers answer (`ApproverRule`): configured members, and with
    `claim`, the roles an `OidcSignIn` keeps from that claim of the ID token. None: nobody holds any role."""


def mount_web(server: RouteHost, elicitation: Elicitation, pages: WebPages) -> UrlPages:
    """Serve the decision pages, the inbox, `pages.sign_in`'s own routes and (unless `health=False`) the health
    routes on `server`: the `MCPServer` of `elicitation.server(...)`, or the FastMCP of `FastMCPFlows.server(...)`."""
    base_url = elicitation.public_base_url
    if base_url is None:
        raise ValueError(
            "the decision pages are served under the address browsers reach this server at: "
            "create the Elicitation with public_base_url=..."
        )
    for key, flow in pages.flows.items():
        if not isinstance(flow, ExternalFlow):
            raise TypeError(
                f"flows[{key!r}] is {type(flow).__name__}, not an ExternalFlow "
                "(OAuthConnect, ApiKeyEntry, ExternalCompletion)"
            )
    if len(pages.page_key) < MIN_PAGE_KEY_BYTES:
        raise ValueError(f"page_key has {len(pages.page_key)} bytes; give at least {MIN_PAGE_KEY_BYTES} random bytes")
    vaulted = [key for key, flow in pages.flows.items() if isinstance(flow, OAuthConnect | ApiKeyEntry)]
    if vaulted and pages.vault is None:
        names = ", ".join(sorted(vaulted))
        raise ValueError(f"the flows {names} keep what they obtain in the vault: pass vault=Vault(store, key_ring)")
    roles = pages.approvers
    if roles is not None:
        _check_same_issuer(server, pages.sign_in)
        problems = roles.problems_with(pages.sign_in)
        if problems:
            raise ValueError("; ".join(problems))
        if roles.claim is not None and isinstance(pages.sign_in, ClaimsRoles):
            if pages.sign_in.roles_claim not in (None, roles.claim):
                raise ValueError(
                    f"the sign-in keeps the roles claim {pages.sign_in.roles_claim!r} and the approver roles read "
                    f"{roles.claim!r}; name one claim"
                )
            pages.sign_in.roles_claim = roles.claim
    url_pages = UrlPages(
        elicitation=elicitation,
        sign_in=pages.sign_in,
        vault=pages.vault,
        flows=pages.flows,
        page_key=hmac.new(pages.page_key, _PAGE_KEY_LABEL, hashlib.sha256).digest(),
        server_title=pages.title or server.name,
        public_base_url=base_url,
        links=DecisionLinks(base_url, pages.page_key),
        inbox=INBOX_PATH if pages.inbox is not None else None,
        approver_roles=roles,
    )
    routes = url_pages.routes()
    if pages.inbox is not None:
        routes += DecisionInbox(url_pages, pages.inbox).routes()
    if isinstance(pages.sign_in, ServedSignIn):
        routes = [*pages.sign_in.routes(), *routes]
    if isinstance(pages.sign_in, LocalAuthorizationServer) and pages.sign_in.sign_in_reason is None:
        pages.sign_in.sign_in_reason = url_pages.sign_in_reason
    if pages.health:
        routes += Health(elicitation).routes()
    if elicitation.audit is not None:
        routes += audit_keys_routes(elicitation.audit.keys.public())
    add_routes(server, routes)
    return url_pages


def _check_same_issuer(server: RouteHost, sign_in: SignIn) -> None:
    """Four-eyes compares the principal a call runs for with the one signed in on the pages: both must come from
    one issuer, or a requester who is also an approver would approve their own call under another id (it would
    fail open). So approvers are refused on an `MCPServer` whose calls are not authenticated, or authenticated by
    another issuer than the pages' sign-in; a host whose authentication cannot be read here (FastMCP) is trusted
    to use the same one, and the log says so."""
    auth = getattr(getattr(server, "settings", None), "auth", None) if isinstance(server, MCPServer) else None
    if not isinstance(server, MCPServer):
        log.warning(
            "approvers on %s: four-eyes holds only if its MCP calls are authenticated by the issuer the pages' "
            "sign-in uses",
            type(server).__name__,
        )
        return
    if auth is None:
        raise ValueError(
            "decisions with approvers need authenticated MCP calls: four-eyes tells the requester from an approver "
            "by their principal, so the server must verify tokens from the issuer the pages sign people in with "
            "(Elicitation.server(name, **auth.mcp_server_kwargs(...)))"
        )
    issuer = str(auth.issuer_url).rstrip("/")
    signed_in = sign_in.principal_id("-").rpartition("#")[0].rstrip("/") if isinstance(sign_in, NamesUsers) else None
    if signed_in is not None and signed_in != issuer:
        raise ValueError(
            f"the MCP calls are authenticated by {issuer} and the pages sign people in with {signed_in}: four-eyes "
            "compares principals of one issuer, so approvers need both to be the same"
        )
