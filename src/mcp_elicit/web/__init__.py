"""The server side of URL-mode flows: the decision pages, the encrypted vault for third-party tokens and API
keys, the local authorization server that issues MCP access tokens and signs browser users in, and the health
routes of a deployment."""

from mcp_elicit.web.authserver import LocalAuthorizationServer, LocalUsers, LocalUsersError
from mcp_elicit.web.flows import ApiKeyEntry, ExternalFlow, OAuthConnect
from mcp_elicit.web.health import Health
from mcp_elicit.web.pages import UrlPages
from mcp_elicit.web.vault import Vault, VaultError, VaultKeyRing

__all__ = [
    "ApiKeyEntry",
    "ExternalFlow",
    "Health",
    "LocalAuthorizationServer",
    "LocalUsers",
    "LocalUsersError",
    "OAuthConnect",
    "UrlPages",
    "Vault",
    "VaultError",
    "VaultKeyRing",
]
