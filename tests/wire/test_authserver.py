"""The local authorization server over real HTTP on loopback: the SDK's own OAuth client, sign-in pages, tokens.

Nothing is mocked: a real uvicorn serves the MCPServer with its authorization-server endpoints and our sign-in
routes; a "browser" (an httpx2 client with a cookie jar and no automatic redirects) reads and posts the real
HTML form; tokens are checked by the SDK's bearer middleware on the real `/mcp` endpoint; the store is a real
SQLite file or the machine's PostgreSQL.
"""

from __future__ import annotations

import base64
import logging
import pickle
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from mcp_elicit.cli.login import SignInStorage
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.store import AlreadyExists, Consumption, Store, open_store
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers, LocalUsersError
from mcp_elicit.web.html import HEADERS, STYLE
from tests.helpers.clock import FakeClock
from tests.helpers.http_harness import free_port, serving
from tests.helpers.oauth_client import (
    CALLBACK,
    SigningInPerson,
    access_token,
    code_for,
    hidden_fields,
    mcp_status,
    pkce,
    published_issuers,
    query_of,
    redeem,
    register,
    registered,
)
from tests.helpers.person import Person, accept
from tests.helpers.results import text
from tests.helpers.server import Counter, flow_tools

pytestmark = pytest.mark.anyio

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
STATE_KEY = b"s" * 32
USERS = LocalUsers.from_text("alice:wonderland:Alice Liddell,bob:builder:Bob <the builder>")
WRONG = "Wrong username or password."
ELSEWHERE = [
    "//evil.example/path",
    "https://evil.example/",
    "/\\evil.example",
    "\\\\evil.example",
    "/\t/evil.example",
    "javascript:alert(1)",
    "evil.example",
    "",
    "/%0a/x\r\nLocation: https://evil.example",
]
"""Values of `next` that would lead off this origin, or break a header: each becomes "/"."""


class Clock:
    """Real time plus an offset the test moves; the server's checks of its own tokens read it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class Deployment:
    issuer: str
    auth: LocalAuthorizationServer
    runtime: Elicitation
    clock: Clock
    app: Starlette

    @property
    def mcp_url(self) -> str:
        return f"{self.issuer}/mcp"

    @property
    def store(self) -> Store:
        return self.runtime.store


def whoami(auth: LocalAuthorizationServer) -> Callable[[Request], Awaitable[Response]]:
    """A page that needs a signed-in browser user, the way the URL-mode pages use the server."""

    async def page(request: Request) -> Response:
        principal = auth.principal_of(request)
        if principal is None:
            return auth.sign_in_redirect(request)
        return PlainTextResponse(principal)

    return page


def deploy(store_url: str, tmp_path: Path, port: int, *, issuer: str | None = None) -> Deployment:
    """The reference wiring: one MCPServer serving the tools, the AS endpoints and the sign-in pages."""
    clock = Clock()
    store = open_store(store_url)
    auth = LocalAuthorizationServer(issuer or f"http://127.0.0.1:{port}", USERS, store, [KEY], clock=clock)
    issuer = auth.issuer
    runtime = Elicitation(store, request_state=RequestState(keys=[STATE_KEY]))
    server = runtime.server("authz-server", **auth.mcp_server_kwargs(f"{issuer}/mcp"))
    auth.add_routes(server)
    server.custom_route("/whoami", methods=["GET"])(whoami(auth))
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    return Deployment(issuer, auth, runtime, clock, server.streamable_http_app(host="127.0.0.1"))


@pytest.fixture
def deployed(store_url: str, tmp_path: Path) -> Iterator[Deployment]:
    port = free_port()
    deployment = deploy(store_url, tmp_path, port)
    with serving(deployment.app, port):
        yield deployment
    deployment.runtime.close()


@pytest.fixture
async def browser(deployed: Deployment) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(base_url=deployed.issuer, follow_redirects=False, timeout=30) as client:
        yield client


# -- the SDK client's OAuth flow, with a person signing in through the real pages ---------------------------


def oauth_client(deployment: Deployment, person: SigningInPerson, storage: SignInStorage) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=deployment.mcp_url,
        client_metadata=OAuthClientMetadata(client_name="Test <Client>\u202e", redirect_uris=[AnyUrl(CALLBACK)]),
        storage=storage,
        redirect_handler=person.redirect,
        callback_handler=person.callback,
    )


@pytest.mark.parametrize("era", ["2026-07-28"])  # OAuth signs in the HTTP client, below any era
async def test_the_sdk_client_signs_in_and_the_decision_belongs_to_the_signed_in_user(
    deployed: Deployment, browser: httpx2.AsyncClient, era: str
) -> None:
    person, storage = SigningInPerson(browser), SignInStorage()
    async with httpx2.AsyncClient(auth=oauth_client(deployed, person, storage), timeout=30) as http:
        transport = streamable_http_client(deployed.mcp_url, http_client=http)
        async with Client(transport, mode=era, elicitation_callback=Person([accept(approve=True)])) as client:
            assert text(await client.call_tool("approve", {"scope": "prod"})) == "applied prod"

    assert storage.client_info is not None and storage.tokens is not None
    client_id = storage.client_info.client_id
    [decision] = deployed.store.list_decisions(Operator())
    assert decision.principal_id == f"{deployed.issuer}#alice"
    assert decision.client_id == client_id
    assert decision.status is DecisionStatus.ACCEPTED
    # The sign-in page named the client (escaped, the right-to-left override shown by its code point), the redirect
    # carried state and the RFC 9207 issuer.
    assert "Test &lt;Client&gt;&lt;U+202E&gt;" in person.pages[0] and "\u202e" not in person.pages[0]
    assert query_of(person.redirects[0])["iss"] == deployed.issuer
    # The registration is in the store, the token is a bearer token for the mcp scope, with no refresh token.
    stored = deployed.store.oauth_client_get(client_id)
    assert stored is not None and stored["client_name"] == "Test <Client>\u202e"
    assert storage.tokens.refresh_token is None and storage.tokens.scope == "mcp"
    verified = await deployed.auth.load_access_token(storage.tokens.access_token)
    assert verified is not None
    assert (verified.subject, verified.client_id, verified.scopes) == ("alice", client_id, ["mcp"])
    assert verified.resource == deployed.mcp_url and verified.claims == {"iss": deployed.issuer}
    # Signing in for the client also signed the browser in.
    assert (await browser.get("/whoami")).text == f"{deployed.issuer}#alice"


async def test_an_issuer_written_with_a_trailing_slash_is_published_as_the_tokens_name_it(
    store_url: str, tmp_path: Path
) -> None:
    """Clients compare the resource's `authorization_servers`, the metadata's `issuer` and the tokens' `iss` as
    strings (RFC 8414 §3.3): the configured `http://host/` is published as `http://host` in all three."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    deployment = deploy(store_url, tmp_path, port, issuer=f"{base}/")
    try:
        with serving(deployment.app, port):
            published = await published_issuers(base)
        token = deployment.auth.issue_access_token("alice", "client-a", ["mcp"], resource=f"{base}/mcp")
        verified = await deployment.auth.load_access_token(token.access_token)
    finally:
        deployment.runtime.close()
    assert deployment.issuer == base and published == ([base], base)
    assert verified is not None and verified.claims == {"iss": base}


