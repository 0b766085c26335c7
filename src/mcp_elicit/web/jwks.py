"""MCP access tokens from an external identity provider, verified against its published keys (JWKS).

In production the MCP tokens usually come from the organisation's identity provider (Keycloak, Auth0, Okta,
Entra ID...), not from the local authorization server. `JwksTokenVerifier` is the SDK `TokenVerifier` for
that case: pass `verifier.mcp_server_kwargs()` to `Elicitation.server(name, ...)` and the `MCPServer`
verifies every bearer token with it and serves protected-resource metadata naming the provider, so MCP
clients find where to sign in. The principal is then `f"{iss}#{sub}"` (or the claim `subject_claim` names in
place of `sub`) and the token's client id, as `IdentityPolicy` derives it for every token.

Guarantees: a token is accepted only if it is a JWT signed by a key the provider publishes, with an
asymmetric algorithm from the configured list (never `none` or an HMAC one, so a public key cannot be
used as a shared secret), whose `iss` is exactly the configured issuer, whose `aud` names this MCP
resource, which has not expired (within `leeway`), whose `nbf` has passed, which has a subject (a non-empty
string in `subject_claim`, `sub` by default) and a client id (`client_id`, else `azp`), and which carries
every required scope (`scope`, else `scp`). Anything else is refused (the SDK answers 401), the reason going
to the log only. The keys are fetched over HTTP(S)
off the request path's critical section (one fetch at a time), kept `keys_ttl`, and fetched again early
when a token names an unknown key id (key rotation), at most once per `refetch_interval`, so forged key ids
cannot make this server hammer the provider. A provider that cannot be reached leaves the keys already
fetched in use; with none fetched yet every token is refused.

Does not guarantee: revocation before expiry (a JWT is verified offline; keep access tokens short-lived,
or use the provider's introspection endpoint instead), or anything about the browser: the URL-mode pages
sign people in with the same provider through `OidcSignIn` (`mcp_elicit.web.oidc`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

__all__ = ["ExternalIdentityProvider", "JwksTokenVerifier", "PublishedKeys"]

log = logging.getLogger(__name__)

ASYMMETRIC: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
MAX_TOKEN_BYTES: Final = 16 * 1024
MAX_JWKS_BYTES: Final = 512 * 1024
_LOOPBACK: Final = ("127.0.0.1", "::1", "localhost")


class JwksError(ValueError):
    """The provider's settings cannot be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ExternalIdentityProvider:
    """Where MCP access tokens come from and what they must say to be accepted here.

    `issuer` is compared with each token's `iss` exactly as written (mind a trailing slash: Auth0's has one);
    `audience` is this MCP endpoint as the provider puts it into `aud` (`https://elicit.example/mcp`).
    """

    issuer: str
    jwks_url: str
    audience: str
    required_scopes: tuple[str, ...] = ()
    algorithms: tuple[str, ...] = ("RS256", "PS256", "ES256", "EdDSA")
    leeway: float = 30.0
    keys_ttl: float = 300.0
    refetch_interval: float = 30.0
    timeout: float = 5.0
    subject_claim: str = "sub"
    """The claim naming the person: `sub`, or one the provider keeps alike across its applications (Entra ID's
    `oid`), so that the pages' ID tokens (`OidcClient.subject_claim`) name the same person."""

    def __post_init__(self) -> None:
        if not self.subject_claim:
            raise JwksError("subject_claim is empty: name the claim that names the person, e.g. 'sub' or 'oid'")
        for name in ("issuer", "jwks_url", "audience"):
            _check_url(name, getattr(self, name))
        if not self.algorithms:
            raise JwksError("algorithms is empty: list the provider's signing algorithms, e.g. ('RS256',)")
        unsafe = sorted(set(self.algorithms) - ASYMMETRIC)
        if unsafe:
            raise JwksError(
                f"algorithms {unsafe} are not asymmetric signature algorithms; allowed: {sorted(ASYMMETRIC)}"
            )
        if isinstance(self.required_scopes, str):
            raise JwksError("required_scopes is a tuple of scope names, not one string")
        for name in ("leeway", "keys_ttl", "refetch_interval", "timeout"):
            value = getattr(self, name)
            if value < 0 or (name != "leeway" and value == 0):
                raise JwksError(f"{name} must be a positive number of seconds, got {value}")


