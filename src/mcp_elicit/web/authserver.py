"""A local OAuth authorization server: it issues the MCP access tokens and signs browser users in.

The reference deployment needs one party that both authorizes MCP clients (so every call carries a
verified principal) and knows who sits at the browser (so a URL-mode page can check that the person
completing a decision *is* the decision's principal). `LocalAuthorizationServer` is that party, built on
the SDK's authorization-server support: pass `mcp_server_kwargs(resource_url)` to `Elicitation.server`
and the `MCPServer` serves `/.well-known/oauth-authorization-server`, `/register`, `/authorize`, `/token`
and `/revoke`, and verifies the tokens it issued; `add_routes(server)` adds the sign-in pages
(`GET|POST /signin`, `POST /signout`), and `http_app(server)` is the app to serve, its metadata saying
only what is served. Users come from configuration (`LocalUsers`, `MCP_ELICIT_USERS`).

Guarantees:

- Stateless verification: authorization codes, access tokens, sign-in requests and browser sessions
  are HS256 JWTs under a key ring shared by every instance (the first key signs, every key verifies,
  picked by `kid`). Any instance with the same keys and store verifies any other's tokens; nothing is
  kept in memory between requests. Each kind of token is signed with its own key derived from the ring
  (HMAC-SHA256 of a purpose label), so a token of one kind never verifies as another.
- An authorization code is redeemed at most once, across instances: its `jti` is consumed in the
  store's single-use ledger. A replayed code is refused (`invalid_grant`) and the access token first
  issued for it is revoked (RFC 6749 §4.1.2). Codes live `code_ttl` seconds (default 60).
- Access tokens carry `iss`, `sub`, `client_id`, `scope`, `aud` (the RFC 8707 resource, when the client
  named one), `exp` and `jti`. `load_access_token` refuses a tampered, expired, revoked token, one
  signed by a key no longer in the ring, and one whose user is no longer configured. Revocation
  (`/revoke`) records the `jti` in the store's ledger: one indexed read per verified request.
- The principal is `f"{issuer}#{username}"`, the same string `IdentityPolicy` derives from the token
  (`iss` + `sub`), so the MCP principal and the browser principal compare equal.
- Passwords are kept only as scrypt hashes with a random salt per user; a sign-in takes the same work
  whether the user exists or not, and compares in constant time. A failed sign-in says the same thing
  for an unknown user and a wrong password.
- Repeated failed sign-ins are held back, per account and per client address (`SignInBackoff`: after 5
  failures for an account or 20 from an address, HTTP 429 with `Retry-After` for 30 s, doubling, at most
  15 minutes; the right password too meanwhile), each refusal logged as a warning with the account and
  the address. The counts are per instance (see `web.throttle`).
- The sign-in form is CSRF-protected (a double-submit cookie bound by HMAC to the form's request or
  target and to the browser's session, if any), escapes every value it shows, needs no JavaScript and is
  served with a strict CSP, no caching, no framing and no referrer. A sign-in replaces the CSRF cookie,
  so a value planted or seen before it is worth nothing after. After sign-in it redirects only to a
  redirect URI registered for the client, or to a same-origin path: anything else in `next` becomes `/`.
- Sign-out is a POST whose token is bound by HMAC to the browser's session (its `jti`, which only the
  HttpOnly cookie carries), so a page of another site cannot sign anyone out; a sign-out without that token
  changes nothing. It leads to a same-origin path only, as sign-in does: the switch of account a decision
  page offers (`switch_account_form`) leads to the sign-in page, and from there back to the decision.
- The session cookie is HttpOnly, SameSite=Lax, Path=/, and Secure (with the `__Host-` prefix) when the
  issuer is https.

Does not guarantee:

- Strong authentication: users and passwords come from configuration; there is no MFA, no password
  change, no user store, and the back-off of failed sign-ins counts per instance. It is a local or
  demonstration authorization server; put a real identity provider in front of production use.
- Refresh tokens: none are issued (`load_refresh_token` returns None, `exchange_refresh_token` refuses
  with `unsupported_grant_type`). The SDK's metadata lists the grant all the same; the app from
  `http_app(server)` advertises only `authorization_code`. A client signs the user in again when its
  access token expires (`access_ttl`, default one hour).
- Consent screens: an OAuth authorization asks for the password every time and shows the client's
  self-declared name and its redirect host, but it has no per-client consent records.
- Server-side session revocation: sign-out clears the cookie in that browser; a copy taken earlier
  stays valid until it expires (`session_ttl`, default 8 hours). Removing a user from the configuration,
  or rotating the signing keys, ends their sessions and tokens at once.
- Secrecy of registered clients: a confidential client's secret is stored in the store as issued, since
  the SDK's client authentication compares it in clear. MCP clients are usually public clients (PKCE).
- Confidentiality of token contents: the JWTs are signed, not encrypted; their claims (user name,
  client id, scopes, the authorization parameters) are readable by whoever holds them.

Keys: at least 32 random bytes each; keep them apart from the requestState and vault keys. Rotation:
put the new key first on every instance, wait `max(access_ttl, session_ttl)`, then drop the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import anyio.to_thread
import jwt
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    ProviderTokenVerifier,
    RefreshToken,
    RegistrationError,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, cors_middleware, validate_issuer_url
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, AnyUrl, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from mcp_elicit.model import JSONObject
from mcp_elicit.settings import Settings, SettingsError, variable
from mcp_elicit.store import AlreadyExists, Consumption, Store
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.web.html import client_name, page, text
from mcp_elicit.web.routes import RouteHost, add_routes
from mcp_elicit.web.throttle import HeldBack, SignInBackoff, SignInThrottle

__all__ = [
    "ENV_VAR",
    "SCOPE",
    "LocalAuthorizationServer",
    "LocalUsers",
    "LocalUsersError",
    "SignOutForm",
]

log = logging.getLogger(__name__)

ENV_VAR = variable("users")
SCOPE = "mcp"
SIGN_IN_PATH = "/signin"
SIGN_OUT_PATH = "/signout"
METADATA_PATH = "/.well-known/oauth-authorization-server"
SERVED_GRANT_TYPES: Final = ("authorization_code",)
MIN_KEY_BYTES = 32
MAX_FORM_BYTES = 16 * 1024
MAX_NEXT_LENGTH = 2048
HASHING_THREADS = 4
_USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")

# scrypt: N=2^14, r=8, p=1 (16 MiB, tens of milliseconds): the interactive-login parameters of RFC 7914 §2.
_SCRYPT_N: Final = 2**14
_SCRYPT_R: Final = 8
_SCRYPT_P: Final = 1
_SALT_BYTES: Final = 16
_HASH_BYTES: Final = 32

_ALGORITHM: Final = "HS256"
_KDF_LABEL: Final = b"mcp-elicit/authserver/v1/"
_REQUEST, _CODE, _ACCESS, _SESSION, _CSRF = "request", "code", "access", "session", "csrf"
_PURPOSES: Final = (_REQUEST, _CODE, _ACCESS, _SESSION, _CSRF)
_TYP: Final = {_REQUEST: "elicit-authz-request+jwt", _CODE: "elicit-code+jwt", _ACCESS: "at+jwt", _SESSION: "JWT"}
_CODE_LEDGER = "oauth-code:"
_REVOKED_LEDGER = "oauth-revoked:"
_WRONG_CREDENTIALS = "Wrong username or password."


# -- users --------------------------------------------------------------------------------------------


class LocalUsersError(ValueError):
    """The user configuration cannot be used. The message never contains a password."""


@dataclass(frozen=True, slots=True)
class _User:
    username: str
    display_name: str
    salt: bytes = field(repr=False)
    digest: bytes = field(repr=False)


def _scrypt(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=_HASH_BYTES)


class LocalUsers:
    """The configured users: username, display name and a salted scrypt hash of the password.

    `LocalUsers.from_text("alice:password:Alice Liddell,bob:secret:Bob")`: comma-separated entries
    `username:password[:display name]`. A username is 1-64 characters of letters, digits and `._@-`
    (starting with a letter or digit); a password is non-empty and contains neither `:` nor `,`; the
    display name defaults to the username. The plaintext passwords are dropped once hashed.
    """

    def __init__(self, users: Mapping[str, tuple[str, str]]) -> None:
        """`users` maps each username to `(password, display name)`."""
        if not users:
            raise LocalUsersError("no users configured: give at least one username:password[:display name]")
        self._users: dict[str, _User] = {}
        for username, (password, display_name) in users.items():
            if not isinstance(username, str) or not _USERNAME.fullmatch(username):
                raise LocalUsersError(
                    f"invalid username {username!r}: use 1-64 letters, digits and ._@- "
                    "(starting with a letter or digit)"
                )
            if not isinstance(password, str) or not password:
                raise LocalUsersError(f"user {username!r} has an empty password")
            salt = os.urandom(_SALT_BYTES)
            self._users[username] = _User(username, display_name.strip() or username, salt, _scrypt(password, salt))
        self._decoy_salt = os.urandom(_SALT_BYTES)
        self._decoy_digest = _scrypt(secrets.token_urlsafe(16), self._decoy_salt)

    @classmethod
    def from_text(cls, text: str) -> LocalUsers:
        """Parse `username:password[:display name]` entries separated by commas."""
        users: dict[str, tuple[str, str]] = {}
        entries = [entry.strip() for entry in text.split(",")]
        if not any(entries):
            raise LocalUsersError("no users configured: give at least one username:password[:display name]")
        for position, entry in enumerate(entries, start=1):
            if not entry:
                raise LocalUsersError(f"entry {position} is empty (two commas in a row, or a trailing comma?)")
            parts = entry.split(":", 2)
            if len(parts) < 2:
                raise LocalUsersError(f"entry {position} is not username:password[:display name]")
            username, password = parts[0].strip(), parts[1]
            display_name = parts[2].strip() if len(parts) == 3 else ""
            if not _USERNAME.fullmatch(username):
                raise LocalUsersError(
                    f"entry {position}: invalid username {username!r}: use 1-64 letters, digits and ._@- "
                    "(starting with a letter or digit)"
                )
            if not password:
                raise LocalUsersError(f"entry {position}: user {username!r} has an empty password")
            if username in users:
                raise LocalUsersError(f"entry {position}: user {username!r} is configured twice")
            users[username] = (password, display_name)
        return cls(users)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LocalUsers:
        """The users in `MCP_ELICIT_USERS` or in the file `MCP_ELICIT_USERS_FILE` names (same format as
        `from_text`; in `environ`, when given; see `mcp_elicit.settings`)."""
        try:
            settings = Settings.read(environ, only=["users"])
        except SettingsError as error:
            raise LocalUsersError(str(error)) from None
        if settings.users is None:
            raise LocalUsersError(f"{ENV_VAR} is not set: give username:password[:display name] entries")
        try:
            return cls.from_text(settings.users.get_secret_value())
        except LocalUsersError as error:
            raise LocalUsersError(f"{settings.origin('users')}: {error}") from None

    def verify(self, username: str, password: str) -> bool:
        """True if `username` is configured with `password`; the same work and timing either way."""
        user = self._users.get(username)
        salt, expected = (user.salt, user.digest) if user is not None else (self._decoy_salt, self._decoy_digest)
        matches = hmac.compare_digest(_scrypt(password, salt), expected)
        return matches and user is not None

    def display_name(self, username: str) -> str | None:
        user = self._users.get(username)
        return None if user is None else user.display_name

    @property
    def usernames(self) -> list[str]:
        return sorted(self._users)

    def __contains__(self, username: object) -> bool:
        return username in self._users

    def __len__(self) -> int:
        return len(self._users)

    def __repr__(self) -> str:
        return f"LocalUsers({self.usernames!r})"


# -- the authorization server -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Key:
    kid: str
    derived: dict[str, bytes] = field(repr=False)


def _key_ring(signing_keys: Sequence[bytes]) -> list[_Key]:
    if isinstance(signing_keys, bytes | str) or not signing_keys:
        raise ValueError("signing_keys is a non-empty sequence of keys (bytes), the signing key first")
    ring: list[_Key] = []
    for position, key in enumerate(signing_keys, start=1):
        if not isinstance(key, bytes):
            raise TypeError(f"signing key {position} is {type(key).__name__}, not bytes")
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"signing key {position} has {len(key)} bytes; use at least {MIN_KEY_BYTES} random bytes")
        kid = hashlib.sha256(_KDF_LABEL + b"kid\x00" + key).hexdigest()[:16]
        if any(existing.kid == kid for existing in ring):
            raise ValueError(f"signing key {position} is given twice")
        derived = {
            purpose: hmac.new(key, _KDF_LABEL + purpose.encode(), hashlib.sha256).digest() for purpose in _PURPOSES
        }
        ring.append(_Key(kid, derived))
    return ring


def _canonical_issuer(issuer: str) -> str:
    try:
        url = AnyHttpUrl(issuer.rstrip("/"))
    except ValidationError:
        raise ValueError(f"issuer {issuer!r} is not an http(s) URL") from None
    validate_issuer_url(url)
    if url.path not in (None, "", "/"):
        raise ValueError(f"issuer {issuer!r} has a path; the issuer is the origin that serves these routes")
    return f"{url.scheme}://{urlsplit(str(url)).netloc}"


@dataclass(frozen=True, slots=True)
class SignOutForm:
    """A sign-out form for a page to render as it renders its own: where it posts and its hidden fields."""

    action: str
    fields: Mapping[str, str]


def safe_next(value: object) -> str:
    """`value` if it is a same-origin path (one leading "/", printable ASCII, no backslash), else "/"."""
    if not isinstance(value, str) or not value.startswith("/") or len(value) > MAX_NEXT_LENGTH:
        return "/"
    if value.startswith("//") or any(c == "\\" or not " " < c < "\x7f" for c in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


class LocalAuthorizationServer(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    """The SDK `OAuthAuthorizationServerProvider` of the reference deployment, plus its sign-in pages.

    The SEP-990 identity-assertion grant keeps the SDK's default (refused as an unsupported grant type).
    """

    def __init__(
        self,
        issuer: str,
        users: LocalUsers,
        store: Store,
        signing_keys: Sequence[bytes],
        *,
        access_ttl: int = 3600,
        code_ttl: int = 60,
        session_ttl: int = 8 * 3600,
        request_ttl: int = 600,
        clock: Callable[[], float] = time.time,
        server_name: str | None = None,
        sign_in_reason: Callable[[str], str | None] | None = None,
        sign_in_backoff: SignInBackoff | None = None,
    ) -> None:
        """`server_name` is the MCP server's name, which the sign-in page names; `sign_in_reason(next_path)` says
        why a browser on its way to `next_path` must sign in (the URL-mode pages' `UrlPages.sign_in_reason`);
        `sign_in_backoff` when failed sign-ins are held back (default `SignInBackoff()`)."""
        for name, ttl in (
            ("access_ttl", access_ttl),
            ("code_ttl", code_ttl),
            ("session_ttl", session_ttl),
            ("request_ttl", request_ttl),
        ):
            if ttl <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {ttl}")
        self.issuer = _canonical_issuer(issuer)
        self.users = users
        self.store = store
        self._async_store = AsyncStore(store)
        self._ring = _key_ring(signing_keys)
        self._by_kid = {key.kid: key for key in self._ring}
        self.access_ttl = int(access_ttl)
        self.code_ttl = int(code_ttl)
        self.session_ttl = int(session_ttl)
        self.request_ttl = int(request_ttl)
        self._clock = clock
        self.throttle = SignInThrottle(sign_in_backoff or SignInBackoff(), clock)
        self.server_name = server_name
        self.sign_in_reason = sign_in_reason
        self.secure_cookies = self.issuer.startswith("https://")
        prefix = "__Host-" if self.secure_cookies else ""
        self.session_cookie = f"{prefix}mcp-elicit-session"
        self.csrf_cookie = f"{prefix}mcp-elicit-csrf"
        self._hashing: anyio.CapacityLimiter | None = None

    def __repr__(self) -> str:
        return f"LocalAuthorizationServer({self.issuer!r}, users={self.users!r}, keys={[k.kid for k in self._ring]})"

    # -- wiring into an MCPServer ---------------------------------------------------------------------

    def auth_settings(self, resource_server_url: str) -> AuthSettings:
        """Settings for an `MCPServer` at `resource_server_url` (e.g. `https://host/mcp`) using this server."""
        # Strings, not URL objects: AuthSettings keeps a path-less issuer without a trailing slash, so the
        # advertised issuer is exactly the `iss` of the tokens (RFC 8414 compares them as strings).
        return AuthSettings.model_validate(
            {
                "issuer_url": self.issuer,
                "resource_server_url": resource_server_url,
                "required_scopes": [SCOPE],
                "validate_token_resource": True,
                "client_registration_options": ClientRegistrationOptions(
                    enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
                ),
                "revocation_options": RevocationOptions(enabled=True),
            }
        )

    def mcp_server_kwargs(self, resource_server_url: str) -> dict[str, Any]:
        """`auth_server_provider=self, auth=...` for `Elicitation.server(name, **kwargs)` / `MCPServer(...)`.

        With an `auth_server_provider` the SDK both serves the authorization-server endpoints and verifies
        bearer tokens with `load_access_token`; the sign-in pages are added with `add_routes(server)`.
        """
        return {"auth_server_provider": self, "auth": self.auth_settings(resource_server_url)}

    def http_app(
        self, server: MCPServer | Server[Any], *, resource_server_url: str | None = None, **kwargs: Any
    ) -> Starlette:
        """`server.streamable_http_app(**kwargs)`, its OAuth metadata listing only the grants served here.

        An `MCPServer` was created with `mcp_server_kwargs()`; a lowlevel `Server` (the gateway's), which keeps no
        settings, gets them here for its MCP endpoint `resource_server_url`, and its custom routes as
        `custom_starlette_routes=`. The SDK's metadata always lists `refresh_token`, which this server never
        issues, and a client plans its sessions on what the metadata says. That route comes before any custom
        route, so it is replaced here.
        """
        if isinstance(server, MCPServer):
            settings = server.settings.auth
            if settings is None or str(settings.issuer_url).rstrip("/") != self.issuer:
                raise ValueError(
                    "the server does not use this authorization server: create it with mcp_server_kwargs()"
                )
            app = server.streamable_http_app(**kwargs)
        else:
            if resource_server_url is None:
                raise ValueError("a lowlevel server's app needs resource_server_url=, the URL of its MCP endpoint")
            settings = self.auth_settings(resource_server_url)
            app = server.streamable_http_app(
                auth=settings, auth_server_provider=self, token_verifier=ProviderTokenVerifier(self), **kwargs
            )
        metadata = build_metadata(
            settings.issuer_url,
            settings.service_documentation_url,
            settings.client_registration_options or ClientRegistrationOptions(),
            settings.revocation_options or RevocationOptions(),
        ).model_copy(update={"grant_types_supported": list(SERVED_GRANT_TYPES)})
        served = Route(
            METADATA_PATH,
            endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]),
            methods=["GET", "OPTIONS"],
        )
        for index, route in enumerate(app.router.routes):
            if isinstance(route, Route) and route.path == METADATA_PATH:
                app.router.routes[index] = served
                return app
        raise RuntimeError(f"the SDK's app serves no {METADATA_PATH} to correct")

    def routes(self) -> list[Route]:
        """`GET|POST /signin` and `POST /signout`, for the app served at the issuer's origin."""
        return [
            Route(SIGN_IN_PATH, self._sign_in_endpoint, methods=["GET", "POST"], name="elicit-signin"),
            Route(SIGN_OUT_PATH, self._sign_out_endpoint, methods=["POST"], name="elicit-signout"),
        ]

    def add_routes(self, server: RouteHost) -> None:
        """Register `routes()` as custom routes of `server` (served without bearer authorization)."""
        add_routes(server, self.routes())

    # -- the browser user (the interface of the URL-mode pages) ----------------------------------------

    def principal_of(self, request: Request) -> str | None:
        """The principal id `f"{issuer}#{username}"` of the browser's signed-in user, or None."""
        username = self._session_user(request)
        return None if username is None else self.principal_id(username)

    def principal_id(self, username: str) -> str:
        return f"{self.issuer}#{username}"

    def display_name_of(self, principal: str) -> str | None:
        """The configured display name of the user behind a principal id of this issuer, or None."""
        issuer, _, username = principal.rpartition("#")
        return self.users.display_name(username) if issuer == self.issuer else None

    def sign_in_redirect(self, request: Request) -> RedirectResponse:
        """303 to `/signin?next=<this request's path and query>`."""
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(
            f"{SIGN_IN_PATH}?{urlencode({'next': safe_next(target)})}",
            status_code=303,
            headers={"Cache-Control": "no-store"},
        )

    def switch_account_form(self, request: Request, back_to: str) -> SignOutForm | None:
        """The form that signs the browser's user out and opens the sign-in page, whose sign-in leads to `back_to`
        (a same-origin path, else "/"); None when nobody is signed in."""
        token = self._sign_out_token(request)
        if token is None:
            return None
        then = f"{SIGN_IN_PATH}?{urlencode({'next': safe_next(back_to)})}"
        return SignOutForm(SIGN_OUT_PATH, {"csrf": token, "next": then})

    def _session_user(self, request: Request) -> str | None:
        claims = self._session(request)
        if claims is None:
            return None
        username = claims["sub"]
        return username if isinstance(username, str) and username in self.users else None

    def _session(self, request: Request) -> dict[str, Any] | None:
        cookie = request.cookies.get(self.session_cookie)
        return self._decode(_SESSION, cookie, ("sub",)) if cookie else None

    def _session_id(self, request: Request) -> str:
        claims = self._session(request)
        return "" if claims is None else str(claims["jti"])

    # -- OAuthAuthorizationServerProvider: clients --------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        metadata = await self._async_store.oauth_client_get(client_id)
        if metadata is None:
            return None
        try:
            return OAuthClientInformationFull.model_validate(metadata)
        except ValidationError:
            log.warning("the stored registration of OAuth client %s is not valid client metadata", client_id)
            return None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        for uri in client_info.redirect_uris or ():
            problem = _redirect_uri_problem(uri)
            if problem:
                raise RegistrationError("invalid_redirect_uri", f"redirect URI {uri}: {problem}")
        if not client_info.redirect_uris:
            raise RegistrationError("invalid_redirect_uri", "at least one redirect URI is required")
        metadata: JSONObject = client_info.model_dump(mode="json", exclude_none=True)
        try:
            await self._async_store.oauth_client_put(client_info.client_id, metadata)
        except AlreadyExists:
            raise RegistrationError("invalid_client_metadata", "client id clash; register again") from None
        log.info("registered OAuth client %s (%s)", client_info.client_id, client_info.client_name or "unnamed")

    # -- authorization: the sign-in page finishes what /authorize starts -----------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        scopes = params.scopes if params.scopes is not None else (client.scope or "").split()
        if not params.code_challenge:
            raise AuthorizeError("invalid_request", "a PKCE code_challenge is required")
        request = self._encode(
            _REQUEST,
            {
                "client_id": client.client_id,
                "redirect_uri": str(params.redirect_uri),
                "explicit": params.redirect_uri_provided_explicitly,
                "state": params.state,
                "scope": scopes,
                "code_challenge": params.code_challenge,
                "resource": params.resource,
            },
            self.request_ttl,
        )
        return f"{self.issuer}{SIGN_IN_PATH}?{urlencode({'request': request})}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        claims = self._decode(_CODE, authorization_code, ("sub", "client_id", "redirect_uri", "code_challenge"))
        if claims is None or claims["client_id"] != client.client_id:
            return None
        try:
            return AuthorizationCode(
                code=authorization_code,
                scopes=_string_list(claims.get("scope")),
                expires_at=float(claims["exp"]),
                client_id=claims["client_id"],
                code_challenge=claims["code_challenge"],
                redirect_uri=AnyUrl(claims["redirect_uri"]),
                redirect_uri_provided_explicitly=bool(claims.get("explicit", True)),
                resource=claims.get("resource"),
                subject=claims["sub"],
            )
        except (ValidationError, TypeError, ValueError):
            return None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        claims = self._decode(_CODE, authorization_code.code, ("sub", "client_id"))
        if claims is None or claims["client_id"] != client.client_id:
            raise TokenError("invalid_grant", "authorization code is invalid or expired")
        jti = claims["jti"]
        spent = await self._async_store.consume_token(_CODE_LEDGER + jti, expires_at=_utc(claims["exp"]))
        if spent is Consumption.ALREADY_USED:
            # RFC 6749 §4.1.2: a code used twice revokes what it was first exchanged for.
            await self._revoke_jti(jti, int(claims["exp"]) + self.access_ttl)  # outlives any token it gave
            log.warning(
                "authorization code %s of client %s was presented again; its token is revoked", jti, client.client_id
            )
            raise TokenError("invalid_grant", "authorization code was already used")
        username = claims["sub"]
        if username not in self.users:
            raise TokenError("invalid_grant", "the user of this authorization code is no longer configured")
        resource = claims.get("resource")
        return self._access_token(username, client.client_id, _string_list(claims.get("scope")), resource, jti)

    def issue_access_token(
        self, username: str, client_id: str, scopes: Sequence[str], *, resource: str | None = None
    ) -> OAuthToken:
        """An access token for `username` through the client `client_id`, as a code exchange issues it.

        For a subclass that adds a grant this server lacks (rotating refresh tokens, say): the tokens it
        issues are then ones this server and every page it signs accept, and revoke, like its own.
        """
        return self._access_token(username, client_id, list(scopes), resource, None)

    def _access_token(
        self, username: str, client_id: str, scopes: list[str], resource: str | None, jti: str | None
    ) -> OAuthToken:
        access: dict[str, Any] = {"sub": username, "client_id": client_id, "scope": " ".join(scopes)}
        if resource:
            access["aud"] = resource
        token = self._encode(_ACCESS, access, self.access_ttl, jti=jti)
        scope = " ".join(scopes) or None
        return OAuthToken(access_token=token, token_type="Bearer", expires_in=self.access_ttl, scope=scope)  # noqa: S106

    # -- tokens ---------------------------------------------------------------------------------------------

    async def load_access_token(self, token: str) -> AccessToken | None:
        claims = self._decode(_ACCESS, token, ("sub", "client_id"))
        if claims is None:
            return None
        username, client_id = claims["sub"], claims["client_id"]
        if not isinstance(username, str) or username not in self.users or not isinstance(client_id, str):
            return None
        if await self._async_store.token_consumed(_REVOKED_LEDGER + claims["jti"]):
            return None
        audience = claims.get("aud")
        return AccessToken(
            token=token,
            client_id=client_id,
            scopes=str(claims.get("scope") or "").split(),
            expires_at=int(claims["exp"]),
            resource=audience if isinstance(audience, str) else None,
            subject=username,
            claims={"iss": self.issuer},
        )

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        """No refresh tokens are issued: every refresh token is unknown."""
        return None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "this authorization server issues no refresh tokens")

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        if not isinstance(token, AccessToken):
            return
        claims = self._decode(_ACCESS, token.token, ())
        if claims is not None:
            await self._revoke_jti(claims["jti"], int(claims["exp"]))

    async def _revoke_jti(self, jti: str, until: int) -> None:
        # The ledger entry must outlive the token it refuses: keep it until the token's own expiry.
        await self._async_store.consume_token(_REVOKED_LEDGER + jti, expires_at=_utc(until))

    # -- JWTs -----------------------------------------------------------------------------------------------

    def _encode(self, purpose: str, claims: Mapping[str, Any], ttl: int, *, jti: str | None = None) -> str:
        now = int(self._clock())
        key = self._ring[0]
        payload = {
            **claims,
            "iss": self.issuer,
            "iat": now,
            "exp": now + ttl,
            "jti": jti or secrets.token_urlsafe(24),
        }
        return jwt.encode(
            payload, key.derived[purpose], algorithm=_ALGORITHM, headers={"kid": key.kid, "typ": _TYP[purpose]}
        )

    def _decode(self, purpose: str, token: str | None, required: Iterable[str]) -> dict[str, Any] | None:
        if not token or len(token) > 8192:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        kid = header.get("kid")
        key = self._by_kid.get(kid) if isinstance(kid, str) else None
        if key is None or header.get("alg") != _ALGORITHM or header.get("typ") != _TYP[purpose]:
            return None
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.derived[purpose],
                algorithms=[_ALGORITHM],
                options={
                    "verify_exp": False,  # checked below against this server's clock
                    "verify_iat": False,
                    "verify_nbf": False,
                    "verify_aud": False,  # the audience is the resource; the SDK's bearer backend checks it
                    "verify_iss": False,
                    "require": ["iss", "iat", "exp", "jti", *required],
                },
            )
        except jwt.PyJWTError:
            return None
        exp = claims["exp"]
        if claims["iss"] != self.issuer or not isinstance(claims["jti"], str) or not isinstance(exp, int | float):
            return None
        if exp <= self._clock():
            return None
        return claims

    def _csrf_token(self, request: Request, nonce: str, binding: str, key: _Key | None = None) -> str:
        """The form token for `binding`, under the browser's CSRF cookie `nonce` and its session (if any): a
        token minted before a sign-in, or for another session, does not verify after it."""
        signed = f"{nonce}\x00{self._session_id(request)}\x00{binding}".encode()
        return hmac.new((key or self._ring[0]).derived[_CSRF], signed, hashlib.sha256).hexdigest()

    def _csrf_ok(self, request: Request, submitted: str, binding: str) -> bool:
        nonce = request.cookies.get(self.csrf_cookie)
        if not nonce or not submitted:
            return False
        return any(hmac.compare_digest(self._csrf_token(request, nonce, binding, key), submitted) for key in self._ring)

    def _sign_out_token(self, request: Request, key: _Key | None = None) -> str | None:
        """The sign-out form's token for the browser's session, None without one: bound to the session alone, so
        any page of it may offer sign-out and no page of another site can."""
        session = self._session_id(request)
        if not session:
            return None
        return hmac.new(
            (key or self._ring[0]).derived[_CSRF], f"signout\x00{session}".encode(), hashlib.sha256
        ).hexdigest()

    def _sign_out_ok(self, request: Request, submitted: str) -> bool:
        tokens = (self._sign_out_token(request, key) for key in self._ring)
        return bool(submitted) and any(t is not None and hmac.compare_digest(t, submitted) for t in tokens)

    # -- the sign-in pages --------------------------------------------------------------------------------

    async def _sign_in_endpoint(self, request: Request) -> Response:
        if request.method == "POST":
            return await self._sign_in_post(request)
        nonce = request.cookies.get(self.csrf_cookie) or secrets.token_urlsafe(24)
        raw_request = request.query_params.get("request")
        if raw_request is not None:
            authorization = await self._authorization(raw_request)
            if isinstance(authorization, Response):
                return self._with_csrf_cookie(authorization, nonce)
            response = self._form(request, nonce, authorization=authorization)
        else:
            next_path = safe_next(request.query_params.get("next"))
            response = self._form(request, nonce, next_path=next_path, reason=await self._reason(next_path))
        return self._with_csrf_cookie(response, nonce)

    async def _reason(self, next_path: str) -> str | None:
        if self.sign_in_reason is None or next_path == "/":
            return None
        return await self._async_store.call_blocking(self.sign_in_reason, next_path)

    async def _sign_in_post(self, request: Request) -> Response:
        form = await _read_form(request)
        if form is None:
            return self._page("Sign-in refused", "<p>The form could not be read.</p>", status=400)
        raw_request = form.get("request")
        binding = f"request:{raw_request}" if raw_request is not None else f"next:{safe_next(form.get('next'))}"
        if not self._csrf_ok(request, form.get("csrf", ""), binding):
            return self._page(
                "Sign-in refused",
                "<p>This form has expired or was not sent from this site. "
                f'<a href="{SIGN_IN_PATH}">Open the sign-in page again</a>.</p>',
                status=403,
            )
        authorization = await self._authorization(raw_request) if raw_request is not None else None
        if isinstance(authorization, Response):
            return authorization
        username = form.get("username", "")
        password = form.get("password", "")
        nonce = request.cookies.get(self.csrf_cookie, "")
        # Never log what was typed as a name it is not: a password entered in the username field would end up
        # in the log.
        who = f"user {username}" if username in self.users else "an unknown user"
        address = request.client.host if request.client else "an unknown address"
        next_path = safe_next(form.get("next"))
        try:
            with self.throttle.attempt(username if _USERNAME.fullmatch(username) else "", address) as attempt:
                attempt.succeeded = await self._verify(username, password)
        except HeldBack as held:
            log.warning(
                "sign-in of %s from %s refused unchecked: the %s is held back %d s after repeated failures",
                who, address, " and the ".join(held.kinds), held.seconds,
            )  # fmt: skip
            wait = f"Too many failed sign-ins. Try again in {_duration(held.seconds)}."
            refused = self._form(
                request, nonce, authorization=authorization, next_path=next_path, error=wait, username=username
            )
            refused.status_code = 429
            refused.headers["Retry-After"] = str(held.seconds)
            return refused
        if not attempt.succeeded:
            log.info("failed sign-in of %s from %s", who, address)
            for kind, seconds in attempt.held_back.items():
                backoff = f"the {kind} is held back {seconds} s"
                log.warning("repeated failed sign-ins, the last of %s from %s: %s", who, address, backoff)
            return self._form(
                request,
                nonce,
                authorization=authorization,
                next_path=next_path,
                reason=None if authorization is not None else await self._reason(next_path),
                error=_WRONG_CREDENTIALS,
                username=username,
            )
        if authorization is None:
            response: Response = RedirectResponse(next_path, status_code=303)
        else:
            response = await self._complete_authorization(authorization, username)
        response.headers["Cache-Control"] = "no-store"
        self._set_session(response, username)
        self._with_csrf_cookie(response, secrets.token_urlsafe(24))
        log.info("%s signed in%s", username, f" for client {authorization.client.client_id}" if authorization else "")
        return response

    async def _sign_out_endpoint(self, request: Request) -> Response:
        form = await _read_form(request)
        if form is None or not self._sign_out_ok(request, form.get("csrf", "")):
            log.info("a sign-out without this session's token was refused")
            return self._page(
                "Sign-out refused",
                "<p>This form has expired or was not sent from this site. Nobody was signed out.</p>",
                status=403,
            )
        response = RedirectResponse(safe_next(form.get("next")), status_code=303, headers={"Cache-Control": "no-store"})
        response.delete_cookie(self.session_cookie, path="/", secure=self.secure_cookies, httponly=True, samesite="lax")
        return response

    async def _authorization(self, raw_request: str) -> _Authorization | Response:
        claims = self._decode(_REQUEST, raw_request, ("client_id", "redirect_uri", "code_challenge"))
        client = await self.get_client(claims["client_id"]) if claims is not None else None
        if claims is None or client is None:
            return self._page(
                "Sign-in link expired",
                "<p>This sign-in link is invalid or has expired. Go back to your application and connect again.</p>",
                status=400,
            )
        return _Authorization(raw_request, claims, client)

    async def _complete_authorization(self, authorization: _Authorization, username: str) -> Response:
        claims, client = authorization.claims, authorization.client
        redirect_uri = str(claims["redirect_uri"])
        try:
            registered = AnyUrl(redirect_uri) in (client.redirect_uris or ())
        except ValidationError:
            registered = False
        if not registered:
            # The SDK checked it in /authorize; a registration can only grow, so this is a forged request.
            log.warning("sign-in request for client %s names an unregistered redirect URI", client.client_id)
            return self._page(
                "Sign-in refused", "<p>This application's return address is not registered.</p>", status=400
            )
        code = self._encode(
            _CODE,
            {
                "sub": username,
                "client_id": client.client_id,
                "redirect_uri": redirect_uri,
                "explicit": bool(claims.get("explicit", True)),
                "scope": _string_list(claims.get("scope")),
                "code_challenge": claims["code_challenge"],
                "resource": claims.get("resource"),
            },
            self.code_ttl,
        )
        target = construct_redirect_uri(redirect_uri, code=code, state=claims.get("state"), iss=self.issuer)
        return RedirectResponse(target, status_code=302)

    async def _verify(self, username: str, password: str) -> bool:
        # scrypt takes tens of milliseconds and 16 MiB: off the event loop, a few at a time.
        if self._hashing is None:
            self._hashing = anyio.CapacityLimiter(HASHING_THREADS)
        return await anyio.to_thread.run_sync(self.users.verify, username, password, limiter=self._hashing)

    def _set_session(self, response: Response, username: str) -> None:
        response.set_cookie(
            self.session_cookie,
            self._encode(_SESSION, {"sub": username}, self.session_ttl),
            max_age=self.session_ttl,
            path="/",
            secure=self.secure_cookies,
            httponly=True,
            samesite="lax",
        )

    def _with_csrf_cookie(self, response: Response, nonce: str) -> Response:
        response.set_cookie(
            self.csrf_cookie, nonce, path="/", secure=self.secure_cookies, httponly=True, samesite="lax"
        )
        return response

    def _form(
        self,
        request: Request,
        nonce: str,
        *,
        authorization: _Authorization | None = None,
        next_path: str = "/",
        reason: str | None = None,
        error: str | None = None,
        username: str = "",
    ) -> HTMLResponse:
        where = f"<strong>{text(urlsplit(self.issuer).netloc)}</strong>"
        here = f"<strong>{text(self.server_name)}</strong> at {where}" if self.server_name else where
        if authorization is not None:
            client = authorization.client
            binding = f"request:{authorization.raw}"
            name = client_name(client.client_name) or "An application"
            redirect_host = urlsplit(str(authorization.claims["redirect_uri"])).netloc or str(
                authorization.claims["redirect_uri"]
            )
            context = (
                f'<p class="context"><strong>{text(name)}</strong> asks to use {here} as you.</p>'
                f'<p class="note">After you sign in you return to <strong>{text(redirect_host)}</strong>.</p>'
            )
            hidden = (
                f'<input type="hidden" name="request" value="{text(authorization.raw)}">'
                f'<input type="hidden" name="csrf" value="{text(self._csrf_token(request, nonce, binding))}">'
            )
        else:
            context = f'<p class="context">Sign in to {here}.</p>'
            if reason:
                context += (
                    f'<p class="note reason">{text(reason)} Once you are signed in, its page shows what it asks '
                    "and for whom.</p>"
                )
            csrf = self._csrf_token(request, nonce, f"next:{next_path}")
            hidden = (
                f'<input type="hidden" name="next" value="{text(next_path)}">'
                f'<input type="hidden" name="csrf" value="{text(csrf)}">'
            )
        alert = f'<p class="error" role="alert">{text(error)}</p>' if error else ""
        current = self._session_user(request)
        sign_out_token = self._sign_out_token(request)
        signed_in = ""
        if current is not None and sign_out_token is not None:
            signed_in = (
                f'<form method="post" action="{SIGN_OUT_PATH}" class="signed-in">'
                f'<input type="hidden" name="csrf" value="{text(sign_out_token)}">'
                f'<input type="hidden" name="next" value="{text(SIGN_IN_PATH)}">'
                f"<span>Signed in as {text(self.users.display_name(current) or current)} ({text(current)}).</span> "
                '<button type="submit" class="link">Sign out</button></form>'
            )
        body = f"""<h1>Sign in</h1>
{context}
{alert}
<form method="post" action="{SIGN_IN_PATH}">
{hidden}
<label for="username">Username</label>
<input id="username" name="username" type="text" value="{text(username)}" autocomplete="username"
 autocapitalize="none" spellcheck="false" maxlength="64" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<div class="actions"><button class="primary" type="submit">Sign in</button></div>
</form>
{signed_in}"""
        return self._page("Sign in", body)

    def _page(self, title: str, body: str, *, status: int = 200) -> HTMLResponse:
        return page(title, body, server=self.server_name or urlsplit(self.issuer).netloc, status=status)


