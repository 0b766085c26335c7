"""The stand-in OAuth provider, as a real subprocess on loopback, driven over real HTTP like a browser and a client.

A few tests that need two registered clients or a clock moved by hand serve `provider_app` in process instead,
still over real HTTP on loopback.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from mcp_elicit.reference.provider import ProviderClient, ProviderConfig, ProviderUser, provider_app
from tests.helpers.http_harness import free_port, serving, stop

REPO = Path(__file__).resolve().parents[2]
CLIENT_ID = "demo-client"
CLIENT_SECRET = "demo-secret-1f2e3d"
CLIENT_NAME = "Demo Workspace"
CALLBACK = "http://127.0.0.1:8765/elicit/callback"
CALLBACK_WITH_QUERY = "http://127.0.0.1:8765/elicit/callback?tenant=acme"
PASSWORD = "wonderland"


@dataclass(frozen=True)
class Provider:
    url: str


@contextmanager
def provider_process(log: Path, *extra: str) -> Iterator[Provider]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mcp_elicit.reference.provider",
        "--port",
        str(port),
        "--client-id",
        CLIENT_ID,
        "--client-secret",
        CLIENT_SECRET,
        "--client-name",
        CLIENT_NAME,
        "--redirect-uri",
        CALLBACK,
        "--redirect-uri",
        CALLBACK_WITH_QUERY,
        "--user",
        f"alice:{PASSWORD}:Alice Liddell",
        "--user",
        "bob:builder:Bob",
        *extra,
    ]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx2.get(f"{url}/.well-known/oauth-authorization-server", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the provider did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield Provider(url)
    finally:
        stop(process)


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with provider_process(tmp_path_factory.mktemp("provider") / "provider.log") as running:
        yield running


@pytest.fixture
def browser() -> Iterator[httpx2.Client]:
    with httpx2.Client(follow_redirects=False, timeout=10) as client:
        yield client


class Forms(HTMLParser):
    """The forms of a page: each one's action and its named fields (hidden, text and submit buttons)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, list[str]]]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.forms.append((attributes.get("action", ""), {}))
        elif tag in ("input", "button") and "name" in attributes and self.forms:
            self.forms[-1][1].setdefault(attributes["name"], []).append(attributes.get("value", ""))

    @classmethod
    def only(cls, page: str) -> tuple[str, dict[str, list[str]]]:
        forms = cls(page).forms
        assert len(forms) == 1, forms
        return forms[0]


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def authorize_query(challenge: str, state: str | None = "state-123", **overrides: str | None) -> dict[str, str]:
    query: dict[str, str | None] = {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": CALLBACK,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "scope": "profile",
        **overrides,
    }
    return {k: v for k, v in query.items() if v is not None}


def redirect_params(response: httpx2.Response, expected_base: str = CALLBACK) -> dict[str, str]:
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    parts = urlsplit(location)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == expected_base.split("?")[0]
    params = parse_qs(parts.query, keep_blank_values=True, strict_parsing=True)
    assert all(len(values) == 1 for values in params.values()), params
    return {k: v[0] for k, v in params.items()}


def assert_no_redirect(response: httpx2.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert "location" not in response.headers
    assert response.headers["content-type"].startswith("text/html")


def start(browser: httpx2.Client, provider: Provider, query: dict[str, str]) -> httpx2.Response:
    response = browser.get(f"{provider.url}/authorize", params=query)
    assert_no_redirect(response, 200)
    return response


def sign_in(
    browser: httpx2.Client, provider: Provider, page: httpx2.Response, username: str = "alice", password: str = PASSWORD
) -> httpx2.Response:
    action, fields = Forms.only(page.text)
    assert action == "/authorize"
    return browser.post(
        f"{provider.url}{action}", data={"request": fields["request"][0], "username": username, "password": password}
    )


def consent_fields(page: httpx2.Response) -> dict[str, str]:
    action, fields = Forms.only(page.text)
    assert action == "/authorize/consent"
    assert fields["action"] == ["allow", "deny"]
    return {"request": fields["request"][0], "csrf_token": fields["csrf_token"][0]}


def answer(browser: httpx2.Client, provider: Provider, fields: dict[str, str], action: str) -> httpx2.Response:
    return browser.post(f"{provider.url}/authorize/consent", data={**fields, "action": action})


def authorization_code(
    browser: httpx2.Client, provider: Provider, challenge: str, state: str = "state-123", redirect_uri: str = CALLBACK
) -> str:
    page = start(browser, provider, authorize_query(challenge, state, redirect_uri=redirect_uri))
    consent = sign_in(browser, provider, page)
    assert consent.status_code == 200, consent.text
    params = redirect_params(answer(browser, provider, consent_fields(consent), "allow"), redirect_uri)
    assert params["state"] == state
    return params["code"]


def exchange(
    provider: Provider,
    code: str,
    verifier: str,
    redirect_uri: str = CALLBACK,
    auth: tuple[str, str] | None = (CLIENT_ID, CLIENT_SECRET),
    **extra: str,
) -> httpx2.Response:
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier}
    with httpx2.Client(follow_redirects=False, timeout=10) as client:
        if auth is None:
            return client.post(f"{provider.url}/token", data={**data, **extra})
        return client.post(f"{provider.url}/token", data={**data, **extra}, auth=auth)


