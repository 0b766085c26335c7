"""`mount_web` on a server of one's own, and MCP tokens from an external identity provider (`JwksTokenVerifier`).

Real parts: the server over streamable HTTP on loopback (uvicorn), the client kit over HTTP with a token from
the local authorization server, httpx2 as the person's browser; for the external provider, an in-test
provider serving its JWK set over HTTP and signing tokens with real RSA / EC keys, verified by the SDK's
bearer middleware through `JwksTokenVerifier`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx2
import jwt
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.routing import Route

from mcp_elicit.client import ElicitingClient, Http, ScriptedHandler
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import Accepted, Elicitation, Fallback, Flow, RequestState
from mcp_elicit.store import Store, open_store
from mcp_elicit.web import (
    ApiKeyEntry,
    ExternalIdentityProvider,
    JwksTokenVerifier,
    LocalAuthorizationServer,
    LocalUsers,
    OidcClient,
    OidcSignIn,
    WebPages,
    mount_web,
)
from mcp_elicit.web.jwks import JwksError
from tests.helpers.http_harness import free_port, serving
from tests.helpers.identity_provider import WEB_CLIENT, WEB_SECRET, OidcProvider, Provider, Seconds, sign_in_at_provider
from tests.helpers.oauth_client import access_token, mcp_status
from tests.helpers.pages_site import hidden
from tests.helpers.results import error_text, text

pytestmark = pytest.mark.anyio

USERS = "alice:wonderland:Alice Liddell,bob:builder:Bob"


def build_tools(elicitation: Elicitation) -> None:
    @elicitation.tool(fallback=Fallback.WEB)
    async def book(flow: Flow, city: str) -> str:
        seats = await flow.ask(f"How many seats to {city}?", int, key="seats")
        if isinstance(seats, Accepted):
            return f"{flow.principal.principal_id} booked {seats.data} seats to {city}"
        return "nothing booked"


@dataclass
class Mounted:
    base: str
    store: Store
    elicitation: Elicitation
    server: MCPServer


@contextmanager
def mounted(store_url: str) -> Iterator[Mounted]:
    """A server of one's own: tools, the local authorization server, and everything else in one `mount_web`."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"m" * 32]), public_base_url=base)
    auth = LocalAuthorizationServer(base, LocalUsers.from_text(USERS), store, signing_keys=[b"a" * 32])
    server = elicitation.server("own-server", **auth.mcp_server_kwargs(f"{base}/mcp"))
    mount_web(server, elicitation, WebPages(sign_in=auth, page_key=b"p" * 32, title="Own server"))
    build_tools(elicitation)
    try:
        with serving(auth.http_app(server), port):
            yield Mounted(base, store, elicitation, server)
    finally:
        store.close()


@pytest.fixture
def site(store_url: str) -> Iterator[Mounted]:
    with mounted(store_url) as served:
        yield served


