"""A stand-in external identity provider served over real HTTP: its JWK set, discovery document, sign-in form
and token endpoint, each of which a test can make fail or lie, and the clock the verifiers read."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

REALM = "/realms/staff"
WEB_CLIENT, WEB_SECRET = "elicit-web", "web-secret"
PROVIDER_USERS = {"alice": "wonderland", "bob": "builder", "carol": "cheshire"}
_SESSION_COOKIE = "idp-session"


@dataclass
class Provider:
    """A stand-in identity provider: its issuer URL, the keys it publishes, and how many times they were read.

    `jwks_answer`, when set, is what the JWK set URL answers instead of the keys (an outage, a lie).
    """

    issuer: str
    audience: str = ""
    published: list[Any] = field(default_factory=list)
    signing: dict[str, Any] = field(default_factory=dict)
    fetches: int = 0
    down: bool = False
    jwks_answer: Response | None = None

    def add_rsa(self, kid: str, **extra: Any) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.signing[kid] = key
        self.published.append({**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": kid, "use": "sig", **extra})

    def add_ec(self, kid: str, curve: ec.EllipticCurve | None = None, **extra: Any) -> None:
        key = ec.generate_private_key(curve or ec.SECP256R1())
        self.signing[kid] = key
        declared = {"alg": "ES256"} if curve is None else {}
        self.published.append({**json.loads(ECAlgorithm.to_jwk(key.public_key())), "kid": kid, **declared, **extra})

    def claims(self, **claims: Any) -> dict[str, Any]:
        now = int(time.time())
        body = {
            "iss": self.issuer,
            "sub": "alice",
            "aud": self.audience,
            "client_id": "desktop-app",
            "scope": "openid mcp",
            "iat": now,
            "exp": now + 300,
            **claims,
        }
        return {k: v for k, v in body.items() if v is not None}

    def token(self, kid: str | None = "k1", alg: str = "RS256", *, signer: str | None = None, **claims: Any) -> str:
        """A token naming key `kid` (none when None), signed with key `signer` (by default that same key)."""
        headers = {"kid": kid} if kid is not None else {}
        return jwt.encode(self.claims(**claims), self.signing[signer or kid or "k1"], alg, headers=headers)

    async def jwks(self, request: Request) -> Response:
        self.fetches += 1
        if self.down:
            return Response("unavailable", status_code=503)
        if self.jwks_answer is not None:
            return self.jwks_answer
        return JSONResponse({"keys": self.published})


@dataclass
class Seconds:
    """The verifier's clock, moved by the test: key caching is about time, and no test waits for it."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now


