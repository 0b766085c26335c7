"""The server side of URL-mode flows: the decision pages, the encrypted vault for third-party tokens and API
keys, the local authorization server that issues MCP access tokens and signs browser users in (or the verifier of
an external identity provider's tokens), the health routes of a deployment, and `mount_web`, which serves them
all on your own server (the SDK's `MCPServer`, or a FastMCP of `mcp_elicit.fastmcp.FastMCPFlows`).

The names resolve on first use (`mcp_elicit._exports`): a module of this package (the page shell, say)
imports without the rest of it.
"""

from typing import TYPE_CHECKING

from mcp_elicit._exports import lazy_exports

# Each public name and the module that defines it.
_HOMES: dict[str, str] = {
    "LocalAuthorizationServer": "mcp_elicit.web.authserver",
    "LocalUsers": "mcp_elicit.web.authserver",
    "LocalUsersError": "mcp_elicit.web.authserver",
    "ApiKeyEntry": "mcp_elicit.web.flows",
    "ApproverRoles": "mcp_elicit.web.roles",
    "Charge": "mcp_elicit.web.flows",
    "Checkout": "mcp_elicit.web.flows",
    "EventOutcome": "mcp_elicit.web.flows",
    "ExternalCompletion": "mcp_elicit.web.flows",
    "ExternalFlow": "mcp_elicit.web.flows",
    "ProviderEvent": "mcp_elicit.web.flows",
    "WebhookVerifier": "mcp_elicit.web.flows",
    "StandardWebhooks": "mcp_elicit.web.webhooks",
    "TimestampedHmac": "mcp_elicit.web.webhooks",
    "OAuthConnect": "mcp_elicit.web.flows",
    "Health": "mcp_elicit.web.health",
    "DecisionInbox": "mcp_elicit.web.inbox",
    "InboxSettings": "mcp_elicit.web.inbox",
    "ExternalIdentityProvider": "mcp_elicit.web.jwks",
    "JwksTokenVerifier": "mcp_elicit.web.jwks",
    "ServedSignIn": "mcp_elicit.web.mount",
    "WebPages": "mcp_elicit.web.mount",
    "mount_web": "mcp_elicit.web.mount",
    "OidcClient": "mcp_elicit.web.oidc",
    "OidcSignIn": "mcp_elicit.web.oidc",
    "UrlPages": "mcp_elicit.web.pages",
    "RouteHost": "mcp_elicit.web.routes",
    "SignInBackoff": "mcp_elicit.web.throttle",
    "Vault": "mcp_elicit.web.vault",
    "VaultError": "mcp_elicit.web.vault",
    "VaultKeyRing": "mcp_elicit.web.vault",
}

if TYPE_CHECKING:
    # What type checkers see; at run time the names load on first use.
    from mcp_elicit.web.authserver import LocalAuthorizationServer, LocalUsers, LocalUsersError
    from mcp_elicit.web.flows import (
        ApiKeyEntry,
        Charge,
        Checkout,
        EventOutcome,
        ExternalCompletion,
        ExternalFlow,
        OAuthConnect,
        ProviderEvent,
        WebhookVerifier,
    )
    from mcp_elicit.web.health import Health
    from mcp_elicit.web.inbox import DecisionInbox, InboxSettings
    from mcp_elicit.web.jwks import ExternalIdentityProvider, JwksTokenVerifier
    from mcp_elicit.web.mount import ServedSignIn, WebPages, mount_web
    from mcp_elicit.web.oidc import OidcClient, OidcSignIn
    from mcp_elicit.web.pages import UrlPages
    from mcp_elicit.web.roles import ApproverRoles
    from mcp_elicit.web.routes import RouteHost
    from mcp_elicit.web.throttle import SignInBackoff
    from mcp_elicit.web.vault import Vault, VaultError, VaultKeyRing
    from mcp_elicit.web.webhooks import StandardWebhooks, TimestampedHmac

__all__ = [
    "ApiKeyEntry",
    "ApproverRoles",
    "Charge",
    "Checkout",
    "DecisionInbox",
    "EventOutcome",
    "ExternalCompletion",
    "ExternalFlow",
    "ExternalIdentityProvider",
    "Health",
    "InboxSettings",
    "JwksTokenVerifier",
    "LocalAuthorizationServer",
    "LocalUsers",
    "LocalUsersError",
    "OAuthConnect",
    "OidcClient",
    "OidcSignIn",
    "ProviderEvent",
    "RouteHost",
    "ServedSignIn",
    "SignInBackoff",
    "StandardWebhooks",
    "TimestampedHmac",
    "UrlPages",
    "Vault",
    "VaultError",
    "VaultKeyRing",
    "WebPages",
    "WebhookVerifier",
    "mount_web",
]

# Hidden from type checkers, which would otherwise accept any misspelt name (see `mcp_elicit`).
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