def me(provider: Provider, token: str) -> httpx2.Response:
    return httpx2.get(f"{provider.url}/api/me", headers={"Authorization": f"Bearer {token}"}, timeout=10)


def token_error(response: httpx2.Response, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == error
    assert response.headers["cache-control"] == "no-store"


# -- the happy path --------------------------------------------------------------------------------------------


def test_metadata_names_the_endpoints_and_only_s256(provider: Provider) -> None:
    metadata = httpx2.get(f"{provider.url}/.well-known/oauth-authorization-server").json()
    assert metadata["issuer"] == provider.url
    assert metadata["authorization_endpoint"] == f"{provider.url}/authorize"
    assert metadata["token_endpoint"] == f"{provider.url}/token"
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["response_types_supported"] == ["code"]
    assert metadata["grant_types_supported"] == ["authorization_code"]
    assert set(metadata["token_endpoint_auth_methods_supported"]) == {"client_secret_basic", "client_secret_post"}


def test_full_flow_with_pkce_and_http_basic(provider: Provider, browser: httpx2.Client) -> None:
    verifier, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge))
    assert f"Sign in to continue to {CLIENT_NAME}" in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"

    consent = sign_in(browser, provider, page)
    assert consent.status_code == 200
    assert f"{CLIENT_NAME} wants to read your profile" in consent.text
    assert "Alice Liddell" in consent.text
    params = redirect_params(answer(browser, provider, consent_fields(consent), "allow"))
    assert params["state"] == "state-123"
    assert params["iss"] == provider.url
    assert set(params) == {"code", "state", "iss"}

    response = exchange(provider, params["code"], verifier)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["scope"] == "profile"
    assert body["expires_in"] == 3600
    assert set(body) == {"access_token", "token_type", "expires_in", "scope"}

    profile = me(provider, body["access_token"])
    assert profile.status_code == 200
    assert profile.json() == {"login": "alice", "name": "Alice Liddell"}


def test_client_secret_post_and_a_redirect_uri_with_its_own_query(provider: Provider, browser: httpx2.Client) -> None:
    verifier, challenge = pkce()
    code = authorization_code(browser, provider, challenge, redirect_uri=CALLBACK_WITH_QUERY)
    location = urlsplit(CALLBACK_WITH_QUERY)
    assert location.query == "tenant=acme"
    response = exchange(
        provider,
        code,
        verifier,
        redirect_uri=CALLBACK_WITH_QUERY,
        auth=None,
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
    )
    assert response.status_code == 200, response.text
    assert me(provider, response.json()["access_token"]).json()["login"] == "alice"


def test_the_redirect_keeps_the_registered_query_and_the_state_exactly(
    provider: Provider, browser: httpx2.Client
) -> None:
    state = "a&b=c#d e+f%20/?é"
    _, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge, state, redirect_uri=CALLBACK_WITH_QUERY))
    consent = sign_in(browser, provider, page)
    params = redirect_params(answer(browser, provider, consent_fields(consent), "allow"), CALLBACK_WITH_QUERY)
    assert params["tenant"] == "acme"
    assert params["state"] == state


