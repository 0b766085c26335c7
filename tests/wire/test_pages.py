"""URL-mode pages over real HTTP: sign-in, identity check, third-party OAuth with PKCE, API key, outcomes."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from starlette.applications import Starlette

from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    DecisionStatus,
    Operator,
    Principal,
    new_operation,
    new_url_decision,
)
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.store import open_store
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers, Vault, VaultKeyRing
from mcp_elicit.web.pages import UrlPages
from tests.helpers.approvers_site import QUESTION_SCHEMA, approvers_site, signed_in
from tests.helpers.http_harness import free_port, serving
from tests.helpers.pages_site import VAULT_KEYS, Site, consent_at_provider, hidden, provider_flows, provider_process

CANARY = "canary-sk-5d1e0f"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """The stand-in third party, as its own process; our site's port is reserved now for its redirect URI."""
    port, site_port = free_port(), free_port()
    redirect_uri = f"http://127.0.0.1:{site_port}/elicit/callback"
    with provider_process(port, redirect_uri, "--client-name", "Elicit pages") as url:
        yield url, site_port


@pytest.fixture
def site(store_url: str, provider: tuple[str, int]) -> Iterator[Site]:
    provider_url, port = provider
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"s" * 32]), public_base_url=base)
    auth = LocalAuthorizationServer(
        base, LocalUsers.from_text("alice:alice-pw:Alice,bob:bob-pw:Bob"), store, signing_keys=[b"a" * 32]
    )
    vault = Vault(store, VaultKeyRing.from_text(VAULT_KEYS))
    pages = UrlPages(
        elicitation=elicitation,
        sign_in=auth,
        vault=vault,
        flows=provider_flows(provider_url, profile=False),
        page_key=b"p" * 32,
        server_title="Test server",
        public_base_url=base,
    )
    app = Starlette(routes=[*auth.routes(), *pages.routes()])
    with serving(app, port):
        yield Site(base, store, elicitation, vault, provider_url)
    store.close()


def ask(site: Site, user: str, key: str, ttl: timedelta = timedelta(minutes=10)) -> Decision:
    principal = Principal(f"{site.base}#{user}", "client-x")
    now = datetime.now(UTC)
    digest = f"sha256:{uuid.uuid4().hex}"  # one open operation per call: each question here is its own call
    operation = site.store.create_operation(
        new_operation(principal, method="tools/call", target="connect_account", request_digest=digest, now=now,
                      ttl=timedelta(hours=1))
    )  # fmt: skip
    elicitation_id = new_elicitation_id()
    return site.store.create_decision(
        new_url_decision(
            DecisionOrigin(operation_id=operation.operation_id, key=key, principal=principal,
                           origin_method="tools/call", origin_request_digest=digest),
            message="Connect your Example account so I can list your repositories",
            url=site.elicitation.decision_url(elicitation_id), now=now, ttl=ttl, elicitation_id=elicitation_id,
        )
    )  # fmt: skip


def sign_in(browser: httpx2.Client, site: Site, user: str, password: str, next_path: str) -> None:
    form = browser.get(f"{site.base}/signin", params={"next": next_path})
    response = browser.post(
        f"{site.base}/signin",
        data={"username": user, "password": password, "next": next_path, "csrf": hidden(form.text, "csrf")},
    )
    assert response.status_code == 303, response.text
    assert response.headers["location"] == next_path


def open_page(browser: httpx2.Client, decision: Decision) -> httpx2.Response:
    assert decision.url is not None
    return browser.get(decision.url)


def start(browser: httpx2.Client, site: Site, decision: Decision) -> httpx2.Response:
    page = open_page(browser, decision)
    assert page.status_code == 200, page.text
    return browser.post(
        f"{site.base}/elicit/{decision.elicitation_id}/continue", data={"csrf": hidden(page.text, "csrf")}
    )


