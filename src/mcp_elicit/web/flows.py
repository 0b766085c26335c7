"""The external steps behind URL decisions: a third-party OAuth connection, or an API key typed into our page.

Both end in the vault: the credential is stored server-side for the decision's principal and never travels
back through the MCP client, a tool result, a log line or an audit row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OAuthConnect:
    """Authorization code with PKCE against a third-party provider; the token lands in the vault as `vault_name`."""

    vault_name: str
    provider_title: str
    authorize_url: str
    token_url: str
    client_id: str
    client_secret: str
    scope: str = ""
    profile_url: str = ""
    """The provider's user-info API (GET with the new token, JSON with `login` and `name`); the "Done" page says
    whom the account was connected as. Empty: the page says only that it was connected."""


@dataclass(frozen=True, slots=True)
class ApiKeyEntry:
    """A form on our own page that posts the key straight to this server; it lands in the vault as `vault_name`."""

    vault_name: str
    service_title: str
    max_length: int = 4096


ExternalFlow = OAuthConnect | ApiKeyEntry
