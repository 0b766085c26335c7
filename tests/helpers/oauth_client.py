"""An OAuth client of the local authorization server, step by step: register, authorize with PKCE, sign in, redeem."""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import AuthorizationCodeResult

from mcp_elicit.cli.login import INITIALIZE_PROBE

CALLBACK = "http://127.0.0.1:3030/callback"
_HIDDEN = re.compile(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">')


def hidden_fields(page: str, action: str = "/signin") -> dict[str, str]:
    """The hidden inputs of the page's form posting to `action`."""
    start = page.index(f'<form method="post" action="{action}"')
    form = page[start : page.index("</form>", start)]
    return {name: html.unescape(value) for name, value in _HIDDEN.findall(form)}


def query_of(location: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


@dataclass
class Registration:
    client_id: str
    client_secret: str


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


async def register(base: str, *, redirect_uri: str = CALLBACK) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(f"{base}/register", json={"redirect_uris": [redirect_uri], "client_name": "Manual"})


async def registered(base: str) -> Registration:
    response = await register(base)
    assert response.status_code == 201, response.text
    body = response.json()
    return Registration(body["client_id"], body["client_secret"])


async def code_for(
    browser: httpx2.AsyncClient, base: str, client: Registration, challenge: str, *, username: str = "alice"
) -> str:
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": CALLBACK,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st4te",
        "scope": "mcp",
        "resource": f"{base}/mcp",
    }
    authorize = await browser.get(f"{base}/authorize", params=params)
    assert authorize.status_code == 302, authorize.text
    page = await browser.get(authorize.headers["location"])
    password = {"alice": "wonderland", "bob": "builder"}[username]
    done = await browser.post(
        f"{base}/signin", data={**hidden_fields(page.text), "username": username, "password": password}
    )
    assert done.status_code == 302, done.text
    params = query_of(done.headers["location"])
    assert params["state"] == "st4te"
    return params["code"]


async def redeem(base: str, client: Registration, code: str, verifier: str) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(
            f"{base}/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": CALLBACK,
                "client_id": client.client_id,
                "client_secret": client.client_secret,
                "code_verifier": verifier,
                "resource": f"{base}/mcp",
            },
        )


async def access_token(browser: httpx2.AsyncClient, base: str, client: Registration | None = None) -> str:
    client = client or await registered(base)
    verifier, challenge = pkce()
    response = await redeem(base, client, await code_for(browser, base, client, challenge), verifier)
    assert response.status_code == 200, response.text
    token: str = response.json()["access_token"]
    return token


async def published_issuers(base: str) -> tuple[list[str], str]:
    """What an OAuth client compares as strings: the MCP endpoint's protected-resource metadata's
    `authorization_servers`, and the `issuer` of the authorization-server metadata at the origin."""
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        resource = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        authorization = (await http.get("/.well-known/oauth-authorization-server")).json()
    return resource["authorization_servers"], authorization["issuer"]


async def mcp_status(base: str, token: str) -> int:
    """The status of an `initialize` POST to /mcp with this bearer token: 200 accepted, 401 refused."""
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/mcp",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            json=INITIALIZE_PROBE,
        )
    return response.status_code


@dataclass
class SigningInPerson:
    """The SDK OAuth client's person: follows the authorization URL in a browser (an httpx2 client with the
    server's base URL, a cookie jar and no automatic redirects), signs in on the form, and hands the code over."""

    browser: httpx2.AsyncClient
    username: str = "alice"
    password: str = "wonderland"
    pages: list[str] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        authorize = await self.browser.get(authorization_url)
        assert authorize.status_code == 302, authorize.text
        sign_in_url = authorize.headers["location"]
        assert urlsplit(sign_in_url).path == "/signin"
        page = await self.browser.get(sign_in_url)
        assert page.status_code == 200
        self.pages.append(page.text)
        form = {**hidden_fields(page.text), "username": self.username, "password": self.password}
        done = await self.browser.post("/signin", data=form)
        assert done.status_code == 302, done.text
        location = done.headers["location"]
        self.redirects.append(location)
        assert location.startswith(CALLBACK + "?")
        params = query_of(location)
        self.result = AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result
