"""What the pages say, read over real HTTP as a person reads them: who asks, why, where Continue leads, what
was done, and for whom. The stand-in provider runs as its own process; its /api/me says who connected."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import httpx2

from mcp_elicit.model import DecisionStatus, Operator, Principal
from mcp_elicit.model.decision import new_elicitation_id
from tests.helpers import pages_site
from tests.helpers.pages_site import SERVER_NAME, Site, ask, consent_at_provider, hidden, sign_in, start

CANARY = "canary-sk-pages-3b9a"

ports, provider, site = pages_site.ports, pages_site.provider, pages_site.site
"""The provider and the site these tests share with the other page tests (fixtures of `pages_site`)."""


def visible(html: str) -> str:
    """The words of a page's body as a person sees them: no tags, entities read, white space collapsed."""
    body = re.sub(r"</?strong>", "", html.split("</style>")[-1])
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", body)).split())


def facts(html: str) -> dict[str, str]:
    """The summary list of a decision page: Server, Tool, For, Until."""
    return {unescape(k): unescape(v) for k, v in re.findall(r"<dt>([^<]*)</dt><dd>([^<]*)</dd>", html)}


def host(url: str) -> str:
    return url.split("://", 1)[1]


def test_the_sign_in_page_names_the_server_and_the_tool_that_waits(site: Site) -> None:
    connect = ask(site, "alice", "connect_account")
    api_key = ask(site, "alice", "set_api_key", tool="set_api_key")
    with httpx2.Client() as browser:
        assert connect.url is not None
        sent = browser.get(connect.url)
        assert sent.status_code == 303
        page = visible(browser.get(f"{site.base}{sent.headers['location']}").text)
        assert f"Sign in to {SERVER_NAME} at {host(site.base)}." in page
        assert "The tool connect_account is waiting for you to connect your Example account." in page
        # Before sign-in nobody is known: neither the message nor the person it was asked of is shown.
        assert "file the ticket" not in page and "alice" not in page.lower()

        form = browser.get(f"{site.base}/signin", params={"next": f"/elicit/{api_key.elicitation_id}"})
        assert "The tool set_api_key is waiting for you to enter your Example API key." in visible(form.text)
        wrong = browser.post(
            f"{site.base}/signin",
            data={"username": "alice", "password": "nope", "next": f"/elicit/{api_key.elicitation_id}",
                  "csrf": hidden(form.text, "csrf")},
        )  # fmt: skip
        assert "Wrong username or password." in wrong.text
        assert "The tool set_api_key is waiting for you to enter your Example API key." in visible(wrong.text)

        plain = visible(browser.get(f"{site.base}/signin").text)
        assert f"Sign in to {SERVER_NAME} at {host(site.base)}." in plain and "waiting" not in plain
        unknown = browser.get(f"{site.base}/signin", params={"next": f"/elicit/{new_elicitation_id()}"})
        assert "waiting" not in visible(unknown.text)
    site.store.transition(connect, DecisionStatus.CANCELLED, caller=Operator(), reason="the test ends it")
    with httpx2.Client() as browser:
        ended = browser.get(f"{site.base}/signin", params={"next": f"/elicit/{connect.elicitation_id}"})
        assert ended.status_code == 200 and "waiting" not in visible(ended.text)


def test_the_decision_page_says_where_continue_leads_and_for_whom(site: Site) -> None:
    connect = ask(site, "alice", "connect_account")
    api_key = ask(site, "bob", "set_api_key", tool="set_api_key")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", "/")
        assert connect.url is not None
        page = browser.get(connect.url).text
        said = visible(page)
        assert f"{SERVER_NAME} asks you to connect your Example account" in said
        assert (
            f"Continue takes you to Example at {host(site.provider)}, where you sign in and allow access; "
            "then you come back here." in said
        )
        summary = facts(page)
        assert (summary["Server"], summary["Tool"], summary["For"]) == (SERVER_NAME, "connect_account", "Alice (alice)")
    with httpx2.Client() as browser:
        sign_in(browser, site, "bob", "bob-pw", "/")
        assert api_key.url is not None
        page = browser.get(api_key.url).text
        assert "Continue opens a form on this server, where you enter the key." in visible(page)
        assert "Continue takes you to" not in visible(page)
        assert facts(page)["For"] == "bob"  # no display name configured: the user's own name


def test_the_done_page_says_whom_the_account_was_connected_as(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        _, pressed = start(browser, site, decision)
        done = browser.get(consent_at_provider(browser, pressed.headers["location"], allow=True))
    assert done.status_code == 200
    assert "Done Connected to Example as alice (Alice Liddell). You can close this page" in visible(done.text)
    token = site.vault.get(Principal(f"{site.base}#alice", "browser"), "example-token")
    assert token is not None and token not in done.text
    trail = site.store.audit_trail(decision.elicitation_id, Operator())
    assert trail[-1].to_status == "external_completed"
    assert trail[-1].reason == "Example connected as alice (Alice Liddell)"


def test_the_done_page_says_the_key_is_stored_and_never_shows_it(site: Site) -> None:
    decision = ask(site, "alice", "set_api_key", tool="set_api_key")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        _, form = start(browser, site, decision)
        posted = {"csrf": hidden(form.text, "csrf"), "api_key": CANARY}
        done = browser.post(f"{site.base}/elicit/{decision.elicitation_id}/key", data=posted)
    assert done.status_code == 200 and CANARY not in done.text
    assert f"Done Your Example API key is stored on {SERVER_NAME}." in visible(done.text)


def test_a_callback_sent_to_sign_in_names_the_tool_its_state_is_for(site: Site) -> None:
    decision = ask(site, "alice", "connect_account")
    with httpx2.Client() as browser:
        sign_in(browser, site, "alice", "alice-pw", f"/elicit/{decision.elicitation_id}")
        _, pressed = start(browser, site, decision)
        state = parse_qs(urlsplit(pressed.headers["location"]).query)["state"][0]
    with httpx2.Client() as elsewhere:
        sent = elsewhere.get(f"{site.base}/elicit/callback", params={"code": "x", "state": state})
        form = visible(elsewhere.get(f"{site.base}{sent.headers['location']}").text)
        assert "The tool connect_account is waiting for you to connect your Example account." in form
        forged = elsewhere.get(f"{site.base}/elicit/callback", params={"code": "x", "state": state[:-4] + "AAAA"})
        assert "waiting" not in visible(elsewhere.get(f"{site.base}{forged.headers['location']}").text)