async def test_one_call_serves_sign_in_pages_and_health_and_the_web_answer_reaches_the_retry(site: Mounted) -> None:
    async with httpx2.AsyncClient(timeout=30) as app_sign_in:
        token = await access_token(app_sign_in, site.base)
    async with httpx2.AsyncClient(timeout=30) as browser:
        nobody = ScriptedHandler([], modes=())
        async with ElicitingClient(Http(f"{site.base}/mcp", bearer_token=token), nobody) as client:
            first = await client.call_tool("book", {"city": "Oslo"})
        found = re.search(r"answer at (\S+) \(open until", error_text(first))
        assert first.is_error and found, error_text(first)
        url = found.group(1)
        [decision] = site.store.list_decisions(Operator())
        assert url == f"{site.base}/elicit/{decision.elicitation_id}"

        # The decision page sends an unknown browser to the mounted sign-in, which says which tool waits.
        unknown = await browser.get(url, follow_redirects=False)
        assert unknown.status_code == 303 and unknown.headers["location"].startswith("/signin?next=")
        sign_in_page = await browser.get(f"{site.base}{unknown.headers['location']}")
        assert "The tool book is waiting for you to answer a question." in sign_in_page.text
        signed = await browser.post(
            f"{site.base}/signin",
            data={**_hidden_form(sign_in_page.text), "username": "alice", "password": "wonderland"},
            follow_redirects=False,
        )
        assert signed.status_code == 303 and signed.headers["location"] == f"/elicit/{decision.elicitation_id}"
        page = await browser.get(url)
        assert page.status_code == 200 and "How many seats to Oslo?" in page.text and "Own server" in page.text
        done = await browser.post(
            f"{url}/answer", data={"csrf": hidden(page.text, "csrf"), "action": "accept", "f.value": "3"}
        )
        assert done.status_code == 200 and "Done" in done.text

        async with ElicitingClient(Http(f"{site.base}/mcp", bearer_token=token), nobody) as client:
            retried = await client.call_tool("book", {"city": "Oslo"})
        assert text(retried) == f"{site.base}#alice booked 3 seats to Oslo"
        [answered] = site.store.list_decisions(Operator())
        assert answered.status is DecisionStatus.ACCEPTED and answered.content == {"value": 3}

        assert (await browser.get(f"{site.base}/healthz")).json() == {"status": "ok"}
        ready = await browser.get(f"{site.base}/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"


def _hidden_form(html: str) -> dict[str, str]:
    return {name: value.replace("&amp;", "&") for name, value in re.findall(r'name="(\w+)" value="([^"]*)"', html)}


def test_mount_web_refuses_what_would_fail_on_a_first_click(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        auth = LocalAuthorizationServer(
            "http://127.0.0.1:9", LocalUsers.from_text(USERS), store, signing_keys=[b"a" * 32]
        )
        no_base = Elicitation(store, request_state=RequestState(keys=[b"m" * 32]))
        server = no_base.server("x")
        with pytest.raises(ValueError, match="public_base_url"):
            mount_web(server, no_base, WebPages(sign_in=auth, page_key=b"p" * 32))
        elicitation = Elicitation(
            store, request_state=RequestState(keys=[b"m" * 32]), public_base_url="http://127.0.0.1:9"
        )
        server = elicitation.server("x")
        flows = {"set_api_key": ApiKeyEntry(vault_name="k", service_title="Example")}
        with pytest.raises(ValueError, match="the flows set_api_key keep what they obtain in the vault"):
            mount_web(server, elicitation, WebPages(sign_in=auth, page_key=b"p" * 32, flows=flows))
        with pytest.raises(ValueError, match="page_key has 5 bytes; give at least 32"):
            mount_web(server, elicitation, WebPages(sign_in=auth, page_key=b"short"))
        served = [getattr(route, "path", "") for route in server.streamable_http_app().routes]
        assert "/mcp" in served and not [path for path in served if path.startswith("/elicit")]
    finally:
        store.close()


# -- an external identity provider ---------------------------------------------------------------------


@dataclass
class External:
    provider: Provider
    base: str
    store: Store
    verifier: JwksTokenVerifier
    clock: Seconds


@pytest.fixture
def external(store_url: str) -> Iterator[External]:
    idp_port, port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    provider = Provider(f"http://127.0.0.1:{idp_port}/realms/staff", audience=f"{base}/mcp")
    provider.add_rsa("k1")
    clock = Seconds()
    verifier = JwksTokenVerifier(
        ExternalIdentityProvider(
            issuer=provider.issuer,
            jwks_url=f"{provider.issuer}/protocol/openid-connect/certs",
            audience=f"{base}/mcp",
            required_scopes=("mcp",),
        ),
        clock=clock,
    )
    idp = Starlette(routes=[Route("/realms/staff/protocol/openid-connect/certs", provider.jwks)])
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"e" * 32]))
    server = elicitation.server("idp-server", **verifier.mcp_server_kwargs())

    @elicitation.tool()
    async def approve(flow: Flow, change: str) -> str:
        ok = await flow.ask(f"Approve {change}?", bool)
        return f"{flow.principal.principal_id} via {flow.principal.client_id}: {ok}"

    try:
        with serving(idp, idp_port), serving(server.streamable_http_app(), port):
            yield External(provider, base, store, verifier, clock)
    finally:
        store.close()


