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

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from mcp_elicit.reference.app import API_KEY_VAULT as API_KEY_VAULT_NAME
from mcp_elicit.reference.app import PAY_INVOICE, SERVER_NAME, build_reference_server, invoice_charge
from mcp_elicit.reference.app import TOKEN_VAULT as TOKEN_VAULT_NAME
from mcp_elicit.reference.payments import example_payments
from mcp_elicit.reference.workspace import Workspace
from mcp_elicit.server import AuditSealing, DecisionLinks, Elicitation, IdentityPolicy, Notifications, RequestState
from mcp_elicit.settings import Settings, SettingsError, variable
from mcp_elicit.web import (
    ApiKeyEntry,
    ApproverRoles,
    ExternalFlow,
    Health,
    LocalAuthorizationServer,
    LocalUsers,
    OAuthConnect,
    UrlPages,
    Vault,
    VaultKeyRing,
)
from mcp_elicit.web.audit_keys import audit_keys_routes
from mcp_elicit.web.inbox import INBOX_PATH, DecisionInbox, InboxSettings
from mcp_elicit.web.routes import add_routes

_PROVIDER = ("provider_url", "provider_client_id", "provider_client_secret", "provider_webhook_secret")
_PUBLIC_URL_FORM = "pass --public-url https://host[:port], the origin clients and browsers reach this server at"
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    url: str
    client_id: str
    client_secret: str = field(repr=False)
    webhook_secret: str | None = field(default=None, repr=False)
    """Signs the provider's payment webhooks; None: the provider's payments are not used."""


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """What `mcp-elicit serve --transport http` runs with (its environment and public URL), all of it checked."""

    public_url: str
    users: LocalUsers
    auth_keys: list[bytes] = field(repr=False)
    state_keys: list[bytes] = field(repr=False)
    vault_keys: VaultKeyRing = field(repr=False)
    provider: ProviderSettings | None = None
    operators: frozenset[str] = frozenset()
    """Usernames of the configured users who see and may cancel everyone's decisions in the inbox."""
    notifications: Notifications | None = None
    """The webhook of `MCP_ELICIT_WEBHOOK_URL` and the mail target of `MCP_ELICIT_SMTP_HOST`, when either is set."""
    approver_roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Who holds each approver role: usernames of the configured users (`MCP_ELICIT_APPROVER_ROLES`)."""
    audit: AuditSealing | None = None
    """The audit's signing keys (`MCP_ELICIT_AUDIT_KEYS`): when set, the trail is sealed every 5 s."""


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


def key_ring(environ: Mapping[str, str] | None, name: str) -> list[bytes]:
    """The key ring of the setting `name` (`auth_keys`, `state_keys`), which must be set."""
    keys: tuple[bytes, ...] | None = getattr(Settings.read(environ, only=[name]), name)
    if keys is None:
        raise SettingsError(
            [f"{variable(name)} is not set: give comma-separated base64 keys of at least 32 bytes, the newest first"]
        )
    return list(keys)


def public_url_problems(url: str) -> list[str]:
    """What keeps `url` from being the deployment's public URL: the https origin (http on loopback only)."""
    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port
    except ValueError as error:
        return [f"the public URL {url!r} cannot be parsed ({error}); {_PUBLIC_URL_FORM}"]
    if parts.scheme not in ("http", "https") or not host:
        return [f"the public URL {url!r} is not an http(s) URL; {_PUBLIC_URL_FORM}"]
    problems = []
    if parts.scheme == "http" and host not in _LOOPBACK:
        problems.append(
            f"the public URL {url} is plain http outside loopback, so sign-in and tokens would cross the network "
            "in clear; serve it behind TLS and pass --public-url https://..."
        )
    if parts.path.strip("/") or parts.query or parts.fragment or parts.username or parts.password:
        problems.append(
            f"the public URL {url} carries a path, query, fragment or credentials; "
            "it is the origin alone: scheme, host and port"
        )
    return problems


