"""Hostile tokens, key sets and discovery documents against `JwksTokenVerifier` and `OidcSignIn`, over real HTTP.

The stand-in provider (tests/helpers/identity_provider) serves its JWK set, discovery document, sign-in form and
token endpoint on loopback; each test makes one part of it fail or lie and pins what the verifier or the
browser sign-in does about it: which token is refused, which page the browser sees, which cookie it keeps.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import OKPAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mcp_elicit.web import ExternalIdentityProvider, JwksTokenVerifier, OidcClient, OidcSignIn
from mcp_elicit.web.jwks import JwksError
from tests.helpers.http_harness import free_port, serving
from tests.helpers.identity_provider import (
    REALM,
    WEB_CLIENT,
    WEB_SECRET,
    OidcProvider,
    Provider,
    Seconds,
    sign_in_at_provider,
)

pytestmark = pytest.mark.anyio

AUDIENCE = "https://elicit.example/mcp"
CERTS = f"{REALM}/protocol/openid-connect/certs"


# -- access tokens: JwksTokenVerifier and the published keys ------------------------------------------------


@dataclass
class KeySet:
    provider: Provider
    verifier: JwksTokenVerifier
    clock: Seconds


@contextmanager
def key_set(**settings: Any) -> Iterator[KeySet]:
    """A provider publishing one RSA key `k1` over HTTP, and a verifier of its access tokens for `AUDIENCE`."""
    port = free_port()
    provider = Provider(f"http://127.0.0.1:{port}{REALM}", audience=AUDIENCE)
    provider.add_rsa("k1")
    clock = Seconds()
    verifier = JwksTokenVerifier(
        ExternalIdentityProvider(
            issuer=provider.issuer,
            jwks_url=f"http://127.0.0.1:{port}{CERTS}",
            audience=AUDIENCE,
            **{"required_scopes": ("mcp",), **settings},
        ),
        clock=clock,
    )
    with serving(Starlette(routes=[Route(CERTS, provider.jwks)]), port):
        yield KeySet(provider, verifier, clock)


@pytest.fixture
def keys() -> Iterator[KeySet]:
    with key_set() as served:
        yield served


def segment(part: dict[str, Any]) -> str:
    """One base64url segment of a hand-made JWT: PyJWT will not encode the malformed headers tests need."""
    return base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()


def test_provider_settings_that_cannot_work_are_refused_when_made() -> None:
    good: dict[str, Any] = {
        "issuer": "https://idp.example",
        "jwks_url": "https://idp.example/jwks",
        "audience": AUDIENCE,
    }
    with pytest.raises(JwksError, match="algorithms is empty"):
        ExternalIdentityProvider(**good, algorithms=())
    with pytest.raises(JwksError, match="is not a URL"):
        ExternalIdentityProvider(**{**good, "jwks_url": "https://[::1/jwks"})
    with pytest.raises(JwksError, match="is not an http"):
        ExternalIdentityProvider(**{**good, "issuer": "ftp://idp.example"})
    with pytest.raises(JwksError, match="leeway must be a positive"):
        ExternalIdentityProvider(**good, leeway=-1)
    with pytest.raises(JwksError, match="subject_claim is empty"):
        ExternalIdentityProvider(**good, subject_claim="")
    assert ExternalIdentityProvider(**good, leeway=0).leeway == 0  # no leeway at all is a choice
    verifier = JwksTokenVerifier(ExternalIdentityProvider(**good))
    assert repr(verifier) == "JwksTokenVerifier(issuer='https://idp.example', jwks_url='https://idp.example/jwks')"


async def test_a_token_refused_on_its_face_costs_the_provider_no_fetch(keys: KeySet) -> None:
    provider, verifier = keys.provider, keys.verifier
    refused = {
        "empty": "",
        "oversized": "e" * (16 * 1024 + 1),
        "key id not a string": f"{segment({'alg': 'RS256', 'kid': 7})}.{segment(provider.claims())}.c2ln",
        "an algorithm not configured": provider.token(alg="RS512"),
    }
    assert {why: await verifier.verify_token(token) for why, token in refused.items()} == dict.fromkeys(refused)
    assert provider.fetches == 0
    accepted = await verifier.verify_token(provider.token())
    assert accepted is not None and accepted.subject == "alice" and accepted.client_id == "desktop-app"
    assert accepted.claims == {"iss": provider.issuer} and accepted.resource == AUDIENCE
    assert provider.fetches == 1


async def test_an_empty_subject_is_no_subject(keys: KeySet) -> None:
    assert await keys.verifier.verify_token(keys.provider.token(sub="")) is None
    assert await keys.verifier.verify_token(keys.provider.token(sub="bob")) is not None


async def test_scopes_are_read_from_scope_else_scp_as_a_list_or_a_string(keys: KeySet) -> None:
    provider, verifier = keys.provider, keys.verifier
    as_string = await verifier.verify_token(provider.token(scope=None, scp="openid mcp"))
    assert as_string is not None and as_string.scopes == ["openid", "mcp"]
    as_list = await verifier.verify_token(provider.token(scope=None, scp=["mcp", 3]))
    assert as_list is not None and as_list.scopes == ["mcp"]
    assert await verifier.verify_token(provider.token(scope=None)) is None  # no scopes: "mcp" is missing
    assert await verifier.verify_token(provider.token(scope=None, scp={"mcp": True})) is None
    assert await verifier.verify_token(provider.token(scope="openid", scp="mcp")) is None  # scope wins over scp


async def test_a_token_without_a_key_id_is_verified_only_while_the_provider_publishes_one_key(keys: KeySet) -> None:
    provider, verifier = keys.provider, keys.verifier
    assert await verifier.verify_token(provider.token(kid=None)) is not None
    provider.add_rsa("k2")
    keys.clock.now += 301  # past keys_ttl: the two keys are fetched
    assert await verifier.verify_token(provider.token(kid=None)) is None  # which of two? neither
    assert provider.fetches == 2
    assert await verifier.verify_token(provider.token(kid="k2")) is not None


@pytest.mark.parametrize(
    ("answer", "logged"),
    [
        (Response("down for maintenance", status_code=500), "HTTP 500"),
        (Response(b" " * (512 * 1024 + 1), media_type="application/json"), "more than 524288"),
        (Response("<html>keys</html>", media_type="text/html"), "Expecting value"),
        (JSONResponse(["not", "a", "key", "set"]), "not a JWK set"),
        (JSONResponse({"keys": "k1"}), "not a JWK set"),
    ],
    ids=["http-500", "oversized", "not-json", "a-list", "keys-not-a-list"],
)
async def test_a_key_set_that_cannot_be_read_verifies_nothing_until_the_provider_mends_it(
    keys: KeySet, answer: Response, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    provider, verifier = keys.provider, keys.verifier
    caplog.set_level(logging.WARNING, logger="mcp_elicit.web.jwks")
    provider.jwks_answer = answer
    assert await verifier.verify_token(provider.token()) is None
    [warning] = [r.getMessage() for r in caplog.records if r.name == "mcp_elicit.web.jwks"]
    assert logged in warning and warning.endswith("no keys to verify with")
    assert await verifier.verify_token(provider.token()) is None
    assert provider.fetches == 1  # not again within refetch_interval, however many tokens come

    provider.jwks_answer = None
    keys.clock.now += 31
    assert await verifier.verify_token(provider.token()) is not None
    assert provider.fetches == 2


async def test_keys_not_meant_for_these_signatures_are_left_out_of_the_set(keys: KeySet) -> None:
    provider, verifier = keys.provider, keys.verifier
    provider.add_rsa("encryption", use="enc")
    provider.add_rsa("rs384-only", alg="RS384")  # an algorithm this verifier is not configured for
    provider.published += [
        "not-a-key",
        {"kty": "RSA", "kid": "broken", "n": "AA", "e": "AQAB", "alg": "RS256"},
        {"kty": "XYZ", "kid": "unknown-type"},
        {"kty": "oct", "kid": "shared-secret", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"},
        {"kty": "RSA", "kid": "alg-list", "n": "AA", "e": "AQAB", "alg": ["RS256"]},
    ]
    for kid in ("encryption", "rs384-only"):
        assert await verifier.verify_token(provider.token(kid=kid)) is None, kid
    for kid in ("broken", "unknown-type", "shared-secret", "alg-list"):
        assert await verifier.verify_token(provider.token(kid=kid, signer="k1")) is None, kid
    assert await verifier.verify_token(provider.token()) is not None  # the one usable key still works
    assert provider.fetches == 1  # every unknown key id above came within refetch_interval


async def test_a_key_without_alg_signs_with_its_type_and_curve_only() -> None:
    with key_set(algorithms=("RS256", "ES256", "ES384", "EdDSA")) as served:
        provider, verifier = served.provider, served.verifier
        provider.add_ec("p384", ec.SECP384R1())
        provider.add_ec("p256", ec.SECP256R1())
        edwards = ed25519.Ed25519PrivateKey.generate()
        provider.signing["ed"] = edwards
        provider.published.append({**OKPAlgorithm.to_jwk(edwards.public_key(), as_dict=True), "kid": "ed"})
        assert [key.get("alg") for key in provider.published[1:4]] == [None, None, None]

        assert await verifier.verify_token(provider.token(kid="p384", alg="ES384")) is not None
        assert await verifier.verify_token(provider.token(kid="p256", alg="ES256")) is not None
        assert await verifier.verify_token(provider.token(kid="ed", alg="EdDSA")) is not None
        # A token naming a key of another type is not verified with it, whatever its header claims.
        assert await verifier.verify_token(provider.token(kid="p384", alg="RS256", signer="k1")) is None
        assert await verifier.verify_token(provider.token(kid="ed", alg="ES256", signer="p256")) is None
        assert provider.fetches == 1


# -- the browser: OidcSignIn -----------------------------------------------------------------------------------


@dataclass
class OidcSite:
    provider: OidcProvider
    sign_in: OidcSignIn
    base: str
    clock: Seconds

    @property
    def idp(self) -> str:
        return self.provider.issuer

    async def who(self, browser: httpx2.AsyncClient, base: str | None = None) -> str:
        """Whom this server's pages take the browser for."""
        return (await browser.get(f"{base or self.base}/whoami")).text