class JwksTokenVerifier:
    """The SDK `TokenVerifier` for JWT access tokens signed by an external identity provider."""

    def __init__(
        self,
        provider: ExternalIdentityProvider,
        *,
        http: Callable[[], httpx2.AsyncClient] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.provider = provider
        self.keys = PublishedKeys(
            provider.jwks_url,
            algorithms=provider.algorithms,
            keys_ttl=provider.keys_ttl,
            refetch_interval=provider.refetch_interval,
            http=http or (lambda: httpx2.AsyncClient(timeout=provider.timeout, follow_redirects=False)),
            clock=clock,
        )

    def __repr__(self) -> str:
        return f"JwksTokenVerifier(issuer={self.provider.issuer!r}, jwks_url={self.provider.jwks_url!r})"

    def auth_settings(self) -> AuthSettings:
        """`AuthSettings` naming the provider as this resource's authorization server."""
        return AuthSettings.model_validate(
            {
                "issuer_url": self.provider.issuer,
                "resource_server_url": self.provider.audience,
                "required_scopes": list(self.provider.required_scopes) or None,
                "validate_token_resource": True,
            }
        )

    def mcp_server_kwargs(self) -> dict[str, Any]:
        """`token_verifier=self, auth=...` for `Elicitation.server(name, **kwargs)` / `MCPServer(...)`."""
        return {"token_verifier": self, "auth": self.auth_settings()}

    async def verify_token(self, token: str) -> AccessToken | None:
        provider = self.provider
        claims = await self.keys.claims(
            token,
            issuer=provider.issuer,
            audience=provider.audience,
            leeway=provider.leeway,
            what="access token",
            subject_claim=provider.subject_claim,
        )
        if claims is None:
            return None
        subject, client_id = claims[provider.subject_claim], claims.get("client_id", claims.get("azp"))
        if not isinstance(client_id, str) or not client_id:
            log.info("access token of %s refused: no client id (client_id or azp)", subject)
            return None
        scopes = _scopes(claims)
        missing = [scope for scope in provider.required_scopes if scope not in scopes]
        if missing:
            log.info("access token of %s refused: scopes %s missing", subject, missing)
            return None
        return AccessToken(
            token=token,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(claims["exp"]),
            resource=provider.audience,
            subject=subject,
            claims={"iss": claims["iss"]},
        )


class PublishedKeys:
    """A provider's published signing keys (its JWK set), fetched when needed, and the JWTs they verify."""

    def __init__(
        self,
        jwks_url: str,
        *,
        algorithms: tuple[str, ...],
        keys_ttl: float,
        refetch_interval: float,
        http: Callable[[], httpx2.AsyncClient],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jwks_url = jwks_url
        self.algorithms = algorithms
        self._keys_ttl = keys_ttl
        self._refetch_interval = refetch_interval
        self._http = http
        self._clock = clock
        self._keys: dict[str | None, _Key] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._fetching = anyio.Lock()

    async def claims(
        self, token: str, *, issuer: str, audience: str, leeway: float, what: str, subject_claim: str = "sub"
    ) -> dict[str, Any] | None:
        """The claims of `token` if a published key signed it and it names `issuer`, `audience` and a subject (a
        non-empty string in `subject_claim`), unexpired; None otherwise, the reason logged (naming the token as
        `what`)."""
        if not token or len(token) > MAX_TOKEN_BYTES:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            log.info("%s refused: not a JWT (%s)", what, type(error).__name__)
            return None
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in self.algorithms:
            log.info("%s refused: algorithm %r is not accepted", what, algorithm)
            return None
        if kid is not None and not isinstance(kid, str):
            log.info("%s refused: its key id is not a string", what)
            return None
        key = await self._key(kid)
        if key is None:
            log.info("%s refused: the provider publishes no key %r", what, kid)
            return None
        if algorithm not in key.algorithms:
            log.info("%s refused: key %r is for %s, the token says %s", what, kid, sorted(key.algorithms), algorithm)
            return None
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.jwk.key,
                algorithms=[algorithm],
                audience=audience,
                issuer=issuer,
                leeway=leeway,
                options={"require": ["iss", "aud", "exp"], "verify_iat": False},
            )
        except jwt.PyJWTError as error:
            log.info("%s refused: %s", what, error)
            return None
        if not isinstance(claims.get(subject_claim), str) or not claims[subject_claim]:
            log.info("%s refused: no subject (claim %s)", what, subject_claim)
            return None
        return claims

    async def _key(self, kid: str | None) -> _Key | None:
        now = self._clock()
        known = self._lookup(kid)
        fresh = self._fetched_at is not None and now - self._fetched_at < self._keys_ttl
        if known is not None and fresh:
            return known
        async with self._fetching:
            known = self._lookup(kid)
            stale = self._fetched_at is None or self._clock() - self._fetched_at >= self._keys_ttl
            recently = self._attempted_at is not None and self._clock() - self._attempted_at < self._refetch_interval
            if (known is None or stale) and not recently:
                await self._fetch()
            return self._lookup(kid)

    def _lookup(self, kid: str | None) -> _Key | None:
        if kid is not None:
            return self._keys.get(kid)
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None

    async def _fetch(self) -> None:
        self._attempted_at = self._clock()
        url = self.jwks_url
        try:
            async with self._http() as http:
                response = await http.get(url, headers={"Accept": "application/json"})
            if response.status_code != 200:
                raise JwksError(f"HTTP {response.status_code}")
            if len(response.content) > MAX_JWKS_BYTES:
                raise JwksError(f"{len(response.content)} bytes, more than {MAX_JWKS_BYTES}")
            keys = _parsed_keys(json.loads(response.content), self.algorithms)
        except (httpx2.HTTPError, ValueError) as error:
            kept = f"keeping the {len(self._keys)} keys fetched before" if self._keys else "no keys to verify with"
            log.warning("the identity provider's keys at %s could not be fetched (%s); %s", url, error, kept)
            return
        self._keys = keys
        self._fetched_at = self._clock()
        log.info("fetched %d signing keys from %s", len(keys), url)


@dataclass(frozen=True, slots=True)
class _Key:
    jwk: jwt.PyJWK
    algorithms: frozenset[str]
    """What the key signs with: its own `alg` when the provider declares one, else those of its type (and
    curve). A token naming the key with another algorithm is refused before PyJWT is asked to fit the key to
    it, which it does not do for every pair (an EC key for RS256 raises a TypeError, not a PyJWTError)."""


def _parsed_keys(document: object, algorithms: tuple[str, ...]) -> dict[str | None, _Key]:
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise JwksError("not a JWK set (no keys list)")
    keys: dict[str | None, _Key] = {}
    for entry in document["keys"]:
        if not isinstance(entry, Mapping) or entry.get("use", "sig") != "sig":
            continue
        declared = entry.get("alg")
        if declared is not None and not isinstance(declared, str):
            continue  # a malformed key is skipped, never the whole set
        usable = frozenset({declared} if declared is not None else _algorithms_of_type(entry)) & set(algorithms)
        if not usable:
            continue  # an algorithm not accepted here, or a key type no accepted algorithm signs with
        try:
            key = jwt.PyJWK(dict(entry), algorithm=min(usable))
        except jwt.PyJWTError:
            continue
        kid = entry.get("kid")
        keys[kid if isinstance(kid, str) else None] = _Key(key, usable)
    return keys


def _algorithms_of_type(entry: Mapping[str, Any]) -> frozenset[str]:
    """The algorithms a key without `alg` may be used with, by its type and curve."""
    kty, crv = entry.get("kty"), entry.get("crv")
    if kty == "RSA":
        return frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
    if kty == "EC":
        curve = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}.get(str(crv))
        return frozenset({curve} if curve else ())
    if kty == "OKP":
        return frozenset({"EdDSA"})
    return frozenset()


def _scopes(claims: Mapping[str, Any]) -> list[str]:
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    if isinstance(scp, list):
        return [item for item in scp if isinstance(item, str)]
    if isinstance(scp, str):
        return scp.split()
    return []


def _check_url(name: str, url: str) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise JwksError(f"{name} {url!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise JwksError(f"{name} {url!r} is not an http(s) URL")
    if parts.scheme == "http" and host not in _LOOPBACK:
        raise JwksError(f"{name} {url} is plain http outside loopback; use https")