# -- the authorization endpoint refuses without redirecting ---------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"client_id": "someone-else"},
        {"client_id": None},
        {"redirect_uri": "https://evil.example/elicit/callback"},
        {"redirect_uri": "http://127.0.0.1:8765/elicit/callback/"},
        {"redirect_uri": "http://127.0.0.1:8765/elicit/callback.evil"},
        {"redirect_uri": "http://127.0.0.1:8765/elicit/callback?next=https://evil.example"},
        {"redirect_uri": "http://127.0.0.1:8766/elicit/callback"},
        {"redirect_uri": "http://localhost:8765/elicit/callback"},
        {"redirect_uri": "HTTP://127.0.0.1:8765/elicit/callback"},
        {"redirect_uri": None},
    ],
)
def test_unknown_client_or_unregistered_redirect_uri_gets_an_error_page(
    provider: Provider, browser: httpx2.Client, overrides: dict[str, str | None]
) -> None:
    _, challenge = pkce()
    # Everything else wrong too: the client and redirect URI are checked before anything else.
    query = authorize_query(challenge, response_type="token", code_challenge_method="plain", **overrides)
    response = browser.get(f"{provider.url}/authorize", params=query)
    assert_no_redirect(response, 400)
    assert "<form" not in response.text


def test_a_repeated_redirect_uri_gets_an_error_page(provider: Provider, browser: httpx2.Client) -> None:
    _, challenge = pkce()
    query: list[tuple[str, str | int | float | bool | None]] = [
        *authorize_query(challenge).items(),
        ("redirect_uri", "https://evil.example/cb"),
    ]
    assert_no_redirect(browser.get(f"{provider.url}/authorize", params=query), 400)


def test_error_pages_escape_the_client_id_and_redirect_uri(provider: Provider, browser: httpx2.Client) -> None:
    _, challenge = pkce()
    evil = "<script>alert(1)</script>"
    response = browser.get(f"{provider.url}/authorize", params=authorize_query(challenge, client_id=evil))
    assert_no_redirect(response, 400)
    assert "<script>" not in response.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text

    uri = 'http://127.0.0.1:8765/"><script>alert(2)</script>'
    response = browser.get(f"{provider.url}/authorize", params=authorize_query(challenge, redirect_uri=uri))
    assert_no_redirect(response, 400)
    assert "<script>" not in response.text
    assert "&quot;&gt;&lt;script&gt;alert(2)" in response.text


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"code_challenge": None}, "invalid_request"),
        ({"code_challenge_method": None}, "invalid_request"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge": "too-short"}, "invalid_request"),
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"response_type": None}, "invalid_request"),
        ({"scope": "repo"}, "invalid_scope"),
    ],
)
def test_other_request_errors_go_back_to_the_registered_client_with_the_state(
    provider: Provider, browser: httpx2.Client, overrides: dict[str, str | None], error: str
) -> None:
    _, challenge = pkce()
    response = browser.get(f"{provider.url}/authorize", params=authorize_query(challenge, "s-1", **overrides))
    params = redirect_params(response)
    assert params["error"] == error
    assert params["state"] == "s-1"
    assert "code" not in params


def test_state_is_required(provider: Provider, browser: httpx2.Client) -> None:
    _, challenge = pkce()
    params = redirect_params(browser.get(f"{provider.url}/authorize", params=authorize_query(challenge, state="")))
    assert params["error"] == "invalid_request"
    assert "state" not in params


def test_the_sign_in_page_escapes_the_state(provider: Provider, browser: httpx2.Client) -> None:
    state = "<script>alert('x')</script>\"&"
    _, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge, state))
    assert "<script>" not in page.text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&amp;" in page.text
    consent = sign_in(browser, provider, page)
    assert "<script>" not in consent.text
    params = redirect_params(answer(browser, provider, consent_fields(consent), "allow"))
    assert params["state"] == state


# -- sign-in and consent ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("username", "password"), [("alice", "wrong"), ("mallory", PASSWORD), ("alice", "")])
def test_a_wrong_password_shows_the_sign_in_page_again(
    provider: Provider, browser: httpx2.Client, username: str, password: str
) -> None:
    _, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge))
    again = sign_in(browser, provider, page, username, password)
    assert_no_redirect(again, 200)
    assert "Incorrect username or password." in again.text
    assert "wants to read your profile" not in again.text
    assert Forms.only(again.text)[1]["username"] == [username]
    # The same request still works with the right password.
    assert "wants to read your profile" in sign_in(browser, provider, again).text


def test_the_sign_in_page_escapes_the_username_it_shows_again(provider: Provider, browser: httpx2.Client) -> None:
    _, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge))
    again = sign_in(browser, provider, page, '"><script>alert(1)</script>', "nope")
    assert "<script>" not in again.text
    assert Forms.only(again.text)[1]["username"] == ['"><script>alert(1)</script>']


