"""The server side of URL-mode flows: the encrypted vault for third-party tokens and API keys, and the local
authorization server that issues MCP access tokens and signs browser users in."""

from mcp_elicit.web.authserver import LocalAuthorizationServer, LocalUsers, LocalUsersError
from mcp_elicit.web.vault import Vault, VaultError, VaultKeyRing

__all__ = ["LocalAuthorizationServer", "LocalUsers", "LocalUsersError", "Vault", "VaultError", "VaultKeyRing"]