# -- a hand-driven OAuth client, to reach what the SDK client never does (replays, revocation) ---------------


async def test_a_code_is_redeemed_once_and_a_replay_revokes_its_token(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    base = deployed.issuer
    client = await registered(base)
    verifier, challenge = pkce()
    code = await code_for(browser, base, client, challenge)
    first = await redeem(base, client, code, verifier)
    assert first.status_code == 200
    token = first.json()["access_token"]
    assert "refresh_token" not in first.json()
    assert await mcp_status(base, token) == 200

    replay = await redeem(base, client, code, verifier)
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert await mcp_status(base, token) == 401  # RFC 6749 §4.1.2: the replay revoked what the code gave


async def test_a_code_is_bound_to_its_client_and_verifier(deployed: Deployment, browser: httpx2.AsyncClient) -> None:
    base = deployed.issuer
    client, other = await registered(base), await registered(base)
    verifier, challenge = pkce()
    code = await code_for(browser, base, client, challenge)
    stolen = await redeem(base, other, code, verifier)
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"
    wrong_verifier = await redeem(base, client, code, pkce()[0])
    assert wrong_verifier.status_code == 400 and wrong_verifier.json()["error"] == "invalid_grant"
    assert (await redeem(base, client, code, verifier)).status_code == 200  # neither attempt spent it


async def test_tampered_expired_and_revoked_tokens_are_refused(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    base = deployed.issuer
    client = await registered(base)
    token = await access_token(browser, base, client)
    assert await mcp_status(base, token) == 200

    header, payload, signature = token.split(".")
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    claims = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).replace(b'"alice"', b'"bob__"')
    forged_payload = base64.urlsafe_b64encode(claims).decode().rstrip("=")
    for tampered in (f"{header}.{payload}.{flipped}", f"{header}.{forged_payload}.{signature}", token + "x"):
        assert await mcp_status(base, tampered) == 401

    # Expired: the server's clock passes the token's expiry (the SDK's own check uses real time, ours the clock).
    deployed.clock.offset = deployed.auth.access_ttl + 1
    assert await mcp_status(base, token) == 401
    deployed.clock.offset = 0
    assert await mcp_status(base, token) == 200

    async with httpx2.AsyncClient(timeout=30) as http:
        revoked = await http.post(
            f"{base}/revoke",
            data={"token": token, "client_id": client.client_id, "client_secret": client.client_secret},
        )
    assert revoked.status_code == 200
    assert await mcp_status(base, token) == 401
    assert await deployed.auth.load_access_token(token) is None


async def test_a_token_minted_in_the_past_is_expired_for_the_sdk_too(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    base = deployed.issuer
    client = await registered(base)
    _, challenge = pkce()
    code = await code_for(browser, base, client, challenge)
    # A second instance whose clock runs two hours late redeems the code: its token expired an hour ago.
    late_clock = Clock()
    late_clock.offset = -2 * 3600
    late = LocalAuthorizationServer(base, USERS, deployed.store, [KEY], clock=late_clock)
    info = await late.get_client(client.client_id)
    assert info is not None
    loaded = await late.load_authorization_code(info, code)
    assert loaded is not None and loaded.subject == "alice"
    token = (await late.exchange_authorization_code(info, loaded)).access_token
    assert await mcp_status(base, token) == 401


async def test_a_second_instance_with_the_same_keys_and_store_accepts_the_first_ones_tokens(
    deployed: Deployment, browser: httpx2.AsyncClient, store_url: str, tmp_path: Path
) -> None:
    base = deployed.issuer
    client = await registered(base)
    token = await access_token(browser, base, client)

    # Instance two: its own process state and store connection, the same public URL (as behind a load balancer).
    port = free_port()
    second = deploy(store_url, tmp_path, port, issuer=base)
    try:
        with serving(second.app, port) as second_base:
            assert await mcp_status(second_base, token) == 200
            # A code issued by one instance is redeemed at the other, and only once across both.
            verifier, challenge = pkce()
            code = await code_for(browser, base, client, challenge)
            assert (await redeem(second_base, client, code, verifier)).status_code == 200
            assert (await redeem(base, client, code, verifier)).status_code == 400
            # A revocation at one instance holds at the other.
            async with httpx2.AsyncClient(timeout=30) as http:
                await http.post(
                    f"{second_base}/revoke",
                    data={"token": token, "client_id": client.client_id, "client_secret": client.client_secret},
                )
            assert await mcp_status(base, token) == 401
    finally:
        second.runtime.close()


async def test_the_key_ring_signs_with_the_first_key_and_verifies_with_all(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    token = await access_token(browser, deployed.issuer)
    rotated = LocalAuthorizationServer(deployed.issuer, USERS, deployed.store, [OTHER_KEY, KEY])
    dropped = LocalAuthorizationServer(deployed.issuer, USERS, deployed.store, [OTHER_KEY])
    assert await rotated.load_access_token(token) is not None
    assert await dropped.load_access_token(token) is None
    other_issuer = LocalAuthorizationServer("http://localhost:9", USERS, deployed.store, [KEY])
    assert await other_issuer.load_access_token(token) is None
    only_carol = LocalAuthorizationServer(deployed.issuer, LocalUsers.from_text("carol:x"), deployed.store, [KEY])
    assert await only_carol.load_access_token(token) is None  # a user no longer configured


async def test_no_refresh_tokens(deployed: Deployment) -> None:
    client = await registered(deployed.issuer)
    info = await deployed.auth.get_client(client.client_id)
    assert info is not None
    assert await deployed.auth.load_refresh_token(info, "anything") is None
    async with httpx2.AsyncClient(timeout=30) as http:
        refused = await http.post(
            f"{deployed.issuer}/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": "anything",
                "client_id": client.client_id,
                "client_secret": client.client_secret,
            },
        )
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"


async def test_registration_refuses_unsafe_redirect_uris(deployed: Deployment) -> None:
    for uri in ("http://evil.example/cb", "javascript:alert(1)", "https://app.example/cb#frag"):
        response = await register(deployed.issuer, redirect_uri=uri)
        assert response.status_code == 400, uri
        assert response.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata")
    assert (await register(deployed.issuer, redirect_uri="https://app.example/cb")).status_code == 201
    assert (await register(deployed.issuer, redirect_uri="http://[::1]:8080/cb")).status_code == 201


# -- the sign-in pages ---------------------------------------------------------------------------------------


async def sign_in(browser: httpx2.AsyncClient, next_path: str, username: str, password: str) -> httpx2.Response:
    page = await browser.get("/signin", params={"next": next_path})
    assert page.status_code == 200
    return await browser.post("/signin", data={**hidden_fields(page.text), "username": username, "password": password})


async def test_a_wrong_password_and_an_unknown_user_get_the_same_answer(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    wrong_password = await sign_in(browser, "/elicit/abc", "alice", "not-her-password")
    unknown_user = await sign_in(browser, "/elicit/abc", "mallory", "wonderland")
    for response in (wrong_password, unknown_user):
        assert response.status_code == 200
        assert WRONG in response.text
        assert "set-cookie" not in response.headers or "mcp-elicit-session" not in response.headers["set-cookie"]
        assert response.headers["cache-control"] == "no-store"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert wrong_password.text.replace("alice", "mallory") == unknown_user.text
    assert "not-her-password" not in wrong_password.text
    assert browser.cookies.get("mcp-elicit-session") is None
    assert (await browser.get("/whoami")).status_code == 303


async def test_sign_in_sets_a_session_cookie_and_returns_to_next(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    done = await sign_in(browser, "/elicit/abc?step=2", "alice", "wonderland")
    assert done.status_code == 303
    assert done.headers["location"] == "/elicit/abc?step=2"
    cookie = next(v for k, v in done.headers.multi_items() if k == "set-cookie" and "mcp-elicit-session" in v)
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie and "Secure" not in cookie
    assert (await browser.get("/whoami")).text == f"{deployed.issuer}#alice"


@pytest.mark.parametrize("next_path", ELSEWHERE)
async def test_open_redirects_in_next_fall_back_to_the_root(browser: httpx2.AsyncClient, next_path: str) -> None:
    page = await browser.get("/signin", params={"next": next_path})
    assert hidden_fields(page.text)["next"] == "/"
    # Posting the hostile value directly (with a form token for "/") also lands on "/".
    done = await browser.post(
        "/signin",
        data={**hidden_fields(page.text), "next": next_path, "username": "alice", "password": "wonderland"},
    )
    assert done.status_code == 303 and done.headers["location"] == "/"


async def test_the_sign_in_form_refuses_posts_without_its_csrf_token(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    page = await browser.get("/signin", params={"next": "/elicit/abc"})
    fields = hidden_fields(page.text)
    credentials = {"username": "alice", "password": "wonderland"}
    missing = await browser.post("/signin", data={"next": "/elicit/abc", **credentials})
    other_target = await browser.post("/signin", data={**fields, "next": "/elicit/other", **credentials})
    async with httpx2.AsyncClient(base_url=deployed.issuer, timeout=30) as stranger:  # no CSRF cookie
        cross_site = await stranger.post("/signin", data={**fields, **credentials})
    not_a_form = await browser.post("/signin", json={**fields, **credentials})
    for refused in (missing, other_target, cross_site):
        assert refused.status_code == 403
        assert "mcp-elicit-session" not in refused.headers.get("set-cookie", "")
    assert not_a_form.status_code == 400
    assert (await browser.get("/whoami")).status_code == 303
    for shown in (page, missing, not_a_form):
        assert_one_shell(shown)


def assert_one_shell(response: httpx2.Response) -> None:
    """The sign-in pages are the decision pages' shell: its headers, its style, its brand line."""
    assert {name: response.headers[name] for name in HEADERS} == HEADERS
    assert f"<style>{STYLE}</style>" in response.text and '<p class="brand">' in response.text


@asynccontextmanager
async def browser_at(deployed: Deployment, address: str) -> AsyncIterator[httpx2.AsyncClient]:
    """A browser at `address`, as the reverse proxy on loopback reports it (X-Forwarded-For, which uvicorn trusts
    from loopback by default)."""
    headers = {"X-Forwarded-For": address}
    async with httpx2.AsyncClient(base_url=deployed.issuer, follow_redirects=False, timeout=30, headers=headers) as b:
        yield b


def retry_after(response: httpx2.Response) -> int:
    assert response.status_code == 429, response.text
    assert "Too many failed sign-ins" in response.text and "mcp-elicit-session" not in response.headers.get(
        "set-cookie", ""
    )
    return int(response.headers["retry-after"])


async def test_forty_wrong_passwords_are_held_back_after_five_and_the_right_one_with_them(
    deployed: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    async with browser_at(deployed, "203.0.113.7") as browser:
        with caplog.at_level(logging.INFO, "mcp_elicit.web.authserver"):
            tries = [await sign_in(browser, "/elicit/abc", "alice", f"guess-{n}") for n in range(40)]
        assert [t.status_code for t in tries[:5]] == [200] * 5 and all(WRONG in t.text for t in tries[:5])
        assert all(25 <= retry_after(t) <= 30 for t in tries[5:])  # 30 s from the fifth failure
        assert 25 <= retry_after(await sign_in(browser, "/elicit/abc", "alice", "wonderland")) <= 30
        assert (await browser.get("/whoami")).status_code == 303  # not signed in
        refused = tries[-1]
        assert hidden_fields(refused.text)["next"] == "/elicit/abc"  # the form stays, to try again later

        deployed.clock.offset += 31
        assert WRONG in (await sign_in(browser, "/elicit/abc", "alice", "guess-40")).text  # the sixth failure
        assert 55 <= retry_after(await sign_in(browser, "/elicit/abc", "alice", "wonderland")) <= 60  # doubled
        deployed.clock.offset += 61
        assert (await sign_in(browser, "/elicit/abc", "alice", "wonderland")).status_code == 303
        # Signing in cleared the account's count: five more failures before it is held back again.
        again = [await sign_in(browser, "/", "alice", f"typo-{n}") for n in range(6)]
        assert [t.status_code for t in again] == [200] * 5 + [429]

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[0] == (
        "repeated failed sign-ins, the last of user alice from 203.0.113.7: the account is held back 30 s"
    )
    refusal = "sign-in of user alice from 203.0.113.7 refused unchecked: the account is held back"
    assert sum(refusal in w for w in warnings) == 35 + 1 + 1 + 1  # each refusal: the 40, then one per phase
    assert not any("guess" in r.getMessage() or "wonderland" in r.getMessage() for r in caplog.records)


async def test_an_account_is_held_back_from_everywhere_and_an_address_for_every_account(
    deployed: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        browser_at(deployed, "203.0.113.7") as guesser,
        browser_at(deployed, "198.51.100.2") as elsewhere,
        browser_at(deployed, "192.0.2.3") as sprayer,
        browser_at(deployed, "192.0.2.4") as neighbour,
    ):
        for n in range(5):
            assert WRONG in (await sign_in(guesser, "/", "alice", f"guess-{n}")).text
        retry_after(await sign_in(elsewhere, "/", "alice", "wonderland"))  # the account, from any address
        assert (await sign_in(elsewhere, "/", "bob", "builder")).status_code == 303
        assert (await sign_in(guesser, "/", "bob", "builder")).status_code == 303  # 5 of 20 for the address

        # An unknown account is held back the same way, so the back-off tells nobody which accounts exist.
        for n in range(5):
            assert WRONG in (await sign_in(neighbour, "/", "mallory", f"guess-{n}")).text
        retry_after(await sign_in(neighbour, "/", "mallory", "anything"))

        # One guess at each of twenty accounts from one address: the address is held back, for every account.
        with caplog.at_level(logging.WARNING, "mcp_elicit.web.authserver"):
            for n in range(20):
                assert WRONG in (await sign_in(sprayer, "/", f"user{n}", "password1")).text
            assert 25 <= retry_after(await sign_in(sprayer, "/", "bob", "builder")) <= 30
        assert (await sign_in(neighbour, "/", "bob", "builder")).status_code == 303
    assert (
        caplog.records[-1]
        .getMessage()
        .startswith("sign-in of user bob from 192.0.2.3 refused unchecked: the address is held back")
    )
    assert "from 192.0.2.3: the address is held back 30 s" in caplog.records[-2].getMessage()


async def test_parallel_attempts_are_counted_as_they_start(deployed: Deployment) -> None:
    """Forty wrong passwords sent at once: no more than the count has room for are checked."""
    async with browser_at(deployed, "203.0.113.9") as browser:
        pages = [await browser.get("/signin", params={"next": "/"}) for _ in range(40)]

        async def attempt(page: httpx2.Response, n: int) -> httpx2.Response:
            data = {**hidden_fields(page.text), "username": "bob", "password": f"guess-{n}"}
            return await browser.post("/signin", data=data)

        answers: list[httpx2.Response] = []

        async def collect(page: httpx2.Response, n: int) -> None:
            answers.append(await attempt(page, n))

        async with anyio.create_task_group() as group:
            for n, page in enumerate(pages):
                group.start_soon(collect, page, n)
    statuses = [a.status_code for a in answers]
    assert (len(statuses), statuses.count(200), statuses.count(429)) == (40, 5, 35)


async def test_signing_in_replaces_the_csrf_cookie_and_the_old_one_is_refused(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    planted, host = "planted-before-sign-in", urlsplit(deployed.issuer).hostname or ""
    browser.cookies.set("mcp-elicit-csrf", planted, domain=host)
    page = await browser.get("/signin", params={"next": "/elicit/abc"})
    assert (
        browser.cookies.get("mcp-elicit-csrf", domain=host) == planted
    )  # a cookie already there is used before sign-in
    before = hidden_fields(page.text)
    done = await browser.post("/signin", data={**before, "username": "alice", "password": "wonderland"})
    assert done.status_code == 303
    rotated = browser.cookies.get("mcp-elicit-csrf", domain=host)
    assert rotated and rotated != planted
    cookie = next(v for k, v in done.headers.multi_items() if k == "set-cookie" and "mcp-elicit-csrf" in v)
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie

    credentials = {"username": "bob", "password": "builder"}
    assert (await browser.post("/signin", data={**before, **credentials})).status_code == 403
    browser.cookies.set("mcp-elicit-csrf", planted, domain=host)  # planted again: its tokens were minted for no session
    assert (await browser.post("/signin", data={**before, **credentials})).status_code == 403
    assert (await browser.get("/whoami")).text == f"{deployed.issuer}#alice"

    browser.cookies.set("mcp-elicit-csrf", rotated, domain=host)
    signed_in_page = await browser.get("/signin")
    out = await browser.post("/signout", data=hidden_fields(signed_in_page.text, "/signout"))
    assert out.status_code == 303
    assert (await browser.get("/whoami")).status_code == 303


async def test_principal_of_and_sign_in_redirect(deployed: Deployment, browser: httpx2.AsyncClient) -> None:
    anonymous = await browser.get("/whoami", params={"x": "1"})
    assert anonymous.status_code == 303
    assert anonymous.headers["location"] == "/signin?" + urlencode({"next": "/whoami?x=1"})

    await sign_in(browser, "/whoami", "bob", "builder")
    assert (await browser.get("/whoami")).text == f"{deployed.issuer}#bob"

    # Tampered: one character of the signature changed.
    session = browser.cookies.get("mcp-elicit-session")
    assert session is not None
    head, body, signature = session.split(".")
    tampered = f"{head}.{body}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}"
    async with httpx2.AsyncClient(base_url=deployed.issuer, follow_redirects=False, timeout=30) as other:
        other.cookies.set("mcp-elicit-session", tampered)
        assert (await other.get("/whoami")).status_code == 303
        other.cookies.set("mcp-elicit-session", session)  # the genuine cookie works from anywhere until it expires
        assert (await other.get("/whoami")).status_code == 200

    # Expired: the server's clock passes the session's lifetime.
    deployed.clock.offset = deployed.auth.session_ttl + 1
    assert (await browser.get("/whoami")).status_code == 303
    deployed.clock.offset = 0

    # Signed out: the cookie is cleared (the form on the sign-in page carries the CSRF token).
    page = await browser.get("/signin")
    assert "Signed in as Bob &lt;the builder&gt; (bob)" in page.text
    out = await browser.post("/signout", data=hidden_fields(page.text, "/signout"))
    assert out.status_code == 303
    assert (await browser.get("/whoami")).status_code == 303
    assert (await browser.post("/signout", data={})).status_code == 403


async def test_a_sign_out_without_this_sessions_token_signs_nobody_out(deployed: Deployment) -> None:
    async with (
        httpx2.AsyncClient(base_url=deployed.issuer, timeout=30) as alice,
        httpx2.AsyncClient(base_url=deployed.issuer, timeout=30) as bob,
    ):
        await sign_in(alice, "/whoami", "alice", "wonderland")
        await sign_in(bob, "/whoami", "bob", "builder")
        alices = hidden_fields((await alice.get("/signin")).text, "/signout")
        bobs = hidden_fields((await bob.get("/signin")).text, "/signout")
        assert alices["csrf"] != bobs["csrf"]
        # The sign-in form's own token (double-submit cookie) is not a sign-out token.
        sign_in_token = hidden_fields((await alice.get("/signin")).text)["csrf"]
        for refused in ({}, {"next": "/"}, {"csrf": "forged"}, {"csrf": bobs["csrf"]}, {"csrf": sign_in_token}):
            answer = await alice.post("/signout", data=refused)
            assert answer.status_code == 403 and "Nobody was signed out" in answer.text, refused
            assert "set-cookie" not in answer.headers
        assert (await bob.post("/signout", data=alices)).status_code == 403
        assert (await alice.get("/whoami")).text == f"{deployed.issuer}#alice"
        assert (await bob.get("/whoami")).text == f"{deployed.issuer}#bob"
        # A token is its session's: once alice signs in anew, the one of her former session is refused.
        await sign_in(alice, "/whoami", "alice", "wonderland")
        assert (await alice.post("/signout", data=alices)).status_code == 403
        assert (await alice.get("/whoami")).text == f"{deployed.issuer}#alice"


@pytest.mark.parametrize("elsewhere", ELSEWHERE)
async def test_a_sign_out_and_the_switch_of_account_lead_to_same_origin_paths_only(
    deployed: Deployment, browser: httpx2.AsyncClient, elsewhere: str
) -> None:
    await sign_in(browser, "/whoami", "bob", "builder")
    session = browser.cookies.get("mcp-elicit-session")
    assert session is not None
    form = deployed.auth.switch_account_form(request_with_cookie("mcp-elicit-session", session), elsewhere)
    assert form is not None and form.action == "/signout" and form.fields["next"] == "/signin?next=%2F"
    out = await browser.post("/signout", data={"csrf": form.fields["csrf"], "next": elsewhere})
    assert out.status_code == 303 and out.headers["location"] == "/"
    assert (await browser.get("/whoami")).status_code == 303
    assert deployed.auth.switch_account_form(request_with_cookie("other", "x"), "/whoami") is None  # nobody signed in


def request_with_cookie(name: str, value: str) -> Request:
    return Request(
        {
            "type": "http",
            "method": "GET",
            "path": "/elicit/abc",
            "query_string": b"",
            "headers": [(b"cookie", f"{name}={value}".encode())],
        }
    )


async def test_a_session_of_a_user_removed_from_the_configuration_is_no_session(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    await sign_in(browser, "/", "bob", "builder")
    session = browser.cookies.get("mcp-elicit-session")
    assert session is not None
    request = request_with_cookie("mcp-elicit-session", session)
    assert deployed.auth.principal_of(request) == f"{deployed.issuer}#bob"
    without_bob = LocalAuthorizationServer(deployed.issuer, LocalUsers.from_text("alice:x"), deployed.store, [KEY])
    assert without_bob.principal_of(request) is None
    other_keys = LocalAuthorizationServer(deployed.issuer, USERS, deployed.store, [OTHER_KEY])
    assert other_keys.principal_of(request) is None
    # A session cookie is not an access token, nor the other way round (each kind has its own derived key).
    assert await deployed.auth.load_access_token(session) is None
    token = await access_token(browser, deployed.issuer)
    assert deployed.auth.principal_of(request_with_cookie("mcp-elicit-session", token)) is None


async def test_an_authorization_sign_in_page_escapes_and_rejects_bad_requests(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    assert (await browser.get("/signin", params={"request": "not-a-token"})).status_code == 400
    client = await registered(deployed.issuer)
    _, challenge = pkce()
    authorize = await browser.get(
        "/authorize",
        params={
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": CALLBACK,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": '"><script>alert(1)</script>',
        },
    )
    location = authorize.headers["location"]
    page = await browser.get(location)
    assert page.status_code == 200
    assert "<script>" not in page.text and "127.0.0.1:3030" in page.text
    # The request is signed: changing it is refused; so is a wrong password (the form is shown again).
    fields = hidden_fields(page.text)
    forged = {**fields, "request": fields["request"][:-3] + "abc", "username": "alice", "password": "wonderland"}
    assert (await browser.post("/signin", data=forged)).status_code == 403  # its CSRF token no longer matches
    wrong = await browser.post("/signin", data={**fields, "username": "alice", "password": "nope"})
    assert wrong.status_code == 200 and WRONG in wrong.text
    assert hidden_fields(wrong.text)["request"] == fields["request"]
    # An expired request is refused even with a valid form token.
    deployed.clock.offset = deployed.auth.request_ttl + 1
    expired = await browser.post("/signin", data={**fields, "username": "alice", "password": "wonderland"})
    assert expired.status_code == 400
    deployed.clock.offset = 0
    done = await browser.post("/signin", data={**fields, "username": "alice", "password": "wonderland"})
    assert done.status_code == 302 and query_of(done.headers["location"])["state"] == '"><script>alert(1)</script>'


async def test_a_request_naming_an_unregistered_redirect_uri_never_gets_a_code(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    # The SDK's /authorize checks the redirect URI; the provider is called directly here, as a bug or a
    # forged request would, and the sign-in completion checks again.
    client = await registered(deployed.issuer)
    info = await deployed.auth.get_client(client.client_id)
    assert info is not None
    params = AuthorizationParams(
        state="s",
        scopes=["mcp"],
        code_challenge=pkce()[1],
        redirect_uri=AnyUrl("https://evil.example/cb"),
        redirect_uri_provided_explicitly=True,
    )
    page = await browser.get(await deployed.auth.authorize(info, params))
    assert page.status_code == 200 and "evil.example" in page.text  # the page shows where it would go
    done = await browser.post(
        "/signin", data={**hidden_fields(page.text), "username": "alice", "password": "wonderland"}
    )
    assert done.status_code == 400 and "location" not in done.headers


async def test_an_https_issuer_sets_secure_host_prefixed_cookies(store_url: str, tmp_path: Path) -> None:
    port = free_port()
    deployment = deploy(store_url, tmp_path, port, issuer="https://auth.example")
    try:
        with serving(deployment.app, port) as base:
            async with httpx2.AsyncClient(base_url=base, follow_redirects=False, timeout=30) as http:
                page = await http.get("/signin", params={"next": "/x"})
                csrf_cookie = page.cookies.get("__Host-mcp-elicit-csrf")
                assert csrf_cookie is not None and "Secure" in page.headers["set-cookie"]
                done = await http.post(
                    "/signin",
                    data={**hidden_fields(page.text), "username": "alice", "password": "wonderland"},
                    headers={"Cookie": f"__Host-mcp-elicit-csrf={csrf_cookie}"},
                )
    finally:
        deployment.runtime.close()
    assert done.status_code == 303
    cookie = next(v for k, v in done.headers.multi_items() if k == "set-cookie" and "session" in v)
    assert cookie.startswith("__Host-mcp-elicit-session=")
    assert "Secure" in cookie and "HttpOnly" in cookie and "Path=/" in cookie
    session = cookie.split(";")[0].split("=", 1)[1]
    principal = deployment.auth.principal_of(request_with_cookie("__Host-mcp-elicit-session", session))
    assert principal == "https://auth.example#alice"


# -- configuration ---------------------------------------------------------------------------------------------


def test_users_from_text_keep_only_salted_hashes() -> None:
    users = LocalUsers.from_text(" alice:wonderland:Alice Liddell , bob:builder , carol:p@ss w0rd:Carol: the Third")
    assert users.usernames == ["alice", "bob", "carol"]
    assert (users.display_name("alice"), users.display_name("bob")) == ("Alice Liddell", "bob")
    assert users.display_name("carol") == "Carol: the Third"
    assert users.verify("alice", "wonderland") and users.verify("carol", "p@ss w0rd")
    assert not users.verify("alice", "builder") and not users.verify("mallory", "wonderland")
    assert not users.verify("Alice", "wonderland")
    # What the object holds goes wherever it is pickled (a worker process, a dump): never a password.
    assert "wonderland" not in repr(users) and b"wonderland" not in pickle.dumps(users)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("", "no users configured"),
        ("alice", "entry 1 is not username:password"),
        ("alice:", "empty password"),
        ("alice:s3cret-one,,bob:x", "entry 2 is empty"),
        ("alice:s3cret-one,alice:s3cret-two", "configured twice"),
        ("al ice:s3cret-one", "invalid username"),
        ("-alice:s3cret-one", "invalid username"),
        ("alice#admin:s3cret-one", "invalid username"),
    ],
)
def test_bad_user_configuration_is_a_clear_error_without_the_password(config: str, message: str) -> None:
    with pytest.raises(LocalUsersError, match=message) as raised:
        LocalUsers.from_text(config)
    assert "s3cret" not in str(raised.value)


def test_users_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_ELICIT_USERS", raising=False)
    with pytest.raises(LocalUsersError, match="MCP_ELICIT_USERS is not set"):
        LocalUsers.from_env()
    monkeypatch.setenv("MCP_ELICIT_USERS", "alice:wonderland:Alice")
    assert LocalUsers.from_env().usernames == ["alice"]
    with pytest.raises(LocalUsersError, match="MCP_ELICIT_USERS: entry 1"):
        LocalUsers.from_env({"MCP_ELICIT_USERS": "alice"})


def test_bad_server_configuration_is_refused(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        for issuer, keys, error in [
            ("http://127.0.0.1:1", [b"short"], "at least 32"),
            ("http://127.0.0.1:1", [], "non-empty"),
            ("http://127.0.0.1:1", b"k" * 32, "non-empty sequence"),
            ("http://127.0.0.1:1", [KEY, KEY], "given twice"),
            ("http://auth.example", [KEY], "HTTPS"),
            ("https://auth.example/tenant", [KEY], "has a path"),
            ("not a url", [KEY], "not an http"),
        ]:
            with pytest.raises(ValueError, match=error):
                LocalAuthorizationServer(issuer, USERS, store, keys)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="access_ttl"):
            LocalAuthorizationServer("http://127.0.0.1:1", USERS, store, [KEY], access_ttl=0)
        server = LocalAuthorizationServer("https://Auth.Example:443/", USERS, store, [KEY])
        assert server.issuer == "https://auth.example"
        assert "k" * 32 not in repr(server)
    finally:
        store.close()


async def test_refresh_tokens_are_unsupported(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        server = LocalAuthorizationServer("http://127.0.0.1:1", USERS, store, [KEY])
        info = OAuthClientInformationFull(client_id="c", redirect_uris=[AnyUrl(CALLBACK)])
        with pytest.raises(TokenError) as raised:
            await server.exchange_refresh_token(info, RefreshToken(token="r", client_id="c", scopes=[]), [])
        assert raised.value.error == "unsupported_grant_type"
    finally:
        store.close()


# -- the store methods the server relies on (both engines) ------------------------------------------------------


def test_oauth_clients_round_trip_and_are_never_overwritten(store: Store) -> None:
    metadata: dict[str, Any] = {"client_id": "c1", "redirect_uris": [CALLBACK], "client_name": "Zoë", "n": 1}
    assert store.oauth_client_get("c1") is None
    store.oauth_client_put("c1", metadata)
    assert store.oauth_client_get("c1") == metadata
    with pytest.raises(AlreadyExists):
        store.oauth_client_put("c1", {**metadata, "client_name": "Mallory"})
    assert store.oauth_client_get("c1") == metadata
    with pytest.raises(ValueError, match="non-empty"):
        store.oauth_client_put("", metadata)


def test_token_consumed_sees_ledger_entries_until_a_sweep_purges_them(store: Store, clock: FakeClock) -> None:
    assert store.token_consumed("t1") is False
    assert store.consume_token("t1", expires_at=clock() + timedelta(minutes=5)) is Consumption.FIRST
    assert store.token_consumed("t1") is True
    assert store.token_consumed("t2") is False
    clock.advance(timedelta(minutes=6))
    assert store.sweep_expired().tokens == 1
    assert store.token_consumed("t1") is False


# -- what reaches the provider methods past the SDK's own checks ----------------------------------------------


def test_users_given_as_a_mapping_are_checked_as_the_text_is() -> None:
    with pytest.raises(LocalUsersError, match="no users configured"):
        LocalUsers({})
    with pytest.raises(LocalUsersError, match="invalid username '-alice'"):
        LocalUsers({"-alice": ("wonderland", "")})
    with pytest.raises(LocalUsersError, match="user 'alice' has an empty password"):
        LocalUsers({"alice": ("", "Alice")})
    assert LocalUsers({"alice": ("wonderland", "  ")}).display_name("alice") == "alice"


def test_a_key_that_is_text_and_a_server_made_without_this_authorization_server_are_refused(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        with pytest.raises(TypeError, match="signing key 2 is str, not bytes"):
            LocalAuthorizationServer("http://127.0.0.1:1", USERS, store, [KEY, "o" * 32])  # type: ignore[list-item]
        auth = LocalAuthorizationServer("http://127.0.0.1:1", USERS, store, [KEY])
        runtime = Elicitation(store, request_state=RequestState(keys=[STATE_KEY]))
        with pytest.raises(ValueError, match="create it with mcp_server_kwargs"):
            auth.http_app(runtime.server("no-auth"))
        other = LocalAuthorizationServer("http://127.0.0.1:2", USERS, store, [KEY])
        with pytest.raises(ValueError, match="create it with mcp_server_kwargs"):
            auth.http_app(runtime.server("other-auth", **other.mcp_server_kwargs("http://127.0.0.1:2/mcp")))
    finally:
        store.close()


async def test_a_sign_in_post_that_is_not_a_small_urlencoded_form_is_refused_unread(
    browser: httpx2.AsyncClient,
) -> None:
    form = "application/x-www-form-urlencoded"
    refused = {
        "json": await browser.post("/signin", json={"username": "alice", "password": "wonderland"}),
        "oversized": await browser.post(
            "/signin", content=b"username=alice&password=" + b"w" * (16 * 1024), headers={"content-type": form}
        ),
        "not utf-8": await browser.post("/signin", content=b"username=\xff\xfe", headers={"content-type": form}),
    }
    for why, response in refused.items():
        assert response.status_code == 400 and "The form could not be read." in response.text, why
        assert "set-cookie" not in response.headers or "session" not in response.headers["set-cookie"], why


async def test_provider_methods_refuse_unknown_clients_codes_of_other_clients_and_removed_users(
    deployed: Deployment, browser: httpx2.AsyncClient
) -> None:
    auth, base = deployed.auth, deployed.issuer
    assert await auth.get_client("never-registered") is None
    with pytest.raises(RegistrationError) as uriless:  # the SDK lets a client without redirect URIs through
        await auth.register_client(OAuthClientInformationFull(client_id="uriless", redirect_uris=None))
    assert uriless.value.error == "invalid_redirect_uri" and await auth.get_client("uriless") is None
    deployed.store.oauth_client_put("mangled", {"client_id": "mangled", "redirect_uris": "not a list"})
    assert await auth.get_client("mangled") is None
    client = await registered(base)
    info = await auth.get_client(client.client_id)
    assert info is not None
    params = AuthorizationParams(
        state=None, scopes=None, code_challenge="", redirect_uri=AnyUrl(CALLBACK), redirect_uri_provided_explicitly=True
    )
    with pytest.raises(AuthorizeError) as unchallenged:
        await auth.authorize(info, params)
    assert unchallenged.value.error == "invalid_request"

    code = await auth.load_authorization_code(info, await code_for(browser, base, client, pkce()[1]))
    assert code is not None
    other = OAuthClientInformationFull(client_id="other", redirect_uris=[AnyUrl(CALLBACK)])
    with pytest.raises(TokenError) as stolen:
        await auth.exchange_authorization_code(other, code)
    assert stolen.value.error == "invalid_grant"
    # Another instance on the same store and keys whose configuration no longer has alice.
    without_alice = LocalAuthorizationServer(base, LocalUsers.from_text("bob:builder"), deployed.store, [KEY])
    with pytest.raises(TokenError) as removed:
        await without_alice.exchange_authorization_code(info, code)
    assert removed.value.error == "invalid_grant" and "no longer configured" in (removed.value.error_description or "")


async def test_revocation_takes_access_tokens_only_and_ignores_what_this_server_did_not_sign(
    deployed: Deployment,
) -> None:
    auth = deployed.auth
    issued = auth.issue_access_token("alice", "some-client", ["mcp"])  # no resource: a token for any audience here
    assert issued.scope == "mcp"
    token = await auth.load_access_token(issued.access_token)
    assert token is not None and token.subject == "alice" and token.resource is None
    await auth.revoke_token(RefreshToken(token=issued.access_token, client_id="some-client", scopes=["mcp"]))
    await auth.revoke_token(AccessToken(token="not-signed-here", client_id="some-client", scopes=["mcp"]))
    assert await auth.load_access_token(issued.access_token) is not None  # neither revoked it
    await auth.revoke_token(token)
    assert await auth.load_access_token(issued.access_token) is None
    assert await auth.load_access_token("") is None
    assert await auth.load_access_token("e" * 8193) is None