def test_too_many_wrong_passwords_end_the_request_with_access_denied(
    provider: Provider, browser: httpx2.Client
) -> None:
    _, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge, "s-many"))
    for _ in range(4):
        page = sign_in(browser, provider, page, "alice", "wrong")
        assert_no_redirect(page, 200)
    request_id = Forms.only(page.text)[1]["request"][0]
    params = redirect_params(sign_in(browser, provider, page, "alice", "wrong"))
    assert params["error"] == "access_denied"
    assert params["state"] == "s-many"
    late = browser.post(
        f"{provider.url}/authorize", data={"request": request_id, "username": "alice", "password": PASSWORD}
    )
    assert_no_redirect(late, 400)


def test_deny_sends_access_denied_with_the_state(provider: Provider, browser: httpx2.Client) -> None:
    _, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge, "s-deny"))
    fields = consent_fields(sign_in(browser, provider, page))
    params = redirect_params(answer(browser, provider, fields, "deny"))
    assert params["error"] == "access_denied"
    assert params["state"] == "s-deny"
    assert "code" not in params
    # Denying ended the request: Allow afterwards does nothing.
    assert_no_redirect(answer(browser, provider, fields, "allow"), 400)


@pytest.mark.parametrize("csrf", [None, "", "forged-token", "x" * 43])
def test_consent_without_the_right_csrf_token_is_refused(
    provider: Provider, browser: httpx2.Client, csrf: str | None
) -> None:
    _, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge))
    fields = consent_fields(sign_in(browser, provider, page))
    forged = {"request": fields["request"], "action": "allow"}
    if csrf is not None:
        forged["csrf_token"] = csrf
    refused = browser.post(f"{provider.url}/authorize/consent", data=forged)
    assert_no_redirect(refused, 403)
    # The genuine token still works, once.
    assert "code" in redirect_params(answer(browser, provider, fields, "allow"))
    assert_no_redirect(answer(browser, provider, fields, "allow"), 400)


def test_a_csrf_token_belongs_to_its_own_request(provider: Provider, browser: httpx2.Client) -> None:
    _, challenge = pkce()
    first = consent_fields(sign_in(browser, provider, start(browser, provider, authorize_query(challenge))))
    second = consent_fields(sign_in(browser, provider, start(browser, provider, authorize_query(challenge))))
    crossed = {"request": first["request"], "csrf_token": second["csrf_token"]}
    assert_no_redirect(answer(browser, provider, crossed, "allow"), 403)


def test_consent_before_sign_in_is_refused(provider: Provider, browser: httpx2.Client) -> None:
    _, challenge = pkce()
    page = start(browser, provider, authorize_query(challenge))
    request_id = Forms.only(page.text)[1]["request"][0]
    response = answer(browser, provider, {"request": request_id, "csrf_token": "anything"}, "allow")
    assert_no_redirect(response, 400)


def test_an_unknown_request_id_gets_an_error_page(provider: Provider, browser: httpx2.Client) -> None:
    response = browser.post(
        f"{provider.url}/authorize", data={"request": "made-up", "username": "alice", "password": PASSWORD}
    )
    assert_no_redirect(response, 400)
    assert_no_redirect(answer(browser, provider, {"request": "made-up", "csrf_token": "x"}, "allow"), 400)


# -- the token endpoint ----------------------------------------------------------------------------------------


def test_a_wrong_pkce_verifier_fails_and_spends_the_code(provider: Provider, browser: httpx2.Client) -> None:
    verifier, challenge = pkce()
    code = authorization_code(browser, provider, challenge)
    other_verifier, _ = pkce()
    token_error(exchange(provider, code, other_verifier), 400, "invalid_grant")
    # The code was tried once; it is never tried again, even with the right verifier.
    token_error(exchange(provider, code, verifier), 400, "invalid_grant")


def test_a_replayed_code_fails_and_revokes_its_token(provider: Provider, browser: httpx2.Client) -> None:
    verifier, challenge = pkce()
    code = authorization_code(browser, provider, challenge)
    first = exchange(provider, code, verifier)
    assert first.status_code == 200
    token = first.json()["access_token"]
    assert me(provider, token).status_code == 200

    token_error(exchange(provider, code, verifier), 400, "invalid_grant")
    revoked = me(provider, token)
    assert revoked.status_code == 401
    assert 'error="invalid_token"' in revoked.headers["www-authenticate"]