def test_sign_in_is_required_first(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        response = open_page(browser, decision)
    assert response.status_code == 303
    assert response.headers["location"] == f"/signin?next=%2Felicit%2F{decision.elicitation_id}"
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.REQUESTED


def test_oauth_connect_end_to_end_stores_the_token_server_side(site: Site, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        page = open_page(browser, decision)
        assert "Test server asks you to connect your Example account" in page.text
        assert "Connect your Example account so I can list your repositories" in page.text
        assert "connect_account" in page.text and "alice" in page.text
        started = browser.post(
            f"{site.base}/elicit/{decision.elicitation_id}/continue", data={"csrf": hidden(page.text, "csrf")}
        )
        assert started.status_code == 303
        authorize = started.headers["location"]
        query = parse_qs(urlsplit(authorize).query)
        assert query["code_challenge_method"] == ["S256"]
        assert "code_verifier" not in authorize
        callback = consent_at_provider(browser, authorize, allow=True)
        assert callback.startswith(f"{site.base}/elicit/callback?")
        done = browser.get(callback)
        assert done.status_code == 200 and "Done" in done.text
        replay = browser.get(callback)
        assert replay.status_code == 200 and "Done" in replay.text
    stored = site.store.get_decision(decision.elicitation_id, Operator())
    assert stored.status is DecisionStatus.EXTERNAL_COMPLETED
    token = site.vault.get(Principal(f"{site.base}#alice", "browser"), "example-token")
    assert token is not None and len(token) > 10
    trail = site.store.audit_trail(decision.elicitation_id, Operator())
    assert [e.to_status for e in trail].count("external_completed") == 1
    assert token not in caplog.text
    assert all(token not in str(e.details) + e.reason for e in trail)


def test_another_user_is_refused_and_audited_and_nothing_changes(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "bob", "bob-pw", f"/elicit/{decision.elicitation_id}")
        refused = open_page(browser, decision)
        assert refused.status_code == 403 and "another account" in refused.text
        posted = browser.post(f"{site.base}/elicit/{decision.elicitation_id}/continue", data={"csrf": "x"})
        assert posted.status_code == 403
    stored = site.store.get_decision(decision.elicitation_id, Operator())
    assert stored == decision
    notes = [e for e in site.store.audit_trail(decision.elicitation_id, Operator()) if e.actor.startswith("browser:")]
    assert notes and all(e.from_status == e.to_status == "requested" for e in notes)
    assert notes[0].actor == f"browser:{site.base}#bob"


def test_another_account_signs_out_and_in_as_the_one_asked_and_comes_back_to_the_decision(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    path = f"/elicit/{decision.elicitation_id}"
    with httpx2.Client() as browser:
        sign_in(browser, site, "bob", "bob-pw", path)
        bobs_session = browser.cookies.get("mcp-elicit-session")
        refused = open_page(browser, decision)
        assert refused.status_code == 403 and "Sign out and switch account" in refused.text
        assert "You are signed in as Bob (bob)" in refused.text
        assert "alice" not in refused.text.lower() and decision.message not in refused.text  # whose, and what: untold
        assert '<form method="post" action="/signout">' in refused.text and "<script" not in refused.text
        switch = {"csrf": hidden(refused.text, "csrf"), "next": hidden(refused.text, "next")}
        assert switch["next"] == f"/signin?next=%2Felicit%2F{decision.elicitation_id}"

        out = browser.post(f"{site.base}/signout", data=switch)
        assert out.status_code == 303 and out.headers["location"] == switch["next"]
        assert browser.cookies.get("mcp-elicit-session") is None
        assert open_page(browser, decision).headers["location"] == f"/signin?next=%2Felicit%2F{decision.elicitation_id}"
        form = browser.get(f"{site.base}{out.headers['location']}")
        assert form.status_code == 200 and hidden(form.text, "next") == path
        signed = browser.post(
            f"{site.base}/signin",
            data={"username": "alice", "password": "alice-pw", "next": path, "csrf": hidden(form.text, "csrf")},
        )
        assert signed.status_code == 303 and signed.headers["location"] == path
        page = open_page(browser, decision)
        assert page.status_code == 200 and decision.message in page.text
        callback = consent_at_provider(browser, start(browser, site, decision).headers["location"], allow=True)
        assert "Done" in browser.get(callback).text
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.EXTERNAL_COMPLETED
    trail = site.store.audit_trail(decision.elicitation_id, Operator())
    assert [(e.actor.rsplit("#")[-1], e.from_status, e.to_status) for e in trail if e.actor.startswith("browser:")] == [
        ("bob", "requested", "requested"),
        ("alice", "requested", "accepted_url"),
        ("alice", "accepted_url", "external_pending"),
        ("alice", "external_pending", "external_completed"),
    ]
    with httpx2.Client() as elsewhere:  # a copy of bob's cookie taken before still names bob (no server-side logout)
        assert bobs_session is not None
        elsewhere.cookies.set("mcp-elicit-session", bobs_session)
        assert open_page(elsewhere, decision).status_code == 403


def test_a_foreign_callback_offers_the_switch_back_to_the_decision_page_and_changes_nothing(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        state = parse_qs(urlsplit(start(browser, site, decision).headers["location"]).query)["state"][0]
    pending = site.store.get_decision(decision.elicitation_id, Operator())
    with httpx2.Client() as other:
        sign_in(other, site, "bob", "bob-pw", "/")
        refused = other.get(f"{site.base}/elicit/callback", params={"code": "x", "state": state})
        assert refused.status_code == 403 and "Sign out and switch account" in refused.text
        assert hidden(refused.text, "next") == f"/signin?next=%2Felicit%2F{decision.elicitation_id}"
        assert "alice" not in refused.text.lower()
        assert other.post(f"{site.base}/signout", data={"next": "/"}).status_code == 403
    assert site.store.get_decision(decision.elicitation_id, Operator()) == pending
    [note] = [e for e in site.store.audit_trail(decision.elicitation_id, Operator()) if e.actor.endswith("#bob")]
    assert note.reason == "callback presented by another user" and note.from_status == note.to_status


def test_provider_denial_fails_the_decision_with_a_way_forward(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        callback = consent_at_provider(browser, start(browser, site, decision).headers["location"], allow=False)
        failed = browser.get(callback)
    assert "did not work" in failed.text and "new link" in failed.text
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.EXTERNAL_FAILED


def test_tampered_state_and_foreign_state_are_refused(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        authorize = start(browser, site, decision).headers["location"]
        state = parse_qs(urlsplit(authorize).query)["state"][0]
        forged = browser.get(f"{site.base}/elicit/callback", params={"code": "x", "state": state[:-4] + "AAAA"})
        assert forged.status_code == 400
    with httpx2.Client() as other:
        sign_in(other, site, "bob", "bob-pw", "/")
        stolen = other.get(f"{site.base}/elicit/callback", params={"code": "x", "state": state})
        assert stolen.status_code == 403
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.EXTERNAL_PENDING


def test_api_key_form_posts_straight_to_the_vault(site: Site, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    decision = ask(site, "alice", "set_api_key")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        form = start(browser, site, decision)
        assert form.status_code == 200 and 'type="password"' in form.text
        done = browser.post(
            f"{site.base}/elicit/{decision.elicitation_id}/key",
            data={"csrf": hidden(form.text, "csrf"), "api_key": CANARY},
        )
        assert "Done" in done.text
    assert site.vault.get(Principal(f"{site.base}#alice", "browser"), "example-api-key") == CANARY
    trail = site.store.audit_trail(decision.elicitation_id, Operator())
    assert CANARY not in caplog.text and all(CANARY not in str(e.details) + e.reason for e in trail)


def until_past(moment: datetime) -> None:
    while datetime.now(UTC) <= moment:
        time.sleep(0.05)


def test_expired_and_cancelled_pages(site: Site) -> None:
    cancelled = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", "/")
        page = open_page(browser, cancelled)
        gone = browser.post(
            f"{site.base}/elicit/{cancelled.elicitation_id}/cancel", data={"csrf": hidden(page.text, "csrf")}
        )
        assert "Cancelled" in gone.text
        # Asked just before its page opens: its 2 s run from here, not from before the sign-in (slow on a loaded
        # machine), and the post waits for the expiry itself rather than a guess of it.
        expiring = ask(site, "alice", "connect_account", ttl=timedelta(seconds=2))
        page = open_page(browser, expiring)
        assert page.status_code == 200, "the page opened after its decision expired: the machine stalled 2 s"
        until_past(expiring.expires_at)
        late = browser.post(
            f"{site.base}/elicit/{expiring.elicitation_id}/continue", data={"csrf": hidden(page.text, "csrf")}
        )
        assert late.status_code == 410 and "expired" in late.text
        assert "next request starts a new step" in open_page(browser, expiring).text
        overdue = ask(site, "alice", "connect_account", ttl=timedelta(seconds=1))
        until_past(overdue.expires_at)
        unopened = open_page(browser, overdue)
        assert unopened.status_code == 410 and "Continue" not in unopened.text
    assert site.store.get_decision(overdue.elicitation_id, Operator()).status is DecisionStatus.EXPIRED
    assert site.store.get_decision(expiring.elicitation_id, Operator()).status is DecisionStatus.EXPIRED
    assert site.store.get_decision(cancelled.elicitation_id, Operator()).status is DecisionStatus.CANCELLED


def test_decision_urls_carry_nothing_but_the_id(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    assert decision.url == f"{site.base}/elicit/{decision.elicitation_id}"
    with pytest.raises(ValueError, match="HTTPS"):
        Elicitation(
            site.store, request_state=RequestState(single_process=True), public_base_url="http://elicit.example"
        )
    with pytest.raises(ValueError, match=r"credentials|query"):
        Elicitation(
            site.store, request_state=RequestState(single_process=True), public_base_url="https://u:p@elicit.example"
        )


def test_a_late_callback_is_refused_and_stores_nothing(site: Site) -> None:
    decision = ask(site, "alice", "connect_account", ttl=timedelta(seconds=2))
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        callback = consent_at_provider(browser, start(browser, site, decision).headers["location"], allow=True)
        time.sleep(2.1)
        late = browser.get(callback)
    assert late.status_code == 410 and "expired" in late.text
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.EXPIRED
    assert site.vault.get(Principal(f"{site.base}#alice", "browser"), "example-token") is None


def post(browser: httpx2.Client, site: Site, decision: Decision, step: str, /, **data: str) -> httpx2.Response:
    """POST `data` to the decision's `step` (continue, cancel, key, answer) as a browser's form does."""
    return browser.post(f"{site.base}/elicit/{decision.elicitation_id}/{step}", data=data)


def test_a_step_the_server_has_no_flow_for_cannot_be_started_answered_or_keyed(site: Site) -> None:
    decision = ask(site, "alice", "no_such_flow")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        page = open_page(browser, decision)
        assert page.status_code == 200 and "Test server asks you to finish this step" in page.text
        assert "Continue goes on with this step." in page.text
        csrf = hidden(page.text, "csrf")
        started = post(browser, site, decision, "continue", csrf=csrf)
        assert started.status_code == 404 and "This step cannot be done here" in started.text
        answered = post(browser, site, decision, "answer", csrf=csrf, action="accept")
        assert answered.status_code == 404 and "This step has no form" in answered.text
        keyed = post(browser, site, decision, "key", csrf=csrf, api_key=CANARY)
        assert keyed.status_code == 409 and "Start from the beginning" in keyed.text
    assert site.store.get_decision(decision.elicitation_id, Operator()) == decision


def test_posts_without_the_pages_csrf_token_or_sign_in_change_nothing(site: Site) -> None:
    decision = ask(site, "alice", "set_api_key")
    with httpx2.Client() as stranger:
        for action in ("continue", "cancel", "key", "answer"):
            sent = post(stranger, site, decision, action, csrf="x")
            assert sent.status_code == 303 and sent.headers["location"].startswith("/signin?next="), action
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        for action in ("continue", "cancel", "key", "answer"):
            forged = post(browser, site, decision, action, csrf="forged", api_key=CANARY, action="accept")
            assert forged.status_code == 403 and "This form has expired" in forged.text, action
    assert site.store.get_decision(decision.elicitation_id, Operator()) == decision
    assert site.vault.get(Principal(f"{site.base}#alice", "browser"), "example-api-key") is None


def test_the_key_form_takes_a_key_only_while_the_step_is_open_and_not_an_empty_or_oversized_one(site: Site) -> None:
    decision = ask(site, "alice", "set_api_key")
    owner = Principal(f"{site.base}#alice", "browser")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        csrf = hidden(open_page(browser, decision).text, "csrf")
        early = post(browser, site, decision, "key", csrf=csrf, api_key=CANARY)
        assert early.status_code == 409 and "press Continue" in early.text  # Continue first
        form = start(browser, site, decision)
        assert form.status_code == 200 and 'type="password"' in form.text
        for refused in ("   ", "k" * 4097):
            again = post(browser, site, decision, "key", csrf=csrf, api_key=refused)
            assert again.status_code == 200 and 'type="password"' in again.text and "Done" not in again.text
        assert site.vault.get(owner, "example-api-key") is None
        assert post(browser, site, decision, "cancel", csrf=csrf).text.count("Cancelled") >= 1
        late = post(browser, site, decision, "key", csrf=csrf, api_key=CANARY)
        assert late.status_code == 200 and "Cancelled" in late.text and CANARY not in late.text
    assert site.vault.get(owner, "example-api-key") is None
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.CANCELLED


def test_an_oauth_callback_in_a_browser_not_signed_in_is_sent_to_sign_in_first(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        state = parse_qs(urlsplit(start(browser, site, decision).headers["location"]).query)["state"][0]
    with httpx2.Client() as elsewhere:
        sent = elsewhere.get(f"{site.base}/elicit/callback", params={"code": "x", "state": state})
        assert sent.status_code == 303 and sent.headers["location"].startswith("/signin?next=%2Felicit%2Fcallback")
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.EXTERNAL_PENDING


def test_a_link_to_no_decision_at_all_is_not_valid_and_audits_nothing(site: Site) -> None:
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", "/")
        unknown = browser.get(f"{site.base}/elicit/{new_elicitation_id()}")
        assert unknown.status_code == 404 and "This link is not valid" in unknown.text
        posted = browser.post(f"{site.base}/elicit/{new_elicitation_id()}/continue", data={"csrf": "x"})
        assert posted.status_code == 404 and "This link is not valid" in posted.text


def test_pages_made_with_a_short_key_or_flows_but_no_vault_are_refused(site: Site) -> None:
    auth = LocalAuthorizationServer(site.base, LocalUsers.from_text("alice:alice-pw"), site.store, [b"a" * 32])
    settings = {"elicitation": site.elicitation, "sign_in": auth, "server_title": "T", "public_base_url": site.base}
    with pytest.raises(ValueError, match="page key must be 32 bytes"):
        UrlPages(**settings, vault=site.vault, flows={}, page_key=b"p" * 31)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pass vault=Vault"):
        UrlPages(**settings, vault=None, flows=provider_flows(site.provider, profile=False), page_key=b"p" * 32)  # type: ignore[arg-type]


def test_the_pages_clock_decides_that_an_opened_decision_is_overdue(store_url: str) -> None:
    """The page expires a decision opened past its deadline by the pages' clock, as its other checks do."""
    with approvers_site(store_url) as site:
        decision = site.ask(None, schema=QUESTION_SCHEMA, ttl=timedelta(minutes=10))
        site.clock.advance(timedelta(minutes=11))
        with signed_in(site, "alice") as alice:
            opened = alice.get(site.page(decision))
        assert opened.status_code == 410, opened.text
        [*_, last] = site.store.audit_trail(decision.elicitation_id, Operator())
        assert (last.to_status, last.reason) == ("expired", "opened after the TTL")
