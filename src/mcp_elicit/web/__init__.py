"""The server side of URL-mode flows: the decision pages, the encrypted vault for third-party tokens and API
keys, the local authorization server that issues MCP access tokens and signs browser users in (or the verifier of
an external identity provider's tokens), the health routes of a deployment, and `mount_web`, which serves them
all on your own server (the SDK's `MCPServer`, or a FastMCP of `mcp_elicit.fastmcp.FastMCPFlows`)."""

from mcp_elicit.web.authserver import LocalAuthorizationServer, LocalUsers, LocalUsersError
from mcp_elicit.web.flows import ApiKeyEntry, ExternalFlow, OAuthConnect
from mcp_elicit.web.health import Health
from mcp_elicit.web.inbox import DecisionInbox, InboxSettings
from mcp_elicit.web.jwks import ExternalIdentityProvider, JwksTokenVerifier
from mcp_elicit.web.mount import ServedSignIn, WebPages, mount_web
from mcp_elicit.web.oidc import OidcClient, OidcSignIn
from mcp_elicit.web.pages import UrlPages
from mcp_elicit.web.routes import RouteHost
from mcp_elicit.web.throttle import SignInBackoff
from mcp_elicit.web.vault import Vault, VaultError, VaultKeyRing

__all__ = [
    "ApiKeyEntry",
    "DecisionInbox",
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
    "RouteHost",
    "ServedSignIn",
    "SignInBackoff",
    "UrlPages",
    "Vault",
    "VaultError",
    "VaultKeyRing",
    "WebPages",
    "mount_web",
]
