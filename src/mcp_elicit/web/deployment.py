"""What every signed-in HTTP deployment shares: its settings, read and checked at once, and the pages it serves.

`mcp-elicit serve --transport http` (`mcp_elicit.reference.deployment`) and `mcp-elicit gateway --transport
streamable-http --public-url ...` (`mcp_elicit.gateway.deployment`) sign their clients in the same way, from the
same environment: `MCP_ELICIT_USERS` (who can sign in), `MCP_ELICIT_AUTH_KEYS` (signs MCP tokens, browser sessions
and the links to decision pages), `MCP_ELICIT_STATE_KEYS` (seals requestState), `MCP_ELICIT_OPERATORS` (who
operates the decision inbox), `MCP_ELICIT_APPROVER_ROLES`, the notification targets and `MCP_ELICIT_AUDIT_KEYS`.
Each reads them here, so the two never disagree on a setting or on what is wrong with it, and serves the same
sign-in, decision pages, inbox and health routes beside its MCP endpoint. The gateway alone may sign people in
with an external identity provider instead of `MCP_ELICIT_USERS` (`MCP_ELICIT_IDP_ISSUER` and its neighbours:
`external_sign_in`); `serve` refuses those settings.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar
from urllib.parse import urlsplit

import httpx2
from starlette.routing import Route

from mcp_elicit.server import AuditSealing, DecisionLinks, Elicitation, IdentityPolicy, Notifications, RequestState
from mcp_elicit.settings import Settings, SettingsError, variable
from mcp_elicit.store import Store
from mcp_elicit.web.audit_keys import audit_keys_routes
from mcp_elicit.web.authserver import LocalAuthorizationServer, LocalUsers
from mcp_elicit.web.flows import ExternalFlow
from mcp_elicit.web.health import Health
from mcp_elicit.web.inbox import INBOX_PATH, DecisionInbox, InboxSettings
from mcp_elicit.web.jwks import ExternalIdentityProvider, JwksError, JwksTokenVerifier
from mcp_elicit.web.oidc import OidcClient, OidcSignIn
from mcp_elicit.web.pages import UrlPages
from mcp_elicit.web.roles import ApproverRoles
from mcp_elicit.web.vault import Vault

__all__ = [
    "ExternalSignIn",
    "IdentityProviderSettings",
    "Problems",
    "SignInSettings",
    "external_sign_in",
    "key_ring",
    "public_url_problems",
    "read_sign_in",
    "sign_in_elicitation",
    "sign_in_routes",
    "sign_in_settings",
]

_PUBLIC_URL_FORM = "pass --public-url https://host[:port], the origin clients and browsers reach this server at"
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_T = TypeVar("_T")
_IDP: tuple[str, ...] = ("idp_issuer", "idp_audience", "idp_client_id", "idp_client_secret", "idp_subject_claim")
_CALLBACK_PATH = "/signin/callback"


@dataclass(frozen=True, slots=True)
class IdentityProviderSettings:
    """The external identity provider a deployment signs people in with, in place of the local authorization
    server: its access tokens are verified against its published keys, and the pages sign browsers in with it."""

    issuer: str
    audience: str
    """What its access tokens carry in `aud` for this deployment: by default the MCP endpoint's URL (RFC 8707)."""
    client_id: str
    client_secret: str = field(repr=False)
    subject_claim: str = "sub"
    """The claim of both its access tokens and its ID tokens that names the person (`MCP_ELICIT_IDP_SUBJECT_CLAIM`)."""