@dataclass(frozen=True, slots=True)
class _Authorization:
    """A verified sign-in request: what `/authorize` asked for, and the registered client."""

    raw: str
    claims: dict[str, Any]
    client: OAuthClientInformationFull


# -- helpers ------------------------------------------------------------------------------------------------


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} seconds"
    return f"{math.ceil(seconds / 60)} minutes"


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def _string_list(value: object) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


_LOOPBACK = frozenset({"127.0.0.1", "::1", "[::1]", "localhost"})


def _redirect_uri_problem(uri: AnyUrl) -> str | None:
    """Why a redirect URI cannot be registered (RFC 6749 §3.1.2, RFC 8252 §7), or None."""
    scheme = uri.scheme.lower()
    if uri.fragment:
        return "must not have a fragment"
    if scheme in ("javascript", "data", "file", "vbscript", "about", "blob"):
        return f"the {scheme}: scheme is not allowed"
    if scheme == "http" and (uri.host or "").lower() not in _LOOPBACK:
        return "plain http is allowed only for loopback addresses; use https"
    return None


async def _read_form(request: Request) -> dict[str, str] | None:
    """A small urlencoded form, at most `MAX_FORM_BYTES`; None for anything else."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=16)
    except (UnicodeDecodeError, ValueError):
        return None
    form: dict[str, str] = {}
    for name, value in pairs:
        form.setdefault(name, value)
    return form
