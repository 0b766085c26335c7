"""A token exchange the provider refuses: the person sees why, the decision fails now, the vault stays empty.

The stand-in provider runs as its own process and refuses for real: a code already redeemed (RFC 6749
§4.1.2, `invalid_grant`), a code that lived past its lifetime. One more provider, served on loopback here,
answers every exchange with an error whose text carries a link with a secret in its query, as careless
providers do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_elicit.model import DecisionStatus, Operator, Principal
from tests.helpers import pages_site
from tests.helpers.http_harness import free_port, serving
from tests.helpers.pages_site import (
    PROVIDER_CLIENT,
    PROVIDER_SECRET,
    Site,
    ask,
    consent_at_provider,
    provider_process,
    served_site,
    sign_in,
    start,
)

LEAKED = "leaked-f00d"

ports, provider, site = pages_site.ports, pages_site.provider, pages_site.site
"""The provider and the site these tests share with the other page tests (fixtures of `pages_site`)."""


@pytest.fixture(scope="module")
def hasty_provider() -> Iterator[tuple[str, int]]:
    """A provider whose codes live 0.3 s, and the port of the site it sends them to."""
    site_port = free_port()
    with provider_process(free_port(), f"http://127.0.0.1:{site_port}/elicit/callback", "--code-ttl", "0.3") as url:
        yield url, site_port


def callback_for(browser: httpx2.Client, site: Site, user: str) -> tuple[str, str]:
    """Ask `user` to connect, sign in, press Continue and Allow: the decision id and the callback URL."""
    decision = ask(site, user, "connect_account")
    sign_in(browser, site, user, f"{user}-pw", f"/elicit/{decision.elicitation_id}")
    _, pressed = start(browser, site, decision)
    assert pressed.status_code == 303, pressed.text
    return decision.elicitation_id, consent_at_provider(browser, pressed.headers["location"], allow=True)


def assert_failed_at_the_provider(site: Site, elicitation_id: str, page: httpx2.Response, why: str) -> None:
    assert page.status_code == 200, page.text
    assert "That did not work" in page.text
    assert "Example refused the connection" in page.text and why in page.text
    assert "new link" in page.text
    stored = site.store.get_decision(elicitation_id, Operator())
    assert stored.status is DecisionStatus.EXTERNAL_FAILED
    [failed] = [e for e in site.store.audit_trail(elicitation_id, Operator()) if e.to_status == "external_failed"]
    assert failed.from_status == "external_pending"
    assert failed.reason.startswith("the token exchange failed at Example: invalid_grant")
    assert why in failed.reason
    assert site.vault.get(Principal(f"{site.base}#alice", "browser"), "example-token") is None


def test_a_code_redeemed_before_the_callback_fails_the_decision_with_the_providers_reason(site: Site) -> None:
    with httpx2.Client() as browser:
        elicitation_id, callback = callback_for(browser, site, "alice")
        code = parse_qs(urlsplit(callback).query)["code"][0]
        # Someone else redeems the code first (a wrong verifier is enough: the first attempt spends it).
        spent = httpx2.post(
            f"{site.provider}/token",
            data={"grant_type": "authorization_code", "code": code, "redirect_uri": f"{site.base}/elicit/callback",
                  "code_verifier": "x" * 43},
            auth=(PROVIDER_CLIENT, PROVIDER_SECRET),
        )  # fmt: skip
        assert spent.status_code == 400 and spent.json()["error"] == "invalid_grant"
        failed = browser.get(callback)
        again = browser.get(callback)
    assert_failed_at_the_provider(site, elicitation_id, failed, "the code was already used")
    assert again.status_code == 200 and "That did not work" in again.text
    assert [e.to_status for e in site.store.audit_trail(elicitation_id, Operator())].count("external_failed") == 1


def test_an_expired_code_fails_the_decision_at_once(store_url: str, hasty_provider: tuple[str, int]) -> None:
    with served_site(store_url, *hasty_provider) as site, httpx2.Client() as browser:
        elicitation_id, callback = callback_for(browser, site, "alice")
        time.sleep(0.5)
        failed = browser.get(callback)
        assert_failed_at_the_provider(site, elicitation_id, failed, "unknown or expired code")


def test_a_providers_error_text_is_redacted_in_the_page_the_audit_and_the_log(
    store_url: str, provider: str, caplog: pytest.LogCaptureFixture, ports: tuple[int, int]
) -> None:
    caplog.set_level(logging.DEBUG)

    async def refuse(request: Request) -> Response:
        return JSONResponse(
            {"error": "invalid_grant", "error_description": f"see https://idp.example/help?code={LEAKED} for help"},
            status_code=400,
        )

    token_port = free_port()
    with (
        serving(Starlette(routes=[Route("/token", refuse, methods=["POST"])]), token_port),
        served_site(store_url, provider, ports[0], token_url=f"http://127.0.0.1:{token_port}/token") as site,
        httpx2.Client() as browser,
    ):
        elicitation_id, callback = callback_for(browser, site, "alice")
        failed = browser.get(callback)
        assert_failed_at_the_provider(site, elicitation_id, failed, "https://idp.example/help?code=[redacted]")
        trail = site.store.audit_trail(elicitation_id, Operator())
    assert LEAKED not in failed.text
    assert all(LEAKED not in e.reason + str(e.details) for e in trail)
    assert LEAKED not in caplog.text


@pytest.mark.parametrize(
    ("answer", "page_says", "audit_says"),
    [
        (None, "could not be reached or gave an answer", "the token exchange with Example failed (ConnectError)"),
        (
            Response("<html>maintenance</html>", media_type="text/html"),
            "could not be reached or gave an answer",
            "the token exchange with Example failed (",
        ),
        (JSONResponse({"token_type": "Bearer", "access_token": ""}), "Example gave no access.", "gave no access token"),
    ],
    ids=["nothing-listens", "not-json", "no-access-token"],
)
def test_a_token_endpoint_that_cannot_be_reached_or_gives_no_token_fails_the_decision(
    store_url: str, provider: str, ports: tuple[int, int], answer: Response | None, page_says: str, audit_says: str
) -> None:
    token_port = free_port()

    async def token(request: Request) -> Response:
        assert answer is not None
        return answer

    with ExitStack() as stack:
        if answer is not None:  # else nothing listens on the token port
            stack.enter_context(serving(Starlette(routes=[Route("/token", token, methods=["POST"])]), token_port))
        site = stack.enter_context(
            served_site(store_url, provider, ports[0], token_url=f"http://127.0.0.1:{token_port}/token")
        )
        browser = stack.enter_context(httpx2.Client())
        elicitation_id, callback = callback_for(browser, site, "alice")
        failed = browser.get(callback)
        assert failed.status_code == 200 and "That did not work" in failed.text and page_says in failed.text
        assert "Nothing was stored" in failed.text
        assert site.store.get_decision(elicitation_id, Operator()).status is DecisionStatus.EXTERNAL_FAILED
        [entry] = [e for e in site.store.audit_trail(elicitation_id, Operator()) if e.to_status == "external_failed"]
        assert audit_says in entry.reason
        assert site.vault.get(Principal(f"{site.base}#alice", "browser"), "example-token") is None


def test_a_token_whose_account_the_provider_will_not_name_is_stored_without_a_name(
    store_url: str, provider: str, ports: tuple[int, int]
) -> None:
    """The token comes from another endpoint than the stand-in provider's, so its /api/me does not know it."""

    async def token(request: Request) -> Response:
        return JSONResponse({"access_token": "tok-unknown-to-the-profile-api", "token_type": "Bearer"})

    token_port = free_port()
    with (
        serving(Starlette(routes=[Route("/token", token, methods=["POST"])]), token_port),
        served_site(store_url, provider, ports[0], token_url=f"http://127.0.0.1:{token_port}/token") as site,
        httpx2.Client() as browser,
    ):
        elicitation_id, callback = callback_for(browser, site, "alice")
        done = browser.get(callback)
        assert done.status_code == 200 and "Your Example account is connected." in done.text
        assert " as " not in done.text.split("<h1>Done</h1>")[1]
        assert site.store.get_decision(elicitation_id, Operator()).status is DecisionStatus.EXTERNAL_COMPLETED
        stored = site.vault.get(Principal(f"{site.base}#alice", "browser"), "example-token")
        assert stored == "tok-unknown-to-the-profile-api"
