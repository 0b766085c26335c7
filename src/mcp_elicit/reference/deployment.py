"""The reference HTTP deployment: MCP endpoint, local authorization server, URL-mode pages and vault, one app.

Configuration comes from the environment (`mcp_elicit.settings`), each secret in its own variable so that it can be
rotated on its own: `MCP_ELICIT_USERS` (who can sign in), `MCP_ELICIT_AUTH_KEYS` (signs MCP tokens and browser
sessions), `MCP_ELICIT_STATE_KEYS` (seals requestState), `MCP_ELICIT_VAULT_KEYS` (encrypts third-party credentials),
and for the third party `MCP_ELICIT_PROVIDER_URL`, `MCP_ELICIT_PROVIDER_CLIENT_ID`,
`MCP_ELICIT_PROVIDER_CLIENT_SECRET` (and `MCP_ELICIT_PROVIDER_WEBHOOK_SECRET` for its payments, which serves
`pay_invoice`); `MCP_ELICIT_OPERATORS` names the users who operate the decision inbox, and
`MCP_ELICIT_APPROVER_ROLES` who holds each approver role; `MCP_ELICIT_WEBHOOK_URL`, `MCP_ELICIT_WEBHOOK_SECRET`,
`MCP_ELICIT_WEBHOOK_EVENTS` and `MCP_ELICIT_WEBHOOK_FORMAT` a webhook for notifications, and `MCP_ELICIT_SMTP_HOST`
with the rest of `MCP_ELICIT_SMTP_*` and `MCP_ELICIT_MAIL_*` a mail target; their "decision waiting" messages carry
a link to the decision's page signed with the auth keys. Several instances given the same values and the same
PostgreSQL store serve each other's calls, tokens and callbacks. `/healthz` and `/readyz` serve the orchestrator
(`Health`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from mcp_elicit.reference.app import API_KEY_VAULT as API_KEY_VAULT_NAME
from mcp_elicit.reference.app import PAY_INVOICE, SERVER_NAME, build_reference_server, invoice_charge
from mcp_elicit.reference.app import TOKEN_VAULT as TOKEN_VAULT_NAME
from mcp_elicit.reference.payments import example_payments
from mcp_elicit.reference.workspace import Workspace
from mcp_elicit.server import Elicitation
from mcp_elicit.settings import Settings, SettingsError, variable
from mcp_elicit.web import ApiKeyEntry, ExternalFlow, LocalAuthorizationServer, OAuthConnect, Vault, VaultKeyRing
from mcp_elicit.web.deployment import (
    Problems,
    SignInSettings,
    read_sign_in,
    sign_in_elicitation,
    sign_in_routes,
)
from mcp_elicit.web.routes import add_routes

__all__ = [
    "Deployment",
    "HttpSettings",
    "ProviderSettings",
    "build_http_deployment",
    "http_settings",
]

_PROVIDER = ("provider_url", "provider_client_id", "provider_client_secret", "provider_webhook_secret")


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    url: str
    client_id: str
    client_secret: str = field(repr=False)
    webhook_secret: str | None = field(default=None, repr=False)
    """Signs the provider's payment webhooks; None: the provider's payments are not used."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSettings(SignInSettings):
    """What `mcp-elicit serve --transport http` runs with: the sign-in settings every deployment has, and the
    reference server's vault and provider."""

    vault_keys: VaultKeyRing = field(repr=False)
    provider: ProviderSettings | None = None


@dataclass(frozen=True, slots=True)
class Deployment:
    server: MCPServer
    elicitation: Elicitation
    public_url: str
    auth: LocalAuthorizationServer

    def http_app(self, host: str) -> Starlette:
        """The app to serve: the MCP endpoint, the authorization server (its metadata listing only what it serves),
        the sign-in and decision pages."""
        return self.auth.http_app(self.server, host=host)


def http_settings(environ: Mapping[str, str], public_url: str) -> HttpSettings:
    """Every setting, read and checked before anything is opened; all the problems at once, not the first.

    Each problem names its setting and says what to do. `mcp-elicit doctor` reports the same ones.
    """
    problems = Problems()
    vault_keys: VaultKeyRing | None = None
    provider: ProviderSettings | None = None

    def reference_settings() -> None:
        nonlocal vault_keys, provider
        vault_keys = problems.read(lambda: VaultKeyRing.from_env(environ))
        provider = problems.read(lambda: _provider_settings(environ))

    found = read_sign_in(environ, public_url, problems, then=reference_settings)
    problems.check()
    assert found is not None
    assert vault_keys is not None
    shared = {each.name: getattr(found, each.name) for each in fields(SignInSettings)}
    return HttpSettings(**shared, vault_keys=vault_keys, provider=provider)


def _provider_settings(environ: Mapping[str, str]) -> ProviderSettings | None:
    settings = Settings.read(environ, only=_PROVIDER)
    if settings.provider_url is None:
        return None
    client_id, secret = settings.provider_client_id, settings.provider_client_secret
    if client_id is None or secret is None:
        url = variable("provider_url")
        raise SettingsError(
            [
                f"{variable(name)} is not set, and {url} needs it; set it, or unset {url} to serve without "
                "connect_account"
                for name, value in zip(_PROVIDER[1:3], (client_id, secret), strict=True)
                if value is None
            ]
        )
    hooks = settings.provider_webhook_secret
    return ProviderSettings(
        settings.provider_url,
        client_id,
        secret.get_secret_value(),
        None if hooks is None else hooks.get_secret_value(),
    )


def build_http_deployment(*, store: str | None, workspace: Path, settings: HttpSettings) -> Deployment:
    """Everything `mcp-elicit serve --transport http` runs, checked before anything listens."""
    public_url, users = settings.public_url, settings.users
    assert users is not None  # http_settings refuses an identity provider, so the users are set
    elicitation = sign_in_elicitation(store, settings)
    auth = LocalAuthorizationServer(
        public_url, users, elicitation.store, signing_keys=settings.auth_keys, server_name=SERVER_NAME
    )
    vault = Vault(elicitation.store, settings.vault_keys)
    provider = settings.provider
    flows: dict[str, ExternalFlow] = {
        "set_api_key": ApiKeyEntry(vault_name=API_KEY_VAULT_NAME, service_title="Example")
    }
    if provider is not None:
        flows["connect_account"] = OAuthConnect(
            vault_name=TOKEN_VAULT_NAME,
            provider_title="Example",
            authorize_url=f"{provider.url}/authorize",
            token_url=f"{provider.url}/token",
            client_id=provider.client_id,
            client_secret=provider.client_secret,
            scope="profile",
            profile_url=f"{provider.url}/api/me",
        )
        if provider.webhook_secret is not None:
            flows[PAY_INVOICE] = example_payments(
                provider.url, provider.client_id, provider.client_secret, provider.webhook_secret, invoice_charge
            )
    server = build_reference_server(
        elicitation,
        Workspace.open(workspace),
        SERVER_NAME,
        vault=vault,
        provider_api=provider.url if provider is not None else None,
        server_kwargs=auth.mcp_server_kwargs(f"{public_url}/mcp"),
        payments=PAY_INVOICE in flows,
    )
    routes = sign_in_routes(settings, elicitation, auth, server_title=server.name, vault=vault, flows=flows)
    add_routes(server, routes)
    return Deployment(server=server, elicitation=elicitation, public_url=public_url, auth=auth)
