"""The server side of URL-mode flows. For now: the encrypted vault for third-party tokens and API keys."""

from mcp_elicit.web.vault import Vault, VaultError, VaultKeyRing

__all__ = ["Vault", "VaultError", "VaultKeyRing"]
