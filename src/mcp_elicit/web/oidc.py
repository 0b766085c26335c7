"""Browser sign-in with an external OpenID Connect provider, for the URL-mode pages of a production deployment.

When the MCP tokens come from the organisation's identity provider (`JwksTokenVerifier`), the decision pages
must know the person at the browser by that same provider. `OidcSignIn` is the pages' `SignIn` for it: an
OpenID Connect relying party (authorization code with PKCE, S256) registered at the provider as a
confidential web client whose redirect URI is this server's `/signin/callback`. Give it to
`WebPages(sign_in=...)`; `mount_web` serves its routes (`GET /signin`, `GET /signin/callback`,
`POST /signout`).

Guarantees:

- The browser's principal is `f"{issuer}#{sub}"` (or the claim `OidcClient.subject_claim` names in place of
  `sub`) of an ID token the provider signed (a published key, an asymmetric algorithm), whose `iss` is the
  configured issuer, whose `aud` is this client, unexpired, and whose `nonce` is the one this browser's sign-in
  sent: the same string `IdentityPolicy` derives from the provider's access tokens, so a page lets through
  exactly the person its decision is bound to.
- A sign-in is bound to the browser that started it: the `state`, the PKCE verifier, the nonce and the page
  to return to travel in an HttpOnly cookie signed with the session key ring (10 minutes), never in the
  URL; a callback whose `state` is not that cookie's is refused (login CSRF), and the return page is a
  same-origin path only.
- Sessions are HS256 JWTs in an HttpOnly, SameSite=Lax cookie (Secure, `__Host-` prefixed, on https),
  signed with a key derived from the first of `session_keys` and verified with any of them, so every
  instance with the same keys knows every session; they last `session_ttl` (8 hours by default).
- Sign-out is a POST whose token is bound by HMAC to the browser's session cookie, so a page of another
  site cannot sign anyone out, and it leads to a same-origin path only. The switch of account a decision
  page offers (`switch_account_form`) signs out and starts a sign-in that asks the provider for
  `OidcClient.switch_prompt` (`prompt=login`: its sign-in form even when it has a session of its own), then
  returns to the decision.
- With `roles_claim` (set by `mount_web` from `ApproverRoles(claim=...)`), the role names that claim of the ID
  token lists (a list of strings, or one string of blank-separated names; at most `MAX_CLAIMED_ROLES`) are kept
  in the signed session at sign-in and read back by `claimed_roles` at each approver page and vote: a change of
  roles at the provider counts from the person's next sign-in.
- The provider's configuration comes from its discovery document, whose `issuer` must be the configured
  one; its keys are `PublishedKeys`, fetched and rotated as for access tokens.

Does not guarantee: single sign-out (signing out here clears this server's cookie only, a copy taken before
stays valid until it expires; the provider's session stays, and a provider that ignores `prompt` signs the
same person in again), a display name (pages name the person by the principal), or that two
sign-ins started at once in one browser both finish (the second replaces the first's cookie; the first
says to start again).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import urlencode, urlsplit

import anyio
import httpx2
import jwt
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from mcp_elicit.web.authserver import SignOutForm, safe_next
from mcp_elicit.web.html import page, text
from mcp_elicit.web.jwks import ASYMMETRIC, JwksError, PublishedKeys
from mcp_elicit.web.roles import claimed_roles

__all__ = ["OidcClient", "OidcSignIn"]

log = logging.getLogger(__name__)

SIGN_IN_PATH: Final = "/signin"
SIGN_OUT_PATH: Final = "/signout"
FLOW_TTL: Final = 600
MIN_KEY_BYTES: Final = 32
_LABEL: Final = b"mcp-elicit/web/oidc/v1/"
_FLOW, _SESSION, _SIGN_OUT = "flow", "session", "signout"
_SWITCH_PROMPTS: Final = frozenset({"login", "select_account", "consent"})
_LOOPBACK: Final = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True, slots=True)
class OidcClient:
    """This server as a client of the provider: registered there as a confidential web client."""

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    redirect_uri: str
    """This server's `/signin/callback` as browsers reach it: `https://elicit.example/signin/callback`."""
    scope: str = "openid"
    token_auth: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"  # noqa: S105
    algorithms: tuple[str, ...] = ("RS256", "PS256", "ES256", "EdDSA")
    leeway: float = 30.0
    timeout: float = 10.0
    switch_prompt: str = "login"
    """The OpenID Connect `prompt` of a sign-in that switches account: "login" (the provider's sign-in form),
    "select_account" (its account picker, for providers without "login"), or "" to send none."""
    subject_claim: str = "sub"
    """The ID token's claim naming the person, as `ExternalIdentityProvider.subject_claim` for access tokens: a
    provider with a `sub` of its own per application (Entra ID) names the person alike for both in `oid`."""

    def __post_init__(self) -> None:
        for name in ("issuer", "redirect_uri"):
            parts = urlsplit(getattr(self, name))
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise JwksError(f"{name} {getattr(self, name)!r} is not an http(s) URL")
            if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
                raise JwksError(f"{name} {getattr(self, name)} is plain http outside loopback; use https")
        if urlsplit(self.redirect_uri).path in ("", "/", SIGN_IN_PATH, SIGN_OUT_PATH):
            raise JwksError(f"redirect_uri {self.redirect_uri} needs a path of its own, e.g. /signin/callback")
        if "openid" not in self.scope.split():
            raise JwksError(f"scope {self.scope!r} lacks openid: without it the provider sends no ID token")
        unsafe = sorted(set(self.algorithms) - ASYMMETRIC)
        if unsafe or not self.algorithms:
            raise JwksError(f"algorithms {unsafe or '()'} are not asymmetric signature algorithms")
        if not self.subject_claim:
            raise JwksError("subject_claim is empty: name the claim that names the person, e.g. 'sub' or 'oid'")
        if not self.client_id or not self.client_secret:
            raise JwksError("client_id and client_secret are the ones the provider registered for this server")
        words = self.switch_prompt.split()
        if not set(words) <= _SWITCH_PROMPTS or " ".join(words) != self.switch_prompt:
            raise JwksError(
                f"switch_prompt {self.switch_prompt!r} is not made of {', '.join(sorted(_SWITCH_PROMPTS))}, or empty"
            )