def test_the_code_is_bound_to_its_redirect_uri(provider: Provider, browser: httpx2.Client) -> None:
    verifier, challenge = pkce()
    code = authorization_code(browser, provider, challenge)
    token_error(exchange(provider, code, verifier, redirect_uri=CALLBACK_WITH_QUERY), 400, "invalid_grant")


def test_an_unknown_code_is_an_invalid_grant(provider: Provider) -> None:
    verifier, _ = pkce()
    token_error(exchange(provider, "no-such-code", verifier), 400, "invalid_grant")


@pytest.mark.parametrize(
    ("auth", "extra"),
    [
        ((CLIENT_ID, "wrong-secret"), {}),
        (("someone-else", CLIENT_SECRET), {}),
        (None, {}),
        (None, {"client_id": CLIENT_ID}),
        (None, {"client_id": CLIENT_ID, "client_secret": "wrong-secret"}),
    ],
)
def test_client_authentication_failures_are_invalid_client_401(
    provider: Provider, browser: httpx2.Client, auth: tuple[str, str] | None, extra: dict[str, str]
) -> None:
    verifier, challenge = pkce()
    code = authorization_code(browser, provider, challenge)
    response = exchange(provider, code, verifier, auth=auth, **extra)
    token_error(response, 401, "invalid_client")
    assert response.headers["www-authenticate"].startswith("Basic ")
    # A failed client authentication does not touch the code.
    assert exchange(provider, code, verifier).status_code == 200


def test_two_client_authentication_methods_are_refused(provider: Provider, browser: httpx2.Client) -> None:
    verifier, challenge = pkce()
    code = authorization_code(browser, provider, challenge)
    token_error(exchange(provider, code, verifier, client_secret=CLIENT_SECRET), 400, "invalid_request")


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"grant_type": "refresh_token", "refresh_token": "x"}, "unsupported_grant_type"),
        ({"grant_type": "client_credentials"}, "unsupported_grant_type"),
        ({"code": "c", "redirect_uri": CALLBACK, "code_verifier": "v" * 43}, "invalid_request"),
        ({"grant_type": "authorization_code", "redirect_uri": CALLBACK, "code_verifier": "v" * 43}, "invalid_request"),
        ({"grant_type": "authorization_code", "code": "c", "redirect_uri": CALLBACK}, "invalid_request"),
        ({"grant_type": "authorization_code", "code": "c", "code_verifier": "v" * 43}, "invalid_request"),
        (
            {"grant_type": "authorization_code", "code": "c", "redirect_uri": CALLBACK, "code_verifier": "short"},
            "invalid_request",
        ),
    ],
)
def test_malformed_token_requests(provider: Provider, data: dict[str, str], error: str) -> None:
    response = httpx2.post(f"{provider.url}/token", data=data, auth=(CLIENT_ID, CLIENT_SECRET))
    token_error(response, 400, error)


def test_a_missing_verifier_leaves_the_code_unspent(provider: Provider, browser: httpx2.Client) -> None:
    verifier, challenge = pkce()
    code = authorization_code(browser, provider, challenge)
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK}
    token_error(
        httpx2.post(f"{provider.url}/token", data=data, auth=(CLIENT_ID, CLIENT_SECRET)), 400, "invalid_request"
    )
    assert exchange(provider, code, verifier).status_code == 200


def test_the_token_endpoint_wants_a_form_body(provider: Provider) -> None:
    body = {"grant_type": "authorization_code", "code": "c", "redirect_uri": CALLBACK, "code_verifier": "v" * 43}
    response = httpx2.post(f"{provider.url}/token", json=body, auth=(CLIENT_ID, CLIENT_SECRET))
    token_error(response, 400, "invalid_request")
    assert httpx2.get(f"{provider.url}/token").status_code == 405


# -- the profile API -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization", ["Bearer not-a-token", "Bearer", "Basic YWxpY2U6d29uZGVybGFuZA==", "not-a-scheme"]
)
def test_api_me_refuses_a_bad_token(provider: Provider, authorization: str) -> None:
    response = httpx2.get(f"{provider.url}/api/me", headers={"Authorization": authorization})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert response.json()["error"] == "invalid_token"


def test_api_me_without_credentials_asks_for_a_bearer_token(provider: Provider) -> None:
    response = httpx2.get(f"{provider.url}/api/me")
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    # RFC 6750 §3.1: no error code when the request carried no credentials at all.
    assert "error=" not in challenge