async def test_tokens_of_the_external_provider_bind_the_call_to_its_issuer_and_subject(external: External) -> None:
    provider = external.provider
    async with httpx2.AsyncClient(timeout=30) as http:
        metadata = (await http.get(f"{external.base}/.well-known/oauth-protected-resource/mcp")).json()
    assert metadata["authorization_servers"] == [provider.issuer]
    assert metadata["resource"] == f"{external.base}/mcp"

    handler = ScriptedHandler([{"reply": "accept", "content": {"value": True}}])
    async with ElicitingClient(Http(f"{external.base}/mcp", bearer_token=provider.token()), handler) as client:
        result = await client.call_tool("approve", {"change": "the firewall rule"})
    assert text(result) == f"{provider.issuer}#alice via desktop-app: Accepted(data=True)"
    [decision] = external.store.list_decisions(Operator())
    assert decision.principal.principal_id == f"{provider.issuer}#alice"
    assert decision.principal.client_id == "desktop-app"


async def test_every_token_the_provider_did_not_issue_for_this_resource_is_refused(external: External) -> None:
    provider, base = external.provider, external.base
    assert await mcp_status(base, provider.token()) == 200
    stranger = Provider(provider.issuer, audience=provider.audience)
    stranger.add_rsa("k1")  # the same key id, another key: a forged signature
    now = int(time.time())
    refused = {
        "another audience": provider.token(aud="https://other.example/mcp"),
        "another issuer": provider.token(iss="https://evil.example"),
        "expired": provider.token(exp=now - 120),
        "not yet valid": provider.token(nbf=now + 600),
        "no subject": provider.token(sub=None),
        "no client id": provider.token(client_id=None),
        "no mcp scope": provider.token(scope="openid"),
        "forged signature": stranger.token(),
        "unknown key id": jwt.encode({"iss": provider.issuer}, stranger.signing["k1"], "RS256", headers={"kid": "zz"}),
        "an HMAC algorithm": jwt.encode(
            {"iss": provider.issuer, "sub": "alice", "aud": f"{base}/mcp", "client_id": "c", "exp": now + 60},
            b"x" * 32,
            "HS256",
            headers={"kid": "k1"},
        ),
        "alg none": jwt.encode({"iss": provider.issuer, "sub": "alice"}, None, "none", headers={"kid": "k1"}),  # type: ignore[arg-type]
        "garbage": "not-a-jwt",
    }
    statuses = {why: await mcp_status(base, token) for why, token in refused.items()}
    assert statuses == {why: 401 for why in refused}
    azp = provider.token(client_id=None, azp="web-app", scope=None, scp=["mcp"])
    assert await mcp_status(base, azp) == 200


async def test_a_rotated_in_key_is_fetched_when_a_token_names_it_and_an_outage_keeps_the_keys(
    external: External,
) -> None:
    provider, base = external.provider, external.base
    assert await mcp_status(base, provider.token()) == 200
    assert provider.fetches == 1
    assert await mcp_status(base, provider.token()) == 200
    assert provider.fetches == 1  # cached

    provider.add_ec("k2")
    rotated = provider.token(kid="k2", alg="ES256")
    external.clock.now += 31  # past refetch_interval, within keys_ttl
    assert await mcp_status(base, rotated) == 200
    assert provider.fetches == 2
    assert await mcp_status(base, provider.token(kid="k2", signer="k1")) == 401  # k2 declares ES256 only
    for _ in range(5):  # unknown key ids do not make the server hammer the provider
        assert await mcp_status(base, provider.token(kid="k4-unknown", signer="k1")) == 401
    assert provider.fetches == 2

    provider.down = True
    external.clock.now += 301  # past keys_ttl: fetched again, which fails
    assert await mcp_status(base, provider.token()) == 200  # the keys fetched before stay in use
    assert provider.fetches == 3
    assert await mcp_status(base, rotated) == 200
    assert provider.fetches == 3