@dataclass(frozen=True, slots=True)
class SignInSettings:
    """A signed-in deployment's environment and public URL, all of it checked."""

    public_url: str
    users: LocalUsers | None
    """Who signs in with the local authorization server; None when `identity_provider` signs people in instead."""
    auth_keys: list[bytes] = field(repr=False)
    state_keys: list[bytes] = field(repr=False)
    operators: frozenset[str] = frozenset()
    """Usernames of the configured users who see and may cancel everyone's decisions in the inbox."""
    notifications: Notifications | None = None
    """The webhook of `MCP_ELICIT_WEBHOOK_URL` and the mail target of `MCP_ELICIT_SMTP_HOST`, when either is set."""
    approver_roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Who holds each approver role: usernames of the configured users (`MCP_ELICIT_APPROVER_ROLES`)."""
    audit: AuditSealing | None = None
    """The audit's signing keys (`MCP_ELICIT_AUDIT_KEYS`): when set, the trail is sealed every 5 s."""
    identity_provider: IdentityProviderSettings | None = None
    """The external identity provider (`MCP_ELICIT_IDP_ISSUER`...) that signs people in, when set."""

    @property
    def links(self) -> DecisionLinks:
        """Links to decision pages, signed with the auth key ring (each key under a label of its own): the first
        signs, every key checks, so a rotation keeps the links already sent working."""
        return DecisionLinks(self.public_url, self.auth_keys)


class Problems:
    """Settings read one after another with every problem kept, so that all of them are said at once."""

    def __init__(self, found: list[str] | None = None) -> None:
        self.found = found or []

    def read(self, parse: Callable[[], _T]) -> _T | None:
        """What `parse` read, or None with its problems kept."""
        try:
            return parse()
        except SettingsError as error:
            self.found.extend(error.problems)
        except ValueError as error:
            self.found.append(str(error))
        return None

    def check(self) -> None:
        if self.found:
            raise SettingsError(self.found)


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


def read_sign_in(
    environ: Mapping[str, str],
    public_url: str,
    problems: Problems,
    *,
    then: Callable[[], None] = lambda: None,
    identity_provider: bool = False,
) -> SignInSettings | None:
    """The sign-in settings, or None with their problems kept in `problems`; `then` reads a deployment's own
    settings after the key rings, so that the problems come in the order of the configuration page.

    With `identity_provider` (the gateway), `MCP_ELICIT_IDP_ISSUER` and its neighbours may name an external
    identity provider in place of `MCP_ELICIT_USERS`; without it (`serve`), they are refused."""
    problems.found.extend(public_url_problems(public_url))
    external = _external_wanted(environ)
    users = None
    if not external or _set(environ, "users"):
        users = problems.read(lambda: LocalUsers.from_env(environ))
    provider = None
    if external:
        provider = problems.read(lambda: _identity_provider(environ, public_url, allowed=identity_provider))
    auth_keys = problems.read(lambda: key_ring(environ, "auth_keys"))
    state_keys = problems.read(lambda: key_ring(environ, "state_keys"))
    then()
    operators = problems.read(lambda: _operators(environ, users)) if users is not None or external else None
    notifications = problems.read(lambda: Notifications.from_env(environ))
    approvers = problems.read(lambda: _approver_roles(environ, users)) if users is not None or external else None
    audit = problems.read(lambda: AuditSealing.from_env(environ))
    if (users is None and provider is None) or auth_keys is None or state_keys is None:
        return None
    return SignInSettings(
        public_url.rstrip("/"),
        users,
        auth_keys,
        state_keys,
        operators or frozenset(),
        notifications,
        approvers or {},
        audit,
        provider,
    )


def sign_in_settings(environ: Mapping[str, str], public_url: str, *, identity_provider: bool = False) -> SignInSettings:
    """Every sign-in setting, read and checked before anything is opened; all the problems at once, not the first.

    Each problem names its setting and says what to do. `identity_provider` as for `read_sign_in`.
    """
    problems = Problems()
    found = read_sign_in(environ, public_url, problems, identity_provider=identity_provider)
    problems.check()
    assert found is not None
    return found


def sign_in_elicitation(store: str | Store | None, settings: SignInSettings) -> Elicitation:
    """The runtime of a signed-in deployment: its decisions bound to the principal of each verified access token,
    its rounds sealed with the shared key ring, its decision pages under the public URL."""
    notifications = settings.notifications
    return Elicitation(
        store,
        request_state=RequestState(keys=settings.state_keys),
        public_base_url=settings.public_url,
        identity=IdentityPolicy(),
        notifications=None if notifications is None else replace(notifications, links=settings.links),
        audit=settings.audit,
    )