def whoami_app(sign_in: OidcSignIn) -> Starlette:
    """The sign-in's routes, a page saying whom they take the browser for, and the switch-account form a page
    of this browser's session would show (its action and fields, or null), leading back to `?back=`."""

    async def whoami(request: Request) -> Response:
        return PlainTextResponse(sign_in.principal_of(request) or "nobody")

    async def switch_form(request: Request) -> Response:
        form = sign_in.switch_account_form(request, request.query_params.get("back", "/whoami"))
        return JSONResponse(None if form is None else {"action": form.action, **form.fields})

    return Starlette(routes=[*sign_in.routes(), Route("/whoami", whoami), Route("/switch-form", switch_form)])


async def switch_form(browser: httpx2.AsyncClient, site: OidcSite, back: str = "/whoami") -> dict[str, str]:
    """The switch-account form of the browser's session: its action and hidden fields."""
    form = (await browser.get(f"{site.base}/switch-form", params={"back": back})).json()
    assert form is not None and form["action"] == "/signout", form
    return dict(form)


@contextmanager
def oidc_site(
    token_auth: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic",
) -> Iterator[OidcSite]:
    idp_port, port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    keys = Provider(f"http://127.0.0.1:{idp_port}{REALM}", audience=f"{base}/mcp")
    keys.add_rsa("k1")
    provider = OidcProvider(keys)
    clock = Seconds()
    client = OidcClient(
        issuer=keys.issuer,
        client_id=WEB_CLIENT,
        client_secret=WEB_SECRET,
        redirect_uri=f"{base}/signin/callback",
        token_auth=token_auth,
    )
    sign_in = OidcSignIn(client, [b"s" * 32], clock=clock)
    with serving(Starlette(routes=provider.routes()), idp_port), serving(whoami_app(sign_in), port):
        yield OidcSite(provider, sign_in, base, clock)