@dataclass(frozen=True, slots=True)
class _Provider:
    authorization_endpoint: str
    token_endpoint: str
    keys: PublishedKeys


class OidcSignIn:
    """The URL-mode pages' `SignIn` through an external OpenID Connect provider."""

    def __init__(
        self,
        client: OidcClient,
        session_keys: Sequence[bytes],
        *,
        session_ttl: int = 8 * 3600,
        http: Callable[[], httpx2.AsyncClient] | None = None,
        clock: Callable[[], float] = time.time,
        roles_claim: str | None = None,
    ) -> None:
        """`roles_claim` names the ID token claim (`groups`, say) whose roles are kept in the session at sign-in, for
        the approver pages to read back (`ApproverRoles(claim=...)` sets it when the pages are mounted)."""
        if isinstance(session_keys, bytes | str) or not session_keys:
            raise ValueError("session_keys is a non-empty sequence of keys (bytes), the signing key first")
        for position, key in enumerate(session_keys, start=1):
            if not isinstance(key, bytes) or len(key) < MIN_KEY_BYTES:
                raise ValueError(f"session key {position} must be at least {MIN_KEY_BYTES} random bytes")
        if session_ttl <= 0:
            raise ValueError(f"session_ttl must be a positive number of seconds, got {session_ttl}")
        self.client = client
        self._keys = [
            {
                purpose: hmac.new(key, _LABEL + purpose.encode(), hashlib.sha256).digest()
                for purpose in (_FLOW, _SESSION, _SIGN_OUT)
            }
            for key in session_keys
        ]
        self.session_ttl = session_ttl
        self.roles_claim = roles_claim
        self._http = http or (lambda: httpx2.AsyncClient(timeout=client.timeout, follow_redirects=False))
        self._clock = clock
        self._provider: _Provider | None = None
        self._discovering = anyio.Lock()
        self.secure_cookies = urlsplit(client.redirect_uri).scheme == "https"
        prefix = "__Host-" if self.secure_cookies else ""
        self.session_cookie = f"{prefix}mcp-elicit-oidc-session"
        self.flow_cookie = f"{prefix}mcp-elicit-oidc-flow"
        self.callback_path = urlsplit(client.redirect_uri).path

    def __repr__(self) -> str:
        return f"OidcSignIn(issuer={self.client.issuer!r}, client_id={self.client.client_id!r})"

    def routes(self) -> list[Route]:
        return [
            Route(SIGN_IN_PATH, self._start, methods=["GET"], name="elicit-oidc-signin"),
            Route(self.callback_path, self._callback, methods=["GET"], name="elicit-oidc-callback"),
            Route(SIGN_OUT_PATH, self._sign_out, methods=["POST"], name="elicit-oidc-signout"),
        ]

    # -- the SignIn interface of the pages ----------------------------------------------------------------

    def principal_of(self, request: Request) -> str | None:
        claims = self._decode(_SESSION, request.cookies.get(self.session_cookie))
        principal = claims.get("principal") if claims is not None else None
        return principal if isinstance(principal, str) else None

    def sign_in_redirect(self, request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(
            f"{SIGN_IN_PATH}?{urlencode({'next': safe_next(target)})}",
            status_code=303,
            headers={"Cache-Control": "no-store"},
        )

    def display_name_of(self, principal: str) -> str | None:
        return None

    def switch_account_form(self, request: Request, back_to: str) -> SignOutForm | None:
        """The form that signs the browser's user out and signs someone in again at the provider (with
        `switch_prompt`), then leads to `back_to` (a same-origin path, else "/"); None when nobody is signed in."""
        session = request.cookies.get(self.session_cookie)
        if self.principal_of(request) is None or session is None:
            return None
        then = f"{SIGN_IN_PATH}?{urlencode({'next': safe_next(back_to), 'switch': '1'})}"
        return SignOutForm(SIGN_OUT_PATH, {"csrf": self._sign_out_token(self._keys[0], session), "next": then})

    def principal_id(self, subject: str) -> str:
        return f"{self.client.issuer}#{subject}"

    def claimed_roles(self, request: Request) -> frozenset[str]:
        """The roles the `roles_claim` of the person's ID token named when they signed in; none without one."""
        claims = self._decode(_SESSION, request.cookies.get(self.session_cookie))
        roles = claims.get("roles") if claims is not None and self.roles_claim is not None else None
        return frozenset(role for role in roles if isinstance(role, str)) if isinstance(roles, list) else frozenset()

    # -- the routes ------------------------------------------------------------------------------------------

    async def _start(self, request: Request) -> Response:
        provider = await self._discovered()
        if provider is None:
            return self._refusal(
                "Sign-in unavailable", "The sign-in service cannot be reached; try again shortly.", 503
            )
        state, nonce, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        query = {
            "response_type": "code",
            "client_id": self.client.client_id,
            "redirect_uri": self.client.redirect_uri,
            "scope": self.client.scope,
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        if request.query_params.get("switch") == "1" and self.client.switch_prompt:
            query["prompt"] = self.client.switch_prompt
        flow = {
            "state": state,
            "nonce": nonce,
            "verifier": verifier,
            "next": safe_next(request.query_params.get("next")),
        }
        separator = "&" if "?" in provider.authorization_endpoint else "?"
        response = RedirectResponse(
            f"{provider.authorization_endpoint}{separator}{urlencode(query)}",
            status_code=302,
            headers={"Cache-Control": "no-store"},
        )
        self._set_cookie(response, self.flow_cookie, self._encode(_FLOW, flow, FLOW_TTL), FLOW_TTL)
        return response

    async def _callback(self, request: Request) -> Response:
        flow = self._decode(_FLOW, request.cookies.get(self.flow_cookie))
        params = request.query_params
        if flow is None or not isinstance(flow.get("state"), str) or params.get("state") != flow["state"]:
            log.info("OpenID Connect callback refused: no sign-in of this browser has this state")
            return self._refusal(
                "Sign-in expired", "This sign-in was not started in this browser, or took too long. Start again.", 400
            )
        if params.get("error"):
            log.info("the provider refused a sign-in: %s", params.get("error"))
            return self._refusal("Sign-in refused", "The sign-in service refused the sign-in.", 403, clear_flow=True)
        code = params.get("code")
        provider = await self._discovered()
        if not code or provider is None:
            return self._refusal("Sign-in failed", "The sign-in did not complete. Start again.", 400, clear_flow=True)
        identity = await self._redeem(provider, code, flow)
        if identity is None:
            return self._refusal(
                "Sign-in failed", "The sign-in could not be verified. Start again.", 400, clear_flow=True
            )
        principal = self.principal_id(identity[self.client.subject_claim])
        response = RedirectResponse(
            str(flow.get("next") or "/"), status_code=303, headers={"Cache-Control": "no-store"}
        )
        response.delete_cookie(self.flow_cookie, path="/", secure=self.secure_cookies, httponly=True, samesite="lax")
        kept: dict[str, Any] = {"principal": principal}
        if self.roles_claim is not None:
            kept["roles"] = claimed_roles(identity.get(self.roles_claim))
        session = self._encode(_SESSION, kept, self.session_ttl)
        self._set_cookie(response, self.session_cookie, session, self.session_ttl)
        log.info("%s signed in through %s", principal, self.client.issuer)
        return response

    async def _sign_out(self, request: Request) -> Response:
        form = await request.form()
        session, submitted = request.cookies.get(self.session_cookie), str(form.get("csrf", ""))
        if (
            not session
            or not submitted
            or not any(hmac.compare_digest(self._sign_out_token(keys, session), submitted) for keys in self._keys)
        ):
            log.info("a sign-out without this session's token was refused")
            return self._refusal(
                "Sign-out refused", "This form has expired or was not sent from this site. Nobody was signed out.", 403
            )
        response = RedirectResponse(safe_next(form.get("next")), status_code=303, headers={"Cache-Control": "no-store"})
        response.delete_cookie(self.session_cookie, path="/", secure=self.secure_cookies, httponly=True, samesite="lax")
        return response

    async def _redeem(self, provider: _Provider, code: str, flow: dict[str, Any]) -> dict[str, Any] | None:
        """The claims of the ID token the code is redeemed for, when it is one for this sign-in."""
        client = self.client
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": client.redirect_uri,
            "code_verifier": str(flow.get("verifier", "")),
        }
        headers = {"Accept": "application/json"}
        if client.token_auth == "client_secret_basic":  # noqa: S105 (a method's name)
            headers["Authorization"] = (
                "Basic "
                + base64.b64encode(f"{_form(client.client_id)}:{_form(client.client_secret)}".encode()).decode()
            )
        else:
            data.update(client_id=client.client_id, client_secret=client.client_secret)
        try:
            async with self._http() as http:
                answer = await http.post(provider.token_endpoint, data=data, headers=headers)
            tokens = answer.json() if answer.status_code == 200 else None
        except (httpx2.HTTPError, ValueError) as error:
            log.warning("the provider's token endpoint failed: %s", type(error).__name__)
            return None
        id_token = tokens.get("id_token") if isinstance(tokens, dict) else None
        if not isinstance(id_token, str):
            log.info("the provider answered the code with %s and no ID token", answer.status_code)
            return None
        claims = await provider.keys.claims(
            id_token,
            issuer=client.issuer,
            audience=client.client_id,
            leeway=client.leeway,
            what="ID token",
            subject_claim=client.subject_claim,
        )
        if claims is None:
            return None
        if not hmac.compare_digest(str(claims.get("nonce", "")), str(flow.get("nonce", ""))):
            log.info("ID token refused: its nonce is not this sign-in's")
            return None
        return claims

    async def _discovered(self) -> _Provider | None:
        if self._provider is not None:
            return self._provider
        async with self._discovering:
            if self._provider is None:
                self._provider = await self._discover()
            return self._provider

    async def _discover(self) -> _Provider | None:
        url = f"{self.client.issuer.rstrip('/')}/.well-known/openid-configuration"
        try:
            async with self._http() as http:
                response = await http.get(url, headers={"Accept": "application/json"})
            document = response.json() if response.status_code == 200 else None
        except (httpx2.HTTPError, ValueError) as error:
            log.warning("the provider's discovery document at %s could not be read: %s", url, type(error).__name__)
            return None
        if not isinstance(document, dict) or document.get("issuer") != self.client.issuer:
            log.warning("the discovery document at %s does not name the issuer %s", url, self.client.issuer)
            return None
        endpoints = [document.get(name) for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")]
        if not all(
            isinstance(endpoint, str) and endpoint.startswith(("https://", "http://")) for endpoint in endpoints
        ):
            log.warning("the discovery document at %s lacks an endpoint", url)
            return None
        authorization, token, jwks = (str(endpoint) for endpoint in endpoints)
        keys = PublishedKeys(
            jwks,
            algorithms=self.client.algorithms,
            keys_ttl=300.0,
            refetch_interval=30.0,
            http=self._http,
            clock=self._clock,
        )
        return _Provider(authorization, token, keys)

    # -- cookies ---------------------------------------------------------------------------------------------

    @staticmethod
    def _sign_out_token(keys: dict[str, bytes], session: str) -> str:
        return hmac.new(keys[_SIGN_OUT], session.encode(), hashlib.sha256).hexdigest()

    def _encode(self, purpose: str, claims: dict[str, Any], ttl: int) -> str:
        now = int(self._clock())
        return jwt.encode({**claims, "iat": now, "exp": now + ttl, "typ": purpose}, self._keys[0][purpose], "HS256")

    def _decode(self, purpose: str, token: str | None) -> dict[str, Any] | None:
        if not token or len(token) > 4096:
            return None
        for keys in self._keys:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token, keys[purpose], algorithms=["HS256"], options={"verify_exp": False, "require": ["exp"]}
                )
            except jwt.PyJWTError:
                continue
            if (
                claims.get("typ") == purpose
                and isinstance(claims["exp"], int | float)
                and claims["exp"] > self._clock()
            ):
                return claims
            return None
        return None

    def _set_cookie(self, response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name, value, max_age=max_age, path="/", secure=self.secure_cookies, httponly=True, samesite="lax"
        )

    def _refusal(self, title: str, said: str, status: int, *, clear_flow: bool = False) -> Response:
        body = f"<h1>{text(title)}</h1><p>{text(said)}</p>"
        response = page(title, body, server=urlsplit(self.client.redirect_uri).netloc, status=status)
        if clear_flow:
            response.delete_cookie(
                self.flow_cookie, path="/", secure=self.secure_cookies, httponly=True, samesite="lax"
            )
        return response


def _form(value: str) -> str:
    """RFC 6749 §2.3.1: the client id and secret are form-urlencoded before Basic authentication."""
    return urlencode({"": value})[1:]