def http_settings(environ: Mapping[str, str], public_url: str) -> HttpSettings:
    """Every setting, read and checked before anything is opened; all the problems at once, not the first.

    Each problem names its setting and says what to do. `mcp-elicit doctor` reports the same ones.
    """
    problems = public_url_problems(public_url)

    def read(parse: Callable[[], _T]) -> _T | None:
        try:
            return parse()
        except SettingsError as error:
            problems.extend(error.problems)
        except ValueError as error:
            problems.append(str(error))
        return None

    users = read(lambda: LocalUsers.from_env(environ))
    auth_keys = read(lambda: key_ring(environ, "auth_keys"))
    state_keys = read(lambda: key_ring(environ, "state_keys"))
    vault_keys = read(lambda: VaultKeyRing.from_env(environ))
    provider = read(lambda: _provider_settings(environ))
    operators = read(lambda: _operators(environ, users)) if users is not None else None
    notifications = read(lambda: Notifications.from_env(environ))
    approvers = read(lambda: _approver_roles(environ, users)) if users is not None else None
    audit = read(lambda: AuditSealing.from_env(environ))
    if users is None or auth_keys is None or state_keys is None or vault_keys is None or problems:
        raise SettingsError(problems)
    found = (users, auth_keys, state_keys, vault_keys, provider, operators or frozenset(), notifications)
    return HttpSettings(public_url.rstrip("/"), *found, approver_roles=approvers or {}, audit=audit)


def _approver_roles(environ: Mapping[str, str], users: LocalUsers) -> dict[str, tuple[str, ...]]:
    members = Settings.read(environ, only=["approver_roles"]).approver_roles
    unknown = sorted({name for people in members.values() for name in people if name not in users})
    if unknown:
        raise SettingsError(
            [
                f"{variable('approver_roles')} names {', '.join(unknown)}, not among the users of "
                f"{variable('users')}; add them there"
            ]
        )
    return members


def _operators(environ: Mapping[str, str], users: LocalUsers) -> frozenset[str]:
    names = Settings.read(environ, only=["operators"]).operators
    unknown = [name for name in names if name not in users]
    if unknown:
        raise SettingsError(
            [
                f"{variable('operators')} names {', '.join(unknown)}, not among the users of {variable('users')}; "
                "add them there"
            ]
        )
    return frozenset(names)


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
    public_url = settings.public_url
    # The auth key ring signs the notifications' links to decision pages too (each key under a label of its own):
    # the first signs, every key checks, so a rotation keeps the links already sent working.
    links = DecisionLinks(public_url, settings.auth_keys)
    notifications = settings.notifications
    elicitation = Elicitation(
        store,
        request_state=RequestState(keys=settings.state_keys),
        public_base_url=public_url,
        identity=IdentityPolicy(),
        notifications=None if notifications is None else replace(notifications, links=links),
        audit=settings.audit,
    )
    auth = LocalAuthorizationServer(
        public_url, settings.users, elicitation.store, signing_keys=settings.auth_keys, server_name=SERVER_NAME
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
    auth.add_routes(server)
    page_key = hmac.new(settings.auth_keys[0], b"mcp-elicit url pages", hashlib.sha256).digest()
    pages = UrlPages(
        elicitation=elicitation,
        sign_in=auth,
        vault=vault,
        flows=flows,
        page_key=page_key,
        server_title=server.name,
        public_base_url=public_url,
        links=links,
        inbox=INBOX_PATH,
        approver_roles=ApproverRoles(settings.approver_roles),
    )
    auth.sign_in_reason = pages.sign_in_reason
    inbox = DecisionInbox(pages, InboxSettings(operators=frozenset(map(auth.principal_id, settings.operators))))
    published = [] if settings.audit is None else audit_keys_routes(settings.audit.keys.public())
    add_routes(server, [*pages.routes(), *inbox.routes(), *published])
    Health(elicitation).add_routes(server)
    return Deployment(server=server, elicitation=elicitation, public_url=public_url, auth=auth)
