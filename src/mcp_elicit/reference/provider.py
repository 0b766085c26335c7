"""A stand-in third-party OAuth 2.0 provider, for tests and the demo.

URL-mode elicitation sends the user to the MCP server's own page, which then runs a third-party OAuth flow
(authorization code + PKCE) and keeps the third-party token server-side. Tests and the demo need that third
party to be real enough to catch mistakes on our side, yet local: this module is it, a small authorization
server plus one protected resource, run as its own process on loopback over real HTTP:

    python -m mcp_elicit.reference.provider --port 9100 --client-id demo --client-secret s3cret \\
        --redirect-uri http://127.0.0.1:8000/elicit/callback --user "alice:wonderland:Alice Liddell"

It speaks the parts of RFC 6749, RFC 7636 (PKCE), RFC 6750 and RFC 8414 a client meets, and is strict where a
real provider is strict, so that a client bug shows up here rather than against GitHub or Google:

- ``GET /authorize`` checks the client and the *exact* redirect URI before anything else; a bad one gets an
  error page, never a redirect. PKCE with ``S256`` and a ``state`` are required. The user signs in
  (``POST /authorize``), then allows or denies on a consent page (``POST /authorize/consent``) whose CSRF
  token is bound to that one pending authorization and works once.
- ``POST /token`` authenticates the client (``client_secret_basic`` or ``client_secret_post``, compared in
  constant time) and redeems a code once: the first redemption attempt spends it, whatever its outcome, and
  a replayed code revokes the token issued from it (RFC 6749 §4.1.2).
- ``GET /api/me`` answers ``{"login", "name"}`` for a valid bearer token, as a user-info API would.
- ``GET /.well-known/oauth-authorization-server`` publishes the metadata.

What it deliberately is not: a production identity provider. All state (pending sign-ins, codes, tokens)
lives in memory for the life of the process; passwords are plain configuration; there are no refresh tokens,
no token introspection or revocation endpoint, no OpenID Connect, no dynamic client registration, no public
clients, no sign-in session (every authorization asks for the password again), one scope (``profile``), and
it refuses to listen anywhere but loopback.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from types import MappingProxyType
from typing import Final
from urllib.parse import unquote_plus, urlencode, urlsplit, urlunsplit

from starlette.applications import Starlette
from starlette.datastructures import FormData, ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from mcp_elicit.settings import Settings, SettingsError, variable

__all__ = ["SCOPE", "ProviderClient", "ProviderConfig", "ProviderUser", "main", "provider_app"]

SCOPE: Final = "profile"
"""The one scope there is: read the signed-in user's login and display name from ``/api/me``."""

CLIENT_SECRET_ENV: Final = variable("provider_client_secret")
WEBHOOK_SECRET_ENV: Final = variable("provider_webhook_secret")
_CHALLENGE_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_VERIFIER_CHARS: Final = _CHALLENGE_CHARS | frozenset(".~")
_NO_STORE: Final = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_PAGE_HEADERS: Final = {
    **_NO_STORE,
    # No form-action: the consent form's answer is a redirect to the client, which form-action would block.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_REALM: Final = 'realm="reference-provider"'


@dataclass(frozen=True)
class ProviderClient:
    """A registered confidential client: its secret, the redirect URIs it may use (matched exactly), a name."""

    secret: str
    redirect_uris: tuple[str, ...]
    name: str | None = None
    """Shown on the consent page; the client id when not set."""

    def __post_init__(self) -> None:
        if not self.secret:
            raise ValueError("a client needs a non-empty secret")
        if not self.redirect_uris:
            raise ValueError("a client needs at least one redirect URI")
        for uri in self.redirect_uris:
            parts = urlsplit(uri)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment or "#" in uri:
                raise ValueError(f"redirect URI {uri!r} must be an absolute http(s) URI without a fragment")


@dataclass(frozen=True)
class ProviderUser:
    """A user who can sign in: a password and the display name ``/api/me`` reports."""

    password: str
    name: str


@dataclass(frozen=True)
class ProviderConfig:
    """Everything the provider knows; times are in seconds on ``clock`` (monotonic by default)."""

    issuer: str
    """Base URL the provider is reached at, e.g. ``http://127.0.0.1:9100``; endpoints hang off its root."""
    clients: Mapping[str, ProviderClient]
    users: Mapping[str, ProviderUser]
    code_ttl: float = 60.0
    token_ttl: float = 3600.0
    sign_in_ttl: float = 600.0
    """How long a started authorization waits for sign-in and consent."""
    max_sign_in_attempts: int = 5
    """Wrong passwords allowed per authorization; the last one ends it with ``access_denied``."""
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.issuer)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError(f"issuer {self.issuer!r} must be an absolute http(s) URL without query or fragment")
        if parts.path not in ("", "/"):
            raise ValueError(f"issuer {self.issuer!r} must not have a path: the endpoints hang off its root")
        if not self.clients:
            raise ValueError("register at least one client")
        if not self.users:
            raise ValueError("configure at least one user")
        if min(self.code_ttl, self.token_ttl, self.sign_in_ttl) <= 0:
            raise ValueError("code_ttl, token_ttl and sign_in_ttl must be positive")
        if self.max_sign_in_attempts < 1:
            raise ValueError("max_sign_in_attempts must be at least 1")
        object.__setattr__(self, "issuer", self.issuer.rstrip("/"))
        object.__setattr__(self, "clients", MappingProxyType(dict(self.clients)))
        object.__setattr__(self, "users", MappingProxyType(dict(self.users)))

    def client_name(self, client_id: str) -> str:
        return self.clients[client_id].name or client_id