def sign_in_routes(
    settings: SignInSettings,
    elicitation: Elicitation,
    auth: LocalAuthorizationServer | OidcSignIn,
    *,
    server_title: str,
    vault: Vault | None = None,
    flows: Mapping[str, ExternalFlow] | None = None,
) -> list[Route]:
    """The routes served beside the MCP endpoint, without bearer authorization (a browser carries no MCP token):
    sign-in and sign-out, the decision pages (and `flows`' pages), the inbox, the audit's public keys when the
    trail is sealed, `/healthz` and `/readyz`."""
    page_key = hmac.new(settings.auth_keys[0], b"mcp-elicit url pages", hashlib.sha256).digest()
    pages = UrlPages(
        elicitation=elicitation,
        sign_in=auth,
        vault=vault,
        flows=flows or {},
        page_key=page_key,
        server_title=server_title,
        public_base_url=settings.public_url,
        links=settings.links,
        inbox=INBOX_PATH,
        approver_roles=ApproverRoles(settings.approver_roles),
    )
    if isinstance(auth, LocalAuthorizationServer):
        auth.sign_in_reason = pages.sign_in_reason
    operators = frozenset(name if "#" in name else auth.principal_id(name) for name in settings.operators)
    inbox = DecisionInbox(pages, InboxSettings(operators=operators))
    published = [] if settings.audit is None else audit_keys_routes(settings.audit.keys.public())
    return [*auth.routes(), *pages.routes(), *inbox.routes(), *published, *Health(elicitation).routes()]


@dataclass(frozen=True, slots=True)
class ExternalSignIn:
    """The external identity provider at work: `verifier` checks the MCP endpoint's bearer tokens, `sign_in` signs
    browsers in on the pages, and both name a person `issuer#sub` (or the provider's `subject_claim` for `sub`)."""

    verifier: JwksTokenVerifier
    sign_in: OidcSignIn


def external_sign_in(settings: SignInSettings, *, timeout: float = 10.0) -> ExternalSignIn:
    """The verifier and the browser sign-in of `settings.identity_provider`.

    The provider's JWK set URL comes from its discovery document (`{issuer}/.well-known/openid-configuration`),
    read here once, so that a provider that cannot be reached, or whose document names another issuer, stops the
    deployment before it listens (`SettingsError` naming `MCP_ELICIT_IDP_ISSUER`), not at a person's first call.
    """
    provider = settings.identity_provider
    if provider is None:
        raise ValueError("these settings name no identity provider (MCP_ELICIT_IDP_ISSUER)")
    jwks_url = _discovered_jwks_url(provider.issuer, timeout)
    try:
        trusted = ExternalIdentityProvider(
            issuer=provider.issuer,
            jwks_url=jwks_url,
            audience=provider.audience,
            subject_claim=provider.subject_claim,
        )
    except JwksError as error:  # what the provider's document said, not the gateway's file
        named = f"{variable('idp_issuer')} {provider.issuer}"
        raise SettingsError(
            [f"{named}: its discovery document names a jwks_uri the gateway cannot use: {error}"]
        ) from None
    verifier = JwksTokenVerifier(trusted)
    client = OidcClient(
        issuer=provider.issuer,
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        redirect_uri=f"{settings.public_url}{_CALLBACK_PATH}",
        subject_claim=provider.subject_claim,
    )
    return ExternalSignIn(verifier, OidcSignIn(client, settings.auth_keys))


def _discovered_jwks_url(issuer: str, timeout: float) -> str:
    url = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
    named = f"{variable('idp_issuer')} {issuer}"
    try:
        with httpx2.Client(timeout=timeout, follow_redirects=False) as http:
            answer = http.get(url, headers={"Accept": "application/json"})
        document = json.loads(answer.content) if answer.status_code == 200 else None
    except (httpx2.HTTPError, ValueError) as error:
        raise SettingsError([f"{named}: its discovery document {url} cannot be read ({error})"]) from None
    if not isinstance(document, dict):
        raise SettingsError([f"{named}: its discovery document {url} answered HTTP {answer.status_code}"])
    if document.get("issuer") != issuer:
        raise SettingsError(
            [
                f"{named}: its discovery document {url} names the issuer {document.get('issuer')!r}; set the "
                "issuer exactly as the provider writes it (mind a trailing slash)"
            ]
        )
    jwks = document.get("jwks_uri")
    if not isinstance(jwks, str) or not jwks.startswith(("https://", "http://")):
        raise SettingsError([f"{named}: its discovery document {url} names no jwks_uri"])
    return jwks