@dataclass
class OidcProvider:
    """The provider's browser side: a sign-in form at /authorize, codes redeemed once at /token for ID tokens.

    A test makes it misbehave: `discovery_answer` replaces the discovery document, `token_answer` the token
    endpoint's answer, `refuse_sign_in` sends the browser back with `error=access_denied`, `id_claims` are
    put into (None: taken out of) every ID token, `user_claims` into those of one user (a pairwise `sub`, an
    `oid`), and `discoveries` counts the discovery document's reads.
    With `remembers`, it keeps a session of its own, as real providers do: a browser signed in there is
    signed in again without the form unless the request says `prompt=login`; `prompts` lists each
    request's `prompt` ("" for none).
    """

    keys: Provider
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    wrong_nonce: bool = False
    discovery_answer: Response | None = None
    discovery_delay: float = 0.0
    token_answer: Response | None = None
    refuse_sign_in: bool = False
    id_claims: dict[str, Any] = field(default_factory=dict)
    user_claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    discoveries: int = 0
    token_forms: list[dict[str, str]] = field(default_factory=list)
    remembers: bool = False
    prompts: list[str] = field(default_factory=list)

    @property
    def issuer(self) -> str:
        return self.keys.issuer

    def routes(self) -> list[Route]:
        return [
            Route(f"{REALM}/.well-known/openid-configuration", self.discovery),
            Route(f"{REALM}/protocol/openid-connect/certs", self.keys.jwks),
            Route(f"{REALM}/protocol/openid-connect/auth", self.authorize, methods=["GET", "POST"]),
            Route(f"{REALM}/protocol/openid-connect/token", self.token, methods=["POST"]),
        ]

    def document(self, **changes: Any) -> dict[str, Any]:
        """The discovery document, with `changes` (None: a field taken out)."""
        endpoints = f"{self.issuer}/protocol/openid-connect"
        document = {
            "issuer": self.issuer,
            "authorization_endpoint": f"{endpoints}/auth",
            "token_endpoint": f"{endpoints}/token",
            "jwks_uri": f"{endpoints}/certs",
            **changes,
        }
        return {k: v for k, v in document.items() if v is not None}

    async def discovery(self, request: Request) -> Response:
        self.discoveries += 1
        if self.discovery_delay:
            await anyio.sleep(self.discovery_delay)
        return self.discovery_answer or JSONResponse(self.document())

    async def authorize(self, request: Request) -> Response:
        if request.method == "GET":
            prompt = request.query_params.get("prompt", "")
            self.prompts.append(prompt)
            known = request.cookies.get(_SESSION_COOKIE) if self.remembers else None
            if known in PROVIDER_USERS and "login" not in prompt.split():
                return self._code_for({**request.query_params, "username": str(known)})
            kept = "".join(
                f'<input type="hidden" name="{name}" value="{value}">'
                for name, value in request.query_params.items()
                if name in ("client_id", "redirect_uri", "state", "nonce", "code_challenge")
            )
            return Response(
                f'<form method="post">{kept}<input name="username"><input name="password" type="password"></form>',
                media_type="text/html",
            )
        form = {k: str(v) for k, v in (await request.form()).items()}
        if self.refuse_sign_in:
            back = f"{form['redirect_uri']}?error=access_denied&state={form['state']}"
            return Response(status_code=302, headers={"location": back})
        if form["client_id"] != WEB_CLIENT or PROVIDER_USERS.get(form["username"]) != form["password"]:
            return Response("no", status_code=403)
        signed_in = self._code_for(form)
        if self.remembers:
            signed_in.set_cookie(_SESSION_COOKIE, form["username"], path="/", httponly=True, samesite="lax")
        return signed_in

    def _code_for(self, asked: dict[str, str]) -> Response:
        """Back to the client with a code for `asked` (the authorization request and the user signed in)."""
        if asked.get("client_id") != WEB_CLIENT:
            return Response("no", status_code=403)
        code = secrets.token_urlsafe(16)
        self.codes[code] = asked
        return Response(
            status_code=302, headers={"location": f"{asked['redirect_uri']}?code={code}&state={asked['state']}"}
        )

    async def token(self, request: Request) -> Response:
        basic = "Basic " + base64.b64encode(f"{WEB_CLIENT}:{WEB_SECRET}".encode()).decode()
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_forms.append(form)
        if self.token_answer is not None:
            return self.token_answer
        asked = self.codes.pop(form.get("code", ""), None)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(form.get("code_verifier", "").encode()).digest())
        authenticated = request.headers.get("authorization") == basic or (
            form.get("client_id") == WEB_CLIENT and form.get("client_secret") == WEB_SECRET
        )
        if (
            not authenticated
            or asked is None
            or asked["redirect_uri"] != form.get("redirect_uri")
            or challenge.decode().rstrip("=") != asked["code_challenge"]
        ):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": asked["username"], "aud": WEB_CLIENT, "iat": now, "exp": now + 300}
        claims["nonce"] = "another" if self.wrong_nonce else asked["nonce"]
        claims.update(self.user_claims.get(asked["username"], {}))
        claims = {k: v for k, v in {**claims, **self.id_claims}.items() if v is not None}
        id_token = jwt.encode(claims, self.keys.signing["k1"], "RS256", headers={"kid": "k1"})
        return JSONResponse({"access_token": "opaque", "token_type": "Bearer", "id_token": id_token})


async def sign_in_at_provider(browser: httpx2.AsyncClient, url: str, user: str) -> httpx2.Response:
    """Open a page of the server in a new browser: the provider's form, signed, and the page it comes back to."""
    form = await browser.get(url, follow_redirects=True)
    assert form.status_code == 200 and '<input name="username">' in form.text, form.text
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.text))
    return await browser.post(
        str(form.url), data={**fields, "username": user, "password": PROVIDER_USERS[user]}, follow_redirects=True
    )