def test_provider_settings_are_checked_when_made() -> None:
    good: dict[str, Any] = {
        "issuer": "https://idp.example",
        "jwks_url": "https://idp.example/jwks",
        "audience": "https://s.example/mcp",
    }
    with pytest.raises(JwksError, match="not asymmetric"):
        ExternalIdentityProvider(**good, algorithms=("HS256",))
    with pytest.raises(JwksError, match="plain http outside loopback"):
        ExternalIdentityProvider(**{**good, "jwks_url": "http://idp.example/jwks"})
    with pytest.raises(JwksError, match="tuple of scope names"):
        ExternalIdentityProvider(**good, required_scopes="mcp")  # type: ignore[arg-type]
    with pytest.raises(JwksError, match="keys_ttl must be a positive"):
        ExternalIdentityProvider(**good, keys_ttl=0)


# -- the decision pages signed in through the same provider (OpenID Connect) ----------------------------------


@dataclass
class ExternalSite:
    provider: OidcProvider
    base: str
    store: Store


@pytest.fixture
def external_site(store_url: str) -> Iterator[ExternalSite]:
    idp_port, port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    keys = Provider(f"http://127.0.0.1:{idp_port}/realms/staff", audience=f"{base}/mcp")
    keys.add_rsa("k1")
    provider = OidcProvider(keys)
    verifier = JwksTokenVerifier(
        ExternalIdentityProvider(
            issuer=keys.issuer, jwks_url=f"{keys.issuer}/protocol/openid-connect/certs", audience=f"{base}/mcp"
        )
    )
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"o" * 32]), public_base_url=base)
    server = elicitation.server("idp-pages", **verifier.mcp_server_kwargs())
    sign_in = OidcSignIn(
        OidcClient(
            issuer=keys.issuer,
            client_id=WEB_CLIENT,
            client_secret=WEB_SECRET,
            redirect_uri=f"{base}/signin/callback",
        ),
        [b"s" * 32],
    )
    mount_web(server, elicitation, WebPages(sign_in=sign_in, page_key=b"p" * 32))
    build_tools(elicitation)
    try:
        with serving(Starlette(routes=provider.routes()), idp_port), serving(server.streamable_http_app(), port):
            yield ExternalSite(provider, base, store)
    finally:
        store.close()


async def test_the_pages_sign_in_through_the_provider_and_only_its_principal_answers(
    external_site: ExternalSite,
) -> None:
    site, provider = external_site, external_site.provider
    nobody = ScriptedHandler([], modes=())
    async with ElicitingClient(Http(f"{site.base}/mcp", bearer_token=provider.keys.token()), nobody) as client:
        first = await client.call_tool("book", {"city": "Lima"})
    found = re.search(r"answer at (\S+) \(open until", error_text(first))
    assert found, error_text(first)
    url = found.group(1)

    async with httpx2.AsyncClient(timeout=30) as intruder:
        refused = await sign_in_at_provider(intruder, url, "bob")
        assert str(refused.url) == url and refused.status_code == 403, refused.text
    [waiting] = site.store.list_decisions(Operator())
    assert waiting.status is DecisionStatus.REQUESTED

    async with httpx2.AsyncClient(timeout=30) as browser:
        page = await sign_in_at_provider(browser, url, "alice")
        assert str(page.url) == url and page.status_code == 200 and "How many seats to Lima?" in page.text
        done = await browser.post(
            f"{url}/answer", data={"csrf": hidden(page.text, "csrf"), "action": "accept", "f.value": "2"}
        )
        assert done.status_code == 200 and "Done" in done.text
    async with ElicitingClient(Http(f"{site.base}/mcp", bearer_token=provider.keys.token()), nobody) as client:
        retried = await client.call_tool("book", {"city": "Lima"})
    assert text(retried) == f"{provider.issuer}#alice booked 2 seats to Lima"
    [answered] = site.store.list_decisions(Operator())
    trail = site.store.audit_trail(answered.elicitation_id, Operator())
    assert trail[-1].actor == f"browser:{provider.issuer}#alice"