def _set(environ: Mapping[str, str], name: str) -> bool:
    return any((environ.get(variable(name) + tail) or "").strip() for tail in ("", "_FILE"))


def _external_wanted(environ: Mapping[str, str]) -> bool:
    return any(_set(environ, name) for name in _IDP)


def _identity_provider(environ: Mapping[str, str], public_url: str, *, allowed: bool) -> IdentityProviderSettings:
    issuer_variable = variable("idp_issuer")
    if not allowed:
        given = ", ".join(variable(name) for name in _IDP if _set(environ, name))
        raise SettingsError(
            [
                f"{given}: an external identity provider signs people in to mcp-elicit gateway only; this command "
                f"signs them in with its local authorization server ({variable('users')}): unset them"
            ]
        )
    found = Settings.read(environ, only=_IDP)
    if found.idp_issuer is None:
        raise SettingsError(
            [
                f"{variable(name)} is set, and names an identity provider only with {issuer_variable}: set it to the "
                "provider's issuer URL, or unset this one"
                for name in _IDP[1:]
                if _set(environ, name)
            ]
        )
    problems = []
    if _set(environ, "users"):
        problems.append(
            f"{variable('users')} and {issuer_variable} are both set: the users sign in with the local "
            "authorization server, which is not served beside an external identity provider; unset one of them"
        )
    for name, purpose in (("idp_client_id", "client id"), ("idp_client_secret", "client secret")):
        if getattr(found, name) is None:
            problems.append(
                f"{variable(name)} is not set, and {issuer_variable} needs it: the {purpose} the provider "
                f"registered for the pages' sign-in (a confidential web client, redirect URI "
                f"{public_url.rstrip('/')}{_CALLBACK_PATH})"
            )
    audience = found.idp_audience or f"{public_url.rstrip('/')}/mcp"  # a plain http public URL is said already
    for name, url in (("idp_issuer", found.idp_issuer), ("idp_audience", found.idp_audience)):
        parts = urlsplit(url or "")
        if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
            problems.append(f"{variable(name)} {url} is plain http outside loopback; use https")
    if found.idp_client_id is not None and audience == found.idp_client_id:
        # The pages' ID tokens name their client as audience: with this one, one could pass as an access token.
        problems.append(
            f"{variable('idp_audience')} is {variable('idp_client_id')}, the pages' client: the provider's ID "
            "tokens for the pages name it as their audience, so one would pass as an access token to /mcp; give "
            "the access tokens an audience of their own (the gateway's /mcp URL by default)"
        )
    if problems:
        raise SettingsError(problems)
    assert found.idp_client_id is not None
    assert found.idp_client_secret is not None
    return IdentityProviderSettings(
        found.idp_issuer,
        audience,
        found.idp_client_id,
        found.idp_client_secret.get_secret_value(),
        found.idp_subject_claim or "sub",
    )


def _approver_roles(environ: Mapping[str, str], users: LocalUsers | None) -> dict[str, tuple[str, ...]]:
    members = Settings.read(environ, only=["approver_roles"]).approver_roles
    if users is None:
        return members  # an identity provider's subjects (or principal ids): the provider knows who they are
    unknown = sorted({name for people in members.values() for name in people if name not in users})
    if unknown:
        raise SettingsError(
            [
                f"{variable('approver_roles')} names {', '.join(unknown)}, not among the users of "
                f"{variable('users')}; add them there"
            ]
        )
    return members


def _operators(environ: Mapping[str, str], users: LocalUsers | None) -> frozenset[str]:
    names = Settings.read(environ, only=["operators"]).operators
    if users is None:
        return frozenset(names)  # an identity provider's subjects (or principal ids)
    unknown = [name for name in names if name not in users]
    if unknown:
        raise SettingsError(
            [
                f"{variable('operators')} names {', '.join(unknown)}, not among the users of {variable('users')}; "
                "add them there"
            ]
        )
    return frozenset(names)