# -- lifetimes ------------------------------------------------------------------------------------------------


def test_an_expired_code_is_an_invalid_grant(tmp_path: Path, browser: httpx2.Client) -> None:
    with provider_process(tmp_path / "provider.log", "--code-ttl", "1") as short:
        verifier, challenge = pkce()
        code = authorization_code(browser, short, challenge)
        time.sleep(1.3)
        token_error(exchange(short, code, verifier), 400, "invalid_grant")
        # A fresh code redeemed at once still works.
        verifier, challenge = pkce()
        assert exchange(short, authorization_code(browser, short, challenge), verifier).status_code == 200


class HandClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def in_process(clock: HandClock) -> Iterator[Provider]:
    port = free_port()
    config = ProviderConfig(
        issuer=f"http://127.0.0.1:{port}",
        clients={
            CLIENT_ID: ProviderClient(CLIENT_SECRET, (CALLBACK,), name=CLIENT_NAME),
            "other-client": ProviderClient("other-secret", (CALLBACK,)),
        },
        users={"alice": ProviderUser(PASSWORD, "Alice Liddell")},
        code_ttl=30,
        token_ttl=120,
        sign_in_ttl=300,
        clock=clock,
    )
    with serving(provider_app(config), port) as url:
        yield Provider(url)


def test_a_code_redeemed_by_another_client_is_an_invalid_grant(browser: httpx2.Client) -> None:
    with in_process(HandClock()) as provider:
        verifier, challenge = pkce()
        code = authorization_code(browser, provider, challenge)
        token_error(exchange(provider, code, verifier, auth=("other-client", "other-secret")), 400, "invalid_grant")
        token_error(exchange(provider, code, verifier), 400, "invalid_grant")


def test_tokens_and_sign_in_requests_expire(browser: httpx2.Client) -> None:
    clock = HandClock()
    with in_process(clock) as provider:
        verifier, challenge = pkce()
        token = exchange(provider, authorization_code(browser, provider, challenge), verifier).json()["access_token"]
        assert me(provider, token).status_code == 200
        clock.now += 119
        assert me(provider, token).status_code == 200
        clock.now += 1
        expired = me(provider, token)
        assert expired.status_code == 401
        assert 'error="invalid_token"' in expired.headers["www-authenticate"]

        page = start(browser, provider, authorize_query(challenge))
        clock.now += 300
        assert_no_redirect(sign_in(browser, provider, page), 400)


def test_the_code_ttl_is_exact(browser: httpx2.Client) -> None:
    clock = HandClock()
    with in_process(clock) as provider:
        verifier, challenge = pkce()
        code = authorization_code(browser, provider, challenge)
        clock.now += 29.9
        assert exchange(provider, code, verifier).status_code == 200
        code = authorization_code(browser, provider, challenge)
        clock.now += 30
        token_error(exchange(provider, code, verifier), 400, "invalid_grant")


# -- configuration and the command line -----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com", "::"])
def test_the_command_refuses_non_loopback_hosts(host: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcp_elicit.reference.provider",
            "--host",
            host,
            "--port",
            str(free_port()),
            "--client-id",
            CLIENT_ID,
            "--client-secret",
            CLIENT_SECRET,
            "--redirect-uri",
            CALLBACK,
            "--user",
            "alice:pw",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "only listens on loopback" in result.stderr


@pytest.mark.parametrize(
    "kwargs",
    [
        {"issuer": "http://127.0.0.1:9/base"},
        {"issuer": "127.0.0.1:9"},
        {"clients": {}},
        {"users": {}},
        {"code_ttl": 0},
    ],
)
def test_the_configuration_is_checked(kwargs: dict[str, object]) -> None:
    config: dict[str, object] = {
        "issuer": "http://127.0.0.1:9",
        "clients": {CLIENT_ID: ProviderClient(CLIENT_SECRET, (CALLBACK,))},
        "users": {"alice": ProviderUser(PASSWORD, "Alice")},
        **kwargs,
    }
    with pytest.raises(ValueError):
        ProviderConfig(**config)  # type: ignore[arg-type]


def test_a_redirect_uri_with_a_fragment_cannot_be_registered() -> None:
    with pytest.raises(ValueError, match="fragment"):
        ProviderClient(CLIENT_SECRET, ("http://127.0.0.1:9/cb#frag",))