@dataclass
class _Pending:
    """An authorization request that passed validation, waiting for sign-in and then consent."""

    client_id: str
    redirect_uri: str
    state: str
    code_challenge: str
    scope: str
    expires_at: float
    failed_attempts: int = 0
    login: str | None = None
    csrf: str | None = None


@dataclass
class _Code:
    client_id: str
    redirect_uri: str
    code_challenge: str
    scope: str
    login: str
    expires_at: float
    spent: bool = False
    token: str | None = None
    forget_at: float = 0.0


@dataclass(frozen=True)
class _Token:
    login: str
    client_id: str
    scope: str
    expires_at: float


class _Repeated(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _TokenError(Exception):
    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


def _one(params: ImmutableMultiDict[str, str] | FormData, name: str) -> str | None:
    """A parameter that must not repeat (RFC 6749 §3.1); absent and empty are the same."""
    values = params.getlist(name)
    if len(values) > 1:
        raise _Repeated(name)
    if not values or not isinstance(values[0], str) or values[0] == "":
        return None
    return values[0]


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode("ascii")


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def _with_query(uri: str, params: Mapping[str, str]) -> str:
    """Add parameters to a redirect URI, keeping the query it already has (RFC 6749 §3.1.2)."""
    parts = urlsplit(uri)
    extra = urlencode(params)
    return urlunsplit(parts._replace(query=f"{parts.query}&{extra}" if parts.query else extra))


class _Provider:
    """The provider's in-memory state and its endpoints. One lock guards the state; no handler holds it while
    awaiting, so it only matters when the app is served from several threads."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._codes: dict[str, _Code] = {}
        self._tokens: dict[str, _Token] = {}

    # -- state ------------------------------------------------------------------------------------------------

    def _sweep(self, now: float) -> None:
        """Forget what has expired; a spent code is kept as long as the token issued from it, to revoke on replay."""
        for pending_id in [k for k, p in self._pending.items() if p.expires_at <= now]:
            del self._pending[pending_id]
        for code in [k for k, c in self._codes.items() if c.forget_at <= now]:
            del self._codes[code]
        for token in [k for k, t in self._tokens.items() if t.expires_at <= now]:
            del self._tokens[token]

    def _live_pending(self, pending_id: str | None) -> _Pending | None:
        if pending_id is None:
            return None
        now = self.config.clock()
        self._sweep(now)
        return self._pending.get(pending_id)

    # -- pages ------------------------------------------------------------------------------------------------

    def _redirect(self, redirect_uri: str, params: Mapping[str, str | None]) -> Response:
        query = {k: v for k, v in params.items() if v is not None}
        query["iss"] = self.config.issuer  # RFC 9207: tells the client which provider answered
        return RedirectResponse(_with_query(redirect_uri, query), status_code=302, headers=_NO_STORE)

    def _error_page(self, title: str, message: str, status: int) -> Response:
        body = (
            f"<h1>{escape(title)}</h1><p>{escape(message)}</p>"
            "<p class='muted'>Nothing was shared. Close this page and start again from the application.</p>"
        )
        return page_response(title, body, status)

    def _sign_in_page(
        self, pending_id: str, pending: _Pending, username: str = "", error: str | None = None
    ) -> Response:
        client = escape(self.config.client_name(pending.client_id))
        alert = f"<p class='error' role='alert'>{escape(error)}</p>" if error else ""
        body = f"""<h1>Sign in to continue to {client}</h1>{alert}
<form method="post" action="/authorize">
<input type="hidden" name="request" value="{escape(pending_id)}">
<label for="username">Username</label>
<input type="text" id="username" name="username" value="{escape(username)}" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required>
<div class="actions"><button type="submit" class="primary">Sign in</button></div>
</form>
<details><summary>Request details</summary><dl>
<dt>Client</dt><dd>{escape(pending.client_id)}</dd>
<dt>Returns to</dt><dd>{escape(pending.redirect_uri)}</dd>
<dt>Scope</dt><dd>{escape(pending.scope)}</dd>
<dt>State</dt><dd>{escape(pending.state)}</dd>
</dl></details>"""
        return page_response(f"Sign in to {self.config.client_name(pending.client_id)}", body, 200)

    def _consent_page(self, pending_id: str, pending: _Pending, login: str, csrf: str) -> Response:
        client = escape(self.config.client_name(pending.client_id))
        user = self.config.users[login]
        target = urlsplit(pending.redirect_uri)
        body = f"""<h1>{client} wants to read your profile</h1>
<p>Signed in as <strong>{escape(user.name)}</strong> ({escape(login)}).</p>
<p>Allowing shares your login and display name with {client}, and sends you back to
<strong>{escape(f"{target.scheme}://{target.netloc}")}</strong>.</p>
<form method="post" action="/authorize/consent">
<input type="hidden" name="request" value="{escape(pending_id)}">
<input type="hidden" name="csrf_token" value="{escape(csrf)}">
<div class="actions">
<button type="submit" name="action" value="allow" class="primary">Allow</button>
<button type="submit" name="action" value="deny">Deny</button>
</div>
</form>"""
        return page_response(f"Authorize {self.config.client_name(pending.client_id)}", body, 200)

    # -- endpoints --------------------------------------------------------------------------------------------

    async def authorize(self, request: Request) -> Response:
        """``GET /authorize``: check the client and its redirect URI first, then the rest, then ask to sign in."""
        query = request.query_params
        try:
            client_id = _one(query, "client_id")
            redirect_uri = _one(query, "redirect_uri")
        except _Repeated as repeated:
            return self._error_page("Invalid request", f"The parameter {repeated.name} is repeated.", 400)
        if client_id is None or client_id not in self.config.clients:
            shown = "No client_id was given." if client_id is None else f"The client {client_id!r} is not registered."
            return self._error_page("Unknown application", shown, 400)
        if redirect_uri is None or redirect_uri not in self.config.clients[client_id].redirect_uris:
            shown = "No redirect_uri was given." if redirect_uri is None else f"{redirect_uri!r} is not registered."
            return self._error_page("Invalid redirect address", f"{shown} The application cannot be sent back.", 400)
        # From here on the redirect URI is trusted: errors go back to the client (RFC 6749 §4.1.2.1).
        try:
            state = _one(query, "state")
        except _Repeated:
            return self._redirect(redirect_uri, {"error": "invalid_request", "error_description": "state is repeated"})

        def fail(error: str, description: str) -> Response:
            return self._redirect(redirect_uri, {"error": error, "error_description": description, "state": state})

        try:
            response_type = _one(query, "response_type")
            challenge = _one(query, "code_challenge")
            method = _one(query, "code_challenge_method")
            scope = _one(query, "scope")
        except _Repeated as repeated:
            return fail("invalid_request", f"{repeated.name} is repeated")
        if response_type is None:
            return fail("invalid_request", "response_type is required")
        if response_type != "code":
            return fail("unsupported_response_type", "only response_type=code is supported")
        if state is None:
            return fail("invalid_request", "state is required")
        if challenge is None:
            return fail("invalid_request", "code_challenge is required (PKCE)")
        if method != "S256":
            return fail("invalid_request", "code_challenge_method must be S256")
        if len(challenge) != 43 or not set(challenge) <= _CHALLENGE_CHARS:
            return fail("invalid_request", "code_challenge must be a base64url SHA-256 digest (43 characters)")
        requested = set((scope or SCOPE).split())
        if not requested or requested - {SCOPE}:
            return fail("invalid_scope", f"the only scope is {SCOPE}")
        pending = _Pending(
            client_id=client_id,
            redirect_uri=redirect_uri,
            state=state,
            code_challenge=challenge,
            scope=SCOPE,
            expires_at=self.config.clock() + self.config.sign_in_ttl,
        )
        pending_id = secrets.token_urlsafe(32)
        with self._lock:
            self._sweep(self.config.clock())
            self._pending[pending_id] = pending
        return self._sign_in_page(pending_id, pending)

    async def sign_in(self, request: Request) -> Response:
        """``POST /authorize``: check the credentials; show the consent page, or the sign-in page again."""
        form = await request.form()
        try:
            pending_id = _one(form, "request")
            username = _one(form, "username") or ""
            password = _one(form, "password") or ""
        except _Repeated as repeated:
            return self._error_page("Invalid request", f"The field {repeated.name} is repeated.", 400)
        with self._lock:
            pending = self._live_pending(pending_id)
            if pending_id is None or pending is None:
                return self._expired_page()
            user = self.config.users.get(username)
            # Compare against something even for an unknown user, so timing does not tell which users exist.
            matches = _same(password, user.password if user else secrets.token_urlsafe(16))
            if user is None or not matches:
                pending.failed_attempts += 1
                if pending.failed_attempts >= self.config.max_sign_in_attempts:
                    del self._pending[pending_id]
                    return self._redirect(
                        pending.redirect_uri,
                        {
                            "error": "access_denied",
                            "error_description": "too many failed sign-in attempts",
                            "state": pending.state,
                        },
                    )
                return self._sign_in_page(pending_id, pending, username, "Incorrect username or password.")
            # A new sign-in on the same request (the back button) replaces the user and the CSRF token.
            pending.login = username
            pending.csrf = secrets.token_urlsafe(32)
            return self._consent_page(pending_id, pending, username, pending.csrf)

    async def consent(self, request: Request) -> Response:
        """``POST /authorize/consent``: Allow issues a code, Deny says ``access_denied``; both end the request."""
        form = await request.form()
        try:
            pending_id = _one(form, "request")
            csrf = _one(form, "csrf_token")
            action = _one(form, "action")
        except _Repeated as repeated:
            return self._error_page("Invalid request", f"The field {repeated.name} is repeated.", 400)
        with self._lock:
            pending = self._live_pending(pending_id)
            if pending_id is None or pending is None:
                return self._expired_page()
            if pending.login is None or pending.csrf is None:
                return self._error_page("Not signed in", "Sign in before allowing or denying access.", 400)
            if csrf is None or not _same(csrf, pending.csrf):
                return self._error_page("Request refused", "The form's security token is missing or wrong.", 403)
            if action not in ("allow", "deny"):
                return self._error_page("Invalid request", "Choose Allow or Deny.", 400)
            del self._pending[pending_id]
            if action == "deny":
                return self._redirect(
                    pending.redirect_uri,
                    {"error": "access_denied", "error_description": "the user denied access", "state": pending.state},
                )
            now = self.config.clock()
            code = secrets.token_urlsafe(32)
            self._codes[code] = _Code(
                client_id=pending.client_id,
                redirect_uri=pending.redirect_uri,
                code_challenge=pending.code_challenge,
                scope=pending.scope,
                login=pending.login,
                expires_at=now + self.config.code_ttl,
                forget_at=now + self.config.code_ttl,
            )
        return self._redirect(pending.redirect_uri, {"code": code, "state": pending.state})

    def _expired_page(self) -> Response:
        return self._error_page(
            "Sign-in request expired", "This sign-in request has expired, was already used, or never existed.", 400
        )

    async def token(self, request: Request) -> Response:
        """``POST /token``: authenticate the client, then redeem the code once."""
        try:
            content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type != "application/x-www-form-urlencoded":
                raise _TokenError("invalid_request", "the body must be application/x-www-form-urlencoded")
            form = await request.form()
            try:
                client_id = self._authenticate(request, form)
                grant_type = _one(form, "grant_type")
                code = _one(form, "code")
                redirect_uri = _one(form, "redirect_uri")
                verifier = _one(form, "code_verifier")
            except _Repeated as repeated:
                raise _TokenError("invalid_request", f"{repeated.name} is repeated") from None
            if grant_type is None:
                raise _TokenError("invalid_request", "grant_type is required")
            if grant_type != "authorization_code":
                raise _TokenError("unsupported_grant_type", "only authorization_code is supported")
            if code is None or redirect_uri is None or verifier is None:
                raise _TokenError("invalid_request", "code, redirect_uri and code_verifier are required")
            if not 43 <= len(verifier) <= 128 or not set(verifier) <= _VERIFIER_CHARS:
                raise _TokenError("invalid_request", "code_verifier must be 43 to 128 unreserved characters")
            access_token, granted = self._redeem(client_id, code, redirect_uri, verifier)
        except _TokenError as error:
            headers = dict(_NO_STORE)
            status = 400
            if error.error == "invalid_client":
                status = 401
                headers["WWW-Authenticate"] = f"Basic {_REALM}"
            return JSONResponse(
                {"error": error.error, "error_description": error.description}, status_code=status, headers=headers
            )
        return JSONResponse(
            {
                "access_token": access_token,
                "token_type": "Bearer",
                "expires_in": max(1, int(self.config.token_ttl)),
                "scope": granted,
            },
            headers=_NO_STORE,
        )

    def _authenticate(self, request: Request, form: FormData) -> str:
        """The client id, once its secret checks out: HTTP Basic (RFC 6749 §2.3.1) or the body, never both."""
        body_id = _one(form, "client_id")
        body_secret = _one(form, "client_secret")
        authorization = request.headers.get("authorization")
        if authorization is not None:
            scheme, _, credentials = authorization.partition(" ")
            if scheme.lower() != "basic":
                raise _TokenError("invalid_client", "use HTTP Basic or client_secret in the body")
            if body_secret is not None:
                raise _TokenError("invalid_request", "use one client authentication method, not two")
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise _TokenError("invalid_client", "malformed HTTP Basic credentials") from None
            raw_id, colon, raw_secret = decoded.partition(":")
            if not colon:
                raise _TokenError("invalid_client", "malformed HTTP Basic credentials")
            client_id, secret = unquote_plus(raw_id), unquote_plus(raw_secret)
            if body_id is not None and body_id != client_id:
                raise _TokenError("invalid_request", "client_id in the body differs from the authenticated client")
        elif body_id is not None and body_secret is not None:
            client_id, secret = body_id, body_secret
        else:
            raise _TokenError("invalid_client", "client authentication is required")
        client = self.config.clients.get(client_id)
        # Compare even for an unknown client, so timing does not tell which clients exist.
        matches = _same(secret, client.secret if client else secrets.token_urlsafe(16))
        if client is None or not matches:
            raise _TokenError("invalid_client", "unknown client or wrong secret")
        return client_id

    def _redeem(self, client_id: str, code: str, redirect_uri: str, verifier: str) -> tuple[str, str]:
        now = self.config.clock()
        with self._lock:
            self._sweep(now)
            record = self._codes.get(code)
            if record is None:
                raise _TokenError("invalid_grant", "unknown or expired code")
            if record.spent:
                # RFC 6749 §4.1.2: deny, and revoke what was issued from this code.
                if record.token is not None:
                    self._tokens.pop(record.token, None)
                    record.token = None
                raise _TokenError("invalid_grant", "the code was already used; its token is revoked")
            # The first attempt spends the code, whatever comes of it: a code is never tried twice.
            record.spent = True
            if record.expires_at <= now:
                raise _TokenError("invalid_grant", "the code has expired")
            if record.client_id != client_id:
                raise _TokenError("invalid_grant", "the code was issued to another client")
            if record.redirect_uri != redirect_uri:
                raise _TokenError("invalid_grant", "redirect_uri differs from the authorization request")
            if not _same(_s256(verifier), record.code_challenge):
                raise _TokenError("invalid_grant", "code_verifier does not match the code_challenge (PKCE)")
            access_token = secrets.token_urlsafe(32)
            expires_at = now + self.config.token_ttl
            self._tokens[access_token] = _Token(record.login, client_id, record.scope, expires_at)
            record.token = access_token
            record.forget_at = max(record.forget_at, expires_at)
            return access_token, record.scope

    async def me(self, request: Request) -> Response:
        """``GET /api/me``: who the bearer token speaks for (RFC 6750 errors)."""
        authorization = request.headers.get("authorization")
        if authorization is None:
            # RFC 6750 §3.1: a request without credentials gets no error code.
            return _unauthorized(f"Bearer {_REALM}", "a bearer token is required")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        now = self.config.clock()
        with self._lock:
            self._sweep(now)
            record = self._tokens.get(token) if scheme.lower() == "bearer" and token else None
        if record is None:
            return _unauthorized(
                f'Bearer {_REALM}, error="invalid_token", error_description="unknown, expired or revoked token"',
                "unknown, expired or revoked token",
            )
        user = self.config.users[record.login]
        return JSONResponse({"login": record.login, "name": user.name}, headers=_NO_STORE)

    async def metadata(self, request: Request) -> Response:
        """``GET /.well-known/oauth-authorization-server`` (RFC 8414)."""
        issuer = self.config.issuer
        return JSONResponse(
            {
                "issuer": issuer,
                "authorization_endpoint": f"{issuer}/authorize",
                "token_endpoint": f"{issuer}/token",
                "response_types_supported": ["code"],
                "response_modes_supported": ["query"],
                "grant_types_supported": ["authorization_code"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                "scopes_supported": [SCOPE],
                "authorization_response_iss_parameter_supported": True,
            }
        )


def _unauthorized(challenge: str, description: str) -> Response:
    return JSONResponse(
        {"error": "invalid_token", "error_description": description},
        status_code=401,
        headers={**_NO_STORE, "WWW-Authenticate": challenge},
    )


_STYLE: Final = """
body{margin:0;padding:4rem 1rem;background:#f4f5f7;color:#1f2328;
font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;display:flex;justify-content:center}
main{box-sizing:border-box;width:100%;max-width:26rem;background:#fff;border:1px solid #d0d7de;border-radius:10px;
padding:2rem;box-shadow:0 1px 3px rgba(31,35,40,.08)}
.brand{margin:0 0 1.5rem;color:#59636e;font-size:.8125rem;letter-spacing:.02em;text-transform:uppercase}
h1{margin:0 0 1rem;font-size:1.3rem;line-height:1.3}
label{display:block;margin:.9rem 0 .3rem;font-weight:600}
input[type=text],input[type=password]{box-sizing:border-box;width:100%;padding:.55rem .65rem;font:inherit;
border:1px solid #d0d7de;border-radius:6px}
input:focus,button:focus{outline:2px solid #0969da;outline-offset:1px}
.actions{display:flex;gap:.6rem;margin-top:1.4rem}
button{padding:.55rem 1.2rem;font:inherit;font-weight:600;border:1px solid #d0d7de;border-radius:6px;
background:#f6f8fa;color:#1f2328;cursor:pointer}
button.primary{background:#1f883d;border-color:#1a7f37;color:#fff}
.error{padding:.6rem .8rem;background:#ffebe9;border:1px solid #ff8182;border-radius:6px;color:#82071e}
.muted,details{color:#59636e;font-size:.875rem}
details{margin-top:1.6rem}
dl{display:grid;grid-template-columns:auto 1fr;gap:.2rem .8rem;margin:.6rem 0 0}
dt{font-weight:600}dd{margin:0;overflow-wrap:anywhere;font-family:ui-monospace,SFMono-Regular,Menlo,monospace}
"""


def page_response(title: str, body: str, status: int) -> Response:
    """A whole page of the provider around ``body``, which the caller has already escaped."""
    document = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{_STYLE}</style>
</head>
<body><main>
<p class="brand">Reference provider &middot; for tests and demos</p>
{body}
</main></body>
</html>
"""
    return HTMLResponse(document, status_code=status, headers=_PAGE_HEADERS)


def provider_app(config: ProviderConfig, *, more: Sequence[Route] = ()) -> Starlette:
    """The provider as an ASGI app; its state lives in the returned object, for the life of the process. `more`
    routes are served beside (the stand-in payments of `mcp_elicit.reference.payments`)."""
    provider = _Provider(config)
    app = Starlette(
        routes=[
            *more,
            Route("/authorize", provider.authorize, methods=["GET"]),
            Route("/authorize", provider.sign_in, methods=["POST"]),
            Route("/authorize/consent", provider.consent, methods=["POST"]),
            Route("/token", provider.token, methods=["POST"]),
            Route("/api/me", provider.me, methods=["GET"]),
            Route("/.well-known/oauth-authorization-server", provider.metadata, methods=["GET"]),
        ]
    )
    app.state.provider_config = config
    return app


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _user(text: str) -> tuple[str, ProviderUser]:
    login, _, rest = text.partition(":")
    password, _, name = rest.partition(":")
    if not login or not password:
        raise argparse.ArgumentTypeError(f"expected LOGIN:PASSWORD[:DISPLAY NAME], got {text!r}")
    return login, ProviderUser(password=password, name=name or login)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mcp_elicit.reference.provider",
        description="A stand-in third-party OAuth 2.0 provider (authorization code + PKCE) on loopback, "
        "for tests and demos. Not a production identity provider: all state is in memory.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True, help="port to listen on")
    parser.add_argument("--client-id", required=True, help="the registered client's id")
    parser.add_argument(
        "--client-secret",
        help=f"the client's secret (default: ${CLIENT_SECRET_ENV}, or the file ${CLIENT_SECRET_ENV}_FILE names)",
    )
    parser.add_argument("--client-name", help="name shown on the consent page (default: the client id)")
    parser.add_argument(
        "--redirect-uri", action="append", required=True, help="an exact redirect URI the client may use (repeatable)"
    )
    parser.add_argument(
        "--user",
        action="append",
        type=_user,
        required=True,
        metavar="LOGIN:PASSWORD[:NAME]",
        help="a user who can sign in (repeatable); the password cannot contain ':'",
    )
    parser.add_argument("--code-ttl", type=float, default=60.0, help="authorization code lifetime, seconds (60)")
    parser.add_argument("--token-ttl", type=float, default=3600.0, help="access token lifetime, seconds (3600)")
    parser.add_argument(
        "--webhook-url",
        help="also serve stand-in payments (mcp_elicit.reference.payments), posting their signed events here; the "
        f"signing secret is ${WEBHOOK_SECRET_ENV}",
    )
    parser.add_argument("--duplicates", type=int, default=1, help="copies of every payment event posted (1)")
    parser.add_argument("--jitter", type=float, default=0.0, help="most seconds an event copy waits first (0)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run the provider with uvicorn until interrupted."""
    import uvicorn

    parser = _parser()
    args = parser.parse_args(argv)
    if not _is_loopback(args.host):
        parser.error(f"the reference provider only listens on loopback, not on {args.host!r}")
    if not 1 <= args.port <= 65535:
        parser.error("--port must be between 1 and 65535")
    if args.client_secret is None:
        try:
            configured = Settings.read(only=["provider_client_secret"]).provider_client_secret
        except SettingsError as error:
            parser.error(str(error))
        args.client_secret = None if configured is None else configured.get_secret_value()
    if not args.client_secret:
        parser.error(f"--client-secret (or ${CLIENT_SECRET_ENV}) is required")
    host = f"[{args.host}]" if ":" in args.host else args.host
    try:
        config = ProviderConfig(
            issuer=f"http://{host}:{args.port}",
            clients={
                args.client_id: ProviderClient(args.client_secret, tuple(args.redirect_uri), name=args.client_name)
            },
            users=dict(args.user),
            code_ttl=args.code_ttl,
            token_ttl=args.token_ttl,
        )
    except ValueError as error:
        parser.error(str(error))
    more: list[Route] = []
    if args.webhook_url is not None:
        from mcp_elicit.reference.payments import PaymentsConfig, payments_routes

        try:
            webhook_secret = Settings.read(only=["provider_webhook_secret"]).provider_webhook_secret
            if webhook_secret is None:
                parser.error(f"--webhook-url needs ${WEBHOOK_SECRET_ENV}, the secret its events are signed with")
            payments = PaymentsConfig(
                args.webhook_url, webhook_secret.get_secret_value(), duplicates=args.duplicates, jitter=args.jitter
            )
        except (SettingsError, ValueError) as error:
            parser.error(str(error))
        more = payments_routes(config.issuer, {args.client_id: args.client_secret}, payments)
    print(f"reference provider: issuer {config.issuer}", file=sys.stderr, flush=True)
    uvicorn.run(provider_app(config, more=more), host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