@pytest.fixture
def site() -> Iterator[OidcSite]:
    with oidc_site() as served:
        yield served


def cookie_names(browser: httpx2.AsyncClient) -> set[str]:
    return {cookie.name for cookie in browser.cookies.jar}


async def to_callback(
    browser: httpx2.AsyncClient, site: OidcSite, user: str = "alice", next_path: str = "/whoami"
) -> str:
    """Start a sign-in and sign in at the provider, stopping where the provider sends the browser back."""
    form = await browser.get(f"{site.base}/signin", params={"next": next_path}, follow_redirects=True)
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.text))
    back = await browser.post(str(form.url), data={**fields, "username": user, "password": "wonderland"})
    assert back.status_code == 302, back.text
    return back.headers["location"]


def test_client_and_session_settings_that_cannot_work_are_refused_when_made() -> None:
    good: dict[str, Any] = {
        "issuer": "https://idp.example/realms/staff",
        "client_id": WEB_CLIENT,
        "client_secret": WEB_SECRET,
        "redirect_uri": "https://elicit.example/signin/callback",
    }
    refused: dict[str, dict[str, Any]] = {
        "is not an http(s) URL": {"issuer": "idp.example"},
        "plain http outside loopback": {"redirect_uri": "http://elicit.example/signin/callback"},
        "needs a path of its own": {"redirect_uri": "https://elicit.example/signin"},
        "lacks openid": {"scope": "profile email"},
        "not asymmetric": {"algorithms": ("HS256",)},
        "algorithms () are not asymmetric": {"algorithms": ()},
        "client_id and client_secret": {"client_secret": ""},
        "subject_claim is empty": {"subject_claim": ""},
    }
    for message, change in refused.items():
        with pytest.raises(JwksError, match=re.escape(message)):
            OidcClient(**{**good, **change})
    client = OidcClient(**good)
    with pytest.raises(ValueError, match="non-empty sequence"):
        OidcSignIn(client, b"s" * 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty sequence"):
        OidcSignIn(client, [])
    with pytest.raises(ValueError, match="session key 2 must be at least 32"):
        OidcSignIn(client, [b"s" * 32, b"short"])
    with pytest.raises(ValueError, match="session_ttl must be a positive"):
        OidcSignIn(client, [b"s" * 32], session_ttl=0)
    sign_in = OidcSignIn(client, [b"s" * 32])
    assert WEB_SECRET not in repr(sign_in) and WEB_SECRET not in repr(client)
    assert sign_in.session_cookie == "__Host-mcp-elicit-oidc-session" and sign_in.secure_cookies


@pytest.mark.parametrize(
    ("answer", "logged"),
    [
        (Response("gone", status_code=404), "does not name the issuer"),
        (Response("<html>configuration</html>", media_type="text/html"), "could not be read"),
        (JSONResponse(["issuer"]), "does not name the issuer"),
        ("another issuer", "does not name the issuer"),
        ("no token endpoint", "lacks an endpoint"),
        ("keys on a file URL", "lacks an endpoint"),
    ],
    ids=["http-404", "not-json", "a-list", "lying-issuer", "no-token-endpoint", "file-jwks-uri"],
)
async def test_a_discovery_document_that_fails_or_lies_makes_sign_in_unavailable_until_mended(
    site: OidcSite, answer: Response | str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_elicit.web.oidc")
    lies: dict[str, dict[str, Any]] = {
        "another issuer": {"issuer": "https://evil.example/realms/staff"},
        "no token endpoint": {"token_endpoint": None},
        "keys on a file URL": {"jwks_uri": "file:///etc/keys.json"},
    }
    provider = site.provider
    provider.discovery_answer = JSONResponse(provider.document(**lies[answer])) if isinstance(answer, str) else answer
    async with httpx2.AsyncClient(timeout=30) as browser:
        unavailable = await browser.get(f"{site.base}/signin", params={"next": "/whoami"})
        assert unavailable.status_code == 503 and "Sign-in unavailable" in unavailable.text
        assert "location" not in unavailable.headers and not cookie_names(browser)
        assert [r.getMessage() for r in caplog.records if logged in r.getMessage()]

        provider.discovery_answer = None  # a failed discovery is not kept: the next sign-in reads it again
        assert await sign_in_at_provider(browser, f"{site.base}/signin?next=/whoami", "alice")
        assert await site.who(browser) == f"{site.idp}#alice"
    assert provider.discoveries == 2


async def test_sign_ins_started_together_read_the_discovery_document_once(site: OidcSite) -> None:
    site.provider.discovery_delay = 0.3
    locations: list[str] = []

    async def start() -> None:
        async with httpx2.AsyncClient(timeout=30) as browser:
            started = await browser.get(f"{site.base}/signin")
            assert started.status_code == 302
            locations.append(started.headers["location"])

    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(start)
    assert site.provider.discoveries == 1
    assert len(locations) == 3 and all(url.startswith(f"{site.idp}/protocol/openid-connect/auth?") for url in locations)
    assert len({parse_qs(urlsplit(url).query)["state"][0] for url in locations}) == 3


async def test_a_signed_in_browser_returns_to_a_same_origin_page_only_and_signs_out(site: OidcSite) -> None:
    async with httpx2.AsyncClient(timeout=30) as browser:
        assert await site.who(browser) == "nobody"
        landed = await sign_in_at_provider(browser, f"{site.base}/signin?next=https://evil.example/", "alice")
        assert str(landed.url) == f"{site.base}/"
        assert cookie_names(browser) == {"mcp-elicit-oidc-session"}  # the flow cookie is gone
        assert await site.who(browser) == f"{site.idp}#alice"
        form = await switch_form(browser, site, back="https://evil.example/")
        assert form["next"] == "/signin?next=%2F&switch=1"
        out = await browser.post(f"{site.base}/signout", data={"csrf": form["csrf"], "next": "//evil.example/"})
        assert out.status_code == 303 and out.headers["location"] == "/"
        assert await site.who(browser) == "nobody"
        assert (await browser.get(f"{site.base}/switch-form")).json() is None  # nobody to sign out
    [form] = site.provider.token_forms
    assert "client_secret" not in form  # client_secret_basic: the secret travels in the Authorization header


async def test_client_secret_post_sends_the_secret_in_the_form() -> None:
    with oidc_site(token_auth="client_secret_post") as site:
        async with httpx2.AsyncClient(timeout=30) as browser:
            await sign_in_at_provider(browser, f"{site.base}/signin?next=/whoami", "bob")
            assert await site.who(browser) == f"{site.idp}#bob"
        [form] = site.provider.token_forms
        assert form["client_id"] == WEB_CLIENT and form["client_secret"] == WEB_SECRET


async def test_a_sign_in_the_provider_refuses_signs_nobody_in_and_cannot_be_replayed(site: OidcSite) -> None:
    site.provider.refuse_sign_in = True
    async with httpx2.AsyncClient(timeout=30) as browser:
        callback = await to_callback(browser, site)
        assert "error=access_denied" in callback
        refused = await browser.get(callback)
        assert refused.status_code == 403 and "Sign-in refused" in refused.text
        assert not cookie_names(browser)  # the flow cookie is cleared: this sign-in is over
        again = await browser.get(callback)
        assert again.status_code == 400 and "Sign-in expired" in again.text
        assert await site.who(browser) == "nobody"
    assert site.provider.token_forms == []


async def test_a_callback_without_a_code_or_after_ten_minutes_signs_nobody_in(site: OidcSite) -> None:
    async with httpx2.AsyncClient(timeout=30) as browser:
        callback = await to_callback(browser, site)
        codeless = re.sub(r"code=[^&]+&?", "", callback)
        assert "state=" in codeless and "code=" not in codeless
        failed = await browser.get(codeless)
        assert failed.status_code == 400 and "did not complete" in failed.text and not cookie_names(browser)

        late = await to_callback(browser, site)
        site.clock.now += 601  # the flow cookie lasts ten minutes
        expired = await browser.get(late)
        assert expired.status_code == 400 and "Sign-in expired" in expired.text
        assert await site.who(browser) == "nobody"
    assert len(site.provider.token_forms) == 0  # neither callback redeemed its code


async def test_a_replayed_callback_signs_in_only_the_browser_that_redeemed_the_code(site: OidcSite) -> None:
    async with httpx2.AsyncClient(timeout=30) as browser, httpx2.AsyncClient(timeout=30) as thief:
        callback = await to_callback(browser, site)
        thief.cookies = httpx2.Cookies(browser.cookies)  # even with the flow cookie copied
        signed = await browser.get(callback)
        assert signed.status_code == 303 and signed.headers["location"] == "/whoami"
        replayed = await thief.get(callback)
        assert replayed.status_code == 400 and "could not be verified" in replayed.text
        assert "mcp-elicit-oidc-session" not in cookie_names(thief)
        assert await site.who(thief) == "nobody" and await site.who(browser) == f"{site.idp}#alice"
        again = await browser.get(callback)  # the browser's own flow cookie is spent
        assert again.status_code == 400 and "Sign-in expired" in again.text


@pytest.mark.parametrize(
    "answer",
    [
        Response("<html>token</html>", media_type="text/html"),
        JSONResponse({"access_token": "opaque", "token_type": "Bearer"}),
        JSONResponse({"error": "server_error"}, status_code=500),
        JSONResponse({"id_token": ["a", "b"]}),
    ],
    ids=["not-json", "no-id-token", "http-500", "id-token-not-a-string"],
)
async def test_a_token_endpoint_without_a_usable_id_token_signs_nobody_in(site: OidcSite, answer: Response) -> None:
    site.provider.token_answer = answer
    async with httpx2.AsyncClient(timeout=30) as browser:
        failed = await sign_in_at_provider(browser, f"{site.base}/signin?next=/whoami", "alice")
        assert failed.status_code == 400 and "could not be verified" in failed.text
        assert not cookie_names(browser) and await site.who(browser) == "nobody"


@pytest.mark.parametrize(
    "claims",
    [
        {"aud": "another-client"},
        {"iss": "https://evil.example/realms/staff"},
        {"exp": 1_000_000_000},
        {"nonce": None},
        {"sub": None},
    ],
    ids=["another-audience", "another-issuer", "expired", "no-nonce", "no-subject"],
)
async def test_an_id_token_not_issued_for_this_sign_in_signs_nobody_in(site: OidcSite, claims: dict[str, Any]) -> None:
    site.provider.id_claims = claims
    async with httpx2.AsyncClient(timeout=30) as browser:
        failed = await sign_in_at_provider(browser, f"{site.base}/signin?next=/whoami", "alice")
        assert failed.status_code == 400 and "could not be verified" in failed.text
        assert await site.who(browser) == "nobody"


async def test_sessions_last_session_ttl_and_are_known_to_every_instance_with_the_key(site: OidcSite) -> None:
    """Cookies go to every port of a host, so instances on other ports see the browser's session cookie."""
    client = site.sign_in.client
    rotated = OidcSignIn(client, [b"n" * 32, b"s" * 32], clock=site.clock)  # a new signing key, the old one kept
    stranger = OidcSignIn(client, [b"x" * 32], clock=site.clock)
    with ExitStack() as stack:
        rotated_base = stack.enter_context(serving(whoami_app(rotated), free_port()))
        stranger_base = stack.enter_context(serving(whoami_app(stranger), free_port()))
        async with httpx2.AsyncClient(timeout=30) as browser:
            await sign_in_at_provider(browser, f"{site.base}/signin?next=/whoami", "alice")
            principal = f"{site.idp}#alice"
            assert await site.who(browser) == principal
            assert await site.who(browser, rotated_base) == principal
            assert await site.who(browser, stranger_base) == "nobody"

            site.clock.now += 8 * 3600 - 5
            assert await site.who(browser) == principal
            site.clock.now += 10  # eight hours by default
            assert await site.who(browser) == "nobody"
            assert await site.who(browser, rotated_base) == "nobody"


async def test_a_sign_out_without_this_sessions_token_signs_nobody_out(site: OidcSite) -> None:
    async with httpx2.AsyncClient(timeout=30) as alice, httpx2.AsyncClient(timeout=30) as bob:
        await sign_in_at_provider(alice, f"{site.base}/signin?next=/whoami", "alice")
        await sign_in_at_provider(bob, f"{site.base}/signin?next=/whoami", "bob")
        alices, bobs = await switch_form(alice, site), await switch_form(bob, site)
        assert alices["csrf"] != bobs["csrf"]
        for refused in ({}, {"next": "/whoami"}, {"csrf": "forged", "next": "/whoami"}, {"csrf": bobs["csrf"]}):
            answer = await alice.post(f"{site.base}/signout", data=refused)
            assert answer.status_code == 403 and "Nobody was signed out" in answer.text, refused
            assert "set-cookie" not in answer.headers
        assert (await bob.post(f"{site.base}/signout", data=alices)).status_code == 403  # a token of another session
        assert await site.who(alice) == f"{site.idp}#alice" and await site.who(bob) == f"{site.idp}#bob"


async def test_switching_account_signs_out_and_asks_the_provider_to_sign_someone_in_again(site: OidcSite) -> None:
    site.provider.remembers = True
    async with httpx2.AsyncClient(timeout=30) as browser:
        await sign_in_at_provider(browser, f"{site.base}/signin?next=/whoami", "bob")
        # A plain sign-in again: the provider remembers bob and signs him straight back in, no form shown.
        again = await browser.get(f"{site.base}/signin", params={"next": "/whoami"}, follow_redirects=True)
        assert again.text == f"{site.idp}#bob" and site.provider.prompts == ["", ""]

        form = await switch_form(browser, site, back="/whoami?x=1")
        out = await browser.post(f"{site.base}/signout", data={"csrf": form["csrf"], "next": form["next"]})
        assert out.status_code == 303 and out.headers["location"] == "/signin?next=%2Fwhoami%3Fx%3D1&switch=1"
        assert await site.who(browser) == "nobody"
        started = await browser.get(f"{site.base}{out.headers['location']}")
        assert started.status_code == 302 and parse_qs(urlsplit(started.headers["location"]).query)["prompt"] == [
            "login"
        ]
        landed = await sign_in_at_provider(browser, started.headers["location"], "alice")  # the form, not bob
        assert str(landed.url) == f"{site.base}/whoami?x=1" and landed.text == f"{site.idp}#alice"
    assert site.provider.prompts == ["", "", "login"]


def test_the_prompt_of_a_switch_is_one_the_provider_knows() -> None:
    good: dict[str, Any] = {
        "issuer": "https://idp.example/realms/staff",
        "client_id": WEB_CLIENT,
        "client_secret": WEB_SECRET,
        "redirect_uri": "https://elicit.example/signin/callback",
    }
    for prompt in ("login", "select_account", "login consent", ""):
        assert OidcClient(**good, switch_prompt=prompt).switch_prompt == prompt
    for prompt in ("none", "login\nx", " login", "login  consent", "relogin"):
        with pytest.raises(JwksError, match="switch_prompt"):
            OidcClient(**good, switch_prompt=prompt)
