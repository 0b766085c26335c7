"""The server side of URL-mode flows: the decision pages, the encrypted vault for third-party tokens and API
keys, and the local authorization server that issues MCP access tokens and signs browser users in."""

from mcp_elicit.web.authserver import LocalAuthorizationServer, LocalUsers, LocalUsersError
from mcp_elicit.web.flows import ApiKeyEntry, ExternalFlow, OAuthConnect
from mcp_elicit.web.pages import UrlPages
from mcp_elicit.web.vault import Vault, VaultError, VaultKeyRing

__all__ = [
    "ApiKeyEntry",
    "ExternalFlow",
    "LocalAuthorizationServer",
    "LocalUsers",
    "LocalUsersError",
    "OAuthConnect",
    "UrlPages",
    "Vault",
    "VaultError",
    "VaultKeyRing",
]