async def test_a_person_signed_in_as_another_account_switches_at_the_provider_and_comes_back_to_answer(
    external_site: ExternalSite,
) -> None:
    site, provider = external_site, external_site.provider
    provider.remembers = True  # the provider's own session would sign bob straight back in without prompt=login
    nobody = ScriptedHandler([], modes=())
    async with ElicitingClient(Http(f"{site.base}/mcp", bearer_token=provider.keys.token()), nobody) as client:
        first = await client.call_tool("book", {"city": "Quito"})
    found = re.search(r"answer at (\S+) \(open until", error_text(first))
    assert found, error_text(first)
    url, path = found.group(1), urlsplit(found.group(1)).path
    [before] = site.store.list_decisions(Operator())

    async with httpx2.AsyncClient(timeout=30) as browser:
        refused = await sign_in_at_provider(browser, url, "bob")
        assert str(refused.url) == url and refused.status_code == 403
        assert "Sign out and switch account" in refused.text and "bob" in refused.text
        assert "alice" not in refused.text and "Quito" not in refused.text
        action = re.search(r'<form method="post" action="([^"]*)">', refused.text)
        assert action and action.group(1) == "/signout"
        forged = await browser.post(
            f"{site.base}/signout", data={"csrf": "forged", "next": hidden(refused.text, "next")}
        )
        assert forged.status_code == 403 and (await browser.get(url)).status_code == 403  # still bob

        out = await browser.post(
            f"{site.base}/signout", data={"csrf": hidden(refused.text, "csrf"), "next": hidden(refused.text, "next")}
        )
        assert out.status_code == 303 and out.headers["location"] == f"/signin?{urlencode({'next': path})}&switch=1"
        assert (await browser.get(url)).status_code == 303  # signed out: the page sends the browser to sign in
        page = await sign_in_at_provider(browser, f"{site.base}{out.headers['location']}", "alice")
        assert str(page.url) == url and page.status_code == 200 and "How many seats to Quito?" in page.text
        done = await browser.post(
            f"{url}/answer", data={"csrf": hidden(page.text, "csrf"), "action": "accept", "f.value": "3"}
        )
        assert done.status_code == 200 and "Done" in done.text
    assert provider.prompts[-1] == "login"
    async with ElicitingClient(Http(f"{site.base}/mcp", bearer_token=provider.keys.token()), nobody) as client:
        retried = await client.call_tool("book", {"city": "Quito"})
    assert text(retried) == f"{provider.issuer}#alice booked 3 seats to Quito"
    [answered] = site.store.list_decisions(Operator())
    trail = site.store.audit_trail(answered.elicitation_id, Operator())
    assert [(e.actor, e.from_status, e.to_status) for e in trail if e.actor.startswith("browser:")] == [
        *[(f"browser:{provider.issuer}#bob", "requested", "requested")] * 2,  # each refusal noted, nothing moved
        (f"browser:{provider.issuer}#alice", "requested", "accepted"),
    ]
    assert before.status is DecisionStatus.REQUESTED


async def test_a_callback_not_started_in_this_browser_or_with_a_wrong_nonce_signs_nobody_in(
    external_site: ExternalSite,
) -> None:
    site, provider = external_site, external_site.provider
    async with httpx2.AsyncClient(timeout=30) as browser:
        forged = await browser.get(f"{site.base}/signin/callback", params={"code": "x", "state": "y"})
        assert forged.status_code == 400 and "Sign-in expired" in forged.text

        provider.wrong_nonce = True
        replayed = await sign_in_at_provider(browser, f"{site.base}/signin?next=/healthz", "alice")
        assert replayed.status_code == 400 and "could not be verified" in replayed.text
        assert not [c for c in browser.cookies.jar if c.name == "mcp-elicit-oidc-session"]

        provider.wrong_nonce = False
        signed = await sign_in_at_provider(browser, f"{site.base}/signin?next=/healthz", "alice")
        assert signed.status_code == 200 and str(signed.url) == f"{site.base}/healthz"
        assert [c for c in browser.cookies.jar if c.name == "mcp-elicit-oidc-session"]
