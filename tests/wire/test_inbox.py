"""The decision inbox: a person's pending decisions on one page, answered, continued, declined or cancelled there,
and the call that asked picks the move up; an operator sees everyone's and cancels with a reason.

Real HTTP on loopback (the MCP endpoint, sign-in, decision pages and inbox in one app), httpx2 as the browser,
the MCP client in-process (its principal is the configured local user alice). Decisions of other people and
other clients are recorded in the same store the way the runtime records them.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp_types import CallToolResult, ElicitResult

from mcp_elicit.model import (
    DecisionStatus,
    JSONObject,
    Operator,
)
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.reference.deployment import build_http_deployment, http_settings
from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.settings import SettingsError
from mcp_elicit.store import open_store
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers
from mcp_elicit.web.html import HEADERS
from mcp_elicit.web.inbox import MAX_REASON, InboxSettings
from mcp_elicit.web.mount import WebPages, mount_web
from tests.helpers.corrupt_rows import corrupt, corrupt_operation
from tests.helpers.http_harness import free_port, serving
from tests.helpers.inbox_site import (
    PAGE_SIZE,
    PASSWORDS,
    USERS,
    browser,
    call,
    inbox_site,
    only,
    recorded,
    sign_in,
    token,
)
from tests.helpers.inbox_site import site as site
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.pages_site import hidden
from tests.helpers.person import Person
from tests.helpers.results import error_text, text

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]
VAULT_KEY = "v1:dmF1bHQta2V5LXZhdWx0LWtleS12YXVsdC1rZXktMDE="


def entries(html: str) -> dict[str, str]:
    """The inbox's entries by decision id, each its section's HTML."""
    sections = re.findall(r'<section class="entry" aria-labelledby="entry-([0-9a-f-]+)">(.*?)</section>', html, re.S)
    return dict(sections)


def facts(section: str) -> dict[str, str]:
    """The entry's facts as a person reads them: their text, markup left out."""
    found = re.findall(r"<dt>([^<]*)</dt><dd>(.*?)</dd>", section)
    return {term: unescape(re.sub(r"<[^>]*>", "", value)) for term, value in found}


# -- the listing -----------------------------------------------------------------------------------------------


async def test_what_a_tool_or_client_put_in_a_decision_is_shown_as_text_never_as_markup(site: Site) -> None:
    hostile = recorded(
        site,
        "alice",
        tool="<img src=x onerror=alert(1)>",
        client="\"'><svg onload=alert(2)>",
        message="\"><script>alert(3)</script>' onmouseover='alert(4)",
    )
    named = recorded(site, "alice", client="client-named")
    site.store.oauth_client_put("client-named", {"client_name": "<b>Claude</b>\u202e Desktop", "redirect_uris": []})
    with browser() as alice:
        sign_in(alice, site, "alice")
        page = alice.get(f"{site.base}/inbox").text
    shown = entries(page)[hostile.elicitation_id]
    for raw in ("<script", "<img", "<svg", "onmouseover='", "<b>", "\u202e"):
        assert raw not in page
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in shown and "&lt;img src=x onerror=alert(1)&gt;" in shown
    assert "&quot;&#x27;&gt;&lt;svg onload=alert(2)&gt;" in shown
    # A registered name is the client's own claim: shown as text, its hidden characters by code point, with the id.
    assert facts(entries(page)[named.elicitation_id])["Client"] == "<b>Claude</b><U+202E> Desktop (client-named)"


async def test_the_inbox_lists_the_persons_pending_decisions_across_tools_and_clients(site: Site) -> None:
    recorded(site, "alice", message="Past its deadline", ttl=timedelta(milliseconds=1))
    url_page = error_text(await call(site, "legacy", "set_key"))
    assert "/elicit/" in url_page
    await call(site, "legacy", "book", city="Oslo")
    booked, keyed = only(site, "How many seats to Oslo?"), only(site, "Enter your Example API key")
    elsewhere = recorded(site, "alice", tool="deploy", client="client-y", message="Deploy <b>v2</b> & more?")
    bobs = recorded(site, "bob", message="Bob's secret question")
    answered = recorded(site, "alice", message="Already answered")
    site.store.transition(answered, DecisionStatus.ACCEPTED, caller=Operator(), content={"seats": 1})

    with browser() as alice:
        unsigned = alice.get(f"{site.base}/inbox")
        assert unsigned.status_code == 303 and unsigned.headers["location"] == "/signin?next=%2Finbox"
        sign_in(alice, site, "alice")
        inbox = alice.get(f"{site.base}/inbox")
    assert inbox.status_code == 200
    assert all(inbox.headers[name.lower()] == value for name, value in HEADERS.items())
    html = inbox.text
    assert "<script" not in html.lower() and "Decisions waiting for you" in html and "Alice Liddell (alice)" in html
    shown = entries(html)
    # Newest first, one page of PAGE_SIZE: the three alice asked most recently that still wait.
    assert list(shown) == [elsewhere.elicitation_id, booked.elicitation_id, keyed.elicitation_id]
    assert "Bob's secret question" not in html and "Already answered" not in html and "Past its deadline" not in html

    other = shown[elsewhere.elicitation_id]
    assert "deploy asks you to answer a question" in other and "Deploy &lt;b&gt;v2&lt;/b&gt; &amp; more?" in other
    asked, until = (moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") for moment in
                    (elsewhere.created_at, elsewhere.expires_at))  # fmt: skip
    assert facts(other) == {"Tool": "deploy", "Client": "client-y", "Asked": asked, "Until": until}
    form = shown[booked.elicitation_id]
    assert f'<a class="button" href="/elicit/{booked.elicitation_id}">Answer</a>' in form
    assert "How many seats to Oslo?" in form and facts(form)["Tool"] == "book"
    assert facts(form)["Call"] == 'book(city="Oslo")' == booked.about
    with browser() as alice:
        sign_in(alice, site, "alice")
        answering = facts(alice.get(f"{site.base}/elicit/{booked.elicitation_id}").text)
    assert answering["Call"] == facts(form)["Call"] and answering["Asked"] == facts(form)["Asked"], (
        "the decision page says what the inbox says"
    )
    assert ">Decline</button>" in form and ">Cancel</button>" in form
    link = shown[keyed.elicitation_id]
    assert f'<a class="button" href="/elicit/{keyed.elicitation_id}">Continue</a>' in link
    assert "set_key asks you to enter your Example API key" in link
    assert site.store.get_decision(bobs.elicitation_id, Operator()).status is DecisionStatus.REQUESTED


async def test_the_inbox_pages_by_cursor_and_refuses_a_made_up_one(site: Site) -> None:
    made = [recorded(site, "alice", message=f"question {n}") for n in range(7)]
    seen: list[str] = []
    with browser() as alice:
        sign_in(alice, site, "alice")
        url = f"{site.base}/inbox"
        pages = 0
        while True:
            listed = alice.get(url)
            assert listed.status_code == 200
            shown = entries(listed.text)
            assert len(shown) <= PAGE_SIZE
            seen.extend(shown)
            pages += 1
            more = re.search(r'<a href="(/inbox\?after=[^"]+)" rel="next">More</a>', listed.text)
            if more is None:
                break
            assert '<a href="/inbox">First page</a>' in listed.text or pages == 1
            url = site.base + more.group(1).replace("&amp;", "&")
        refused = alice.get(f"{site.base}/inbox", params={"after": "not-a-cursor"})
    assert pages == 3
    assert seen == [d.elicitation_id for d in reversed(made)]
    assert refused.status_code == 400 and "not valid" in refused.text


def test_a_decision_that_cannot_be_read_is_left_out_and_said_and_the_others_are_listed(tmp_path: Path) -> None:
    with inbox_site(f"sqlite://{tmp_path / 'elicit.db'}") as site:
        fine = recorded(site, "alice", message="Readable")
        broken = recorded(site, "alice", message="Corrupt")
        with closing(sqlite3.connect(tmp_path / "elicit.db")) as connection:
            connection.execute(
                "UPDATE elicit_decisions SET requested_schema = '{broken' WHERE elicitation_id = ?",
                (broken.elicitation_id,),
            )
            connection.commit()
        with browser() as alice:
            sign_in(alice, site, "alice")
            listed = alice.get(f"{site.base}/inbox")
    assert listed.status_code == 200 and list(entries(listed.text)) == [fine.elicitation_id]
    assert "1 of these could not be read and is left out" in listed.text and "{broken" not in listed.text


def test_a_decision_whose_tool_cannot_be_read_is_listed_and_the_page_says_so(site: Site, store_url: str) -> None:
    fine = recorded(site, "alice", tool="deploy", message="Readable")
    damaged = recorded(site, "alice", tool="rotate-keys", message="Its operation is damaged")
    corrupt_operation(store_url, site.store.get_operation(damaged.operation_id, Operator()))
    with browser() as alice:
        sign_in(alice, site, "alice")
        listed = alice.get(f"{site.base}/inbox")
    assert listed.status_code == 200
    shown = entries(listed.text)
    assert list(shown) == [damaged.elicitation_id, fine.elicitation_id]
    assert (
        facts(shown[damaged.elicitation_id])["Tool"] == "a tool"
        and facts(shown[fine.elicitation_id])["Tool"] == "deploy"
    )
    assert "For some of these, the tool that asks could not be read" in listed.text
    assert "The server&#x27;s log says which." in listed.text and "left out" not in listed.text


def test_a_move_on_a_decision_that_became_unreadable_says_so_and_changes_nothing(site: Site, store_url: str) -> None:
    decision = recorded(site, "alice", message="Soon damaged")
    with browser() as alice:
        sign_in(alice, site, "alice")
        csrf = token(alice.get(f"{site.base}/inbox").text, decision.elicitation_id, "decline")
        damage = "UPDATE elicit_decisions SET requested_schema = '[1, 2]' WHERE elicitation_id = '{}'"
        corrupt(store_url, damage.format(decision.elicitation_id))
        refused = alice.post(f"{site.base}/inbox/{decision.elicitation_id}/decline", data={"csrf": csrf})
        listed = alice.get(f"{site.base}/inbox")
    assert refused.status_code == 500 and "This decision could not be read" in refused.text
    assert "Nothing changed." in refused.text
    assert listed.status_code == 200 and "1 of these could not be read and is left out" in listed.text
    [created] = site.store.audit_trail(decision.elicitation_id, Operator())
    assert created.to_status == DecisionStatus.REQUESTED


# -- answering, continuing, declining, cancelling ------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_form_decision_is_answered_from_the_inbox_and_the_retry_finishes(site: Site, era: str) -> None:
    await call(site, era, "book", city="Oslo")
    decision = only(site, "How many seats to Oslo?")
    with browser() as alice:
        sign_in(alice, site, "alice")
        inbox = alice.get(f"{site.base}/inbox")
        answer = re.search(rf'href="(/elicit/{decision.elicitation_id})">Answer</a>', inbox.text)
        assert answer
        form = alice.get(site.base + answer.group(1))
        assert form.status_code == 200 and 'name="f.seats"' in form.text
        done = alice.post(
            f"{site.base}/elicit/{decision.elicitation_id}/answer",
            data={"csrf": hidden(form.text, "csrf"), "action": "accept", "f.seats": "3"},
        )
        assert done.status_code == 200 and "Done" in done.text
        after = alice.get(f"{site.base}/inbox")
    assert decision.elicitation_id not in entries(after.text) and "Nothing is waiting." in after.text
    assert text(await call(site, era, "book", city="Oslo")) == "booked 3 to Oslo"
    trail = site.store.audit_trail(decision.elicitation_id, Operator())
    assert (trail[-1].to_status, trail[-1].actor) == ("accepted", f"browser:{site.principal('alice')}")


def test_a_question_outside_the_restricted_schema_is_not_offered_on_the_page(site: Site) -> None:
    hidden_rule: JSONObject = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}}}
    decision = recorded(site, "alice", schema=hidden_rule)
    with browser() as alice:
        sign_in(alice, site, "alice")
        listed = entries(alice.get(f"{site.base}/inbox").text)[decision.elicitation_id]
        page = alice.get(f"{site.base}/elicit/{decision.elicitation_id}")
    assert "Answer it in an app that can show the question." in listed and ">Answer</a>" not in listed
    assert page.status_code == 409 and "This question cannot be answered here" in page.text
    assert 'name="f.code"' not in page.text
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.REQUESTED


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("action", "status", "said"), [
    ("decline", DecisionStatus.DECLINED, "Declined. The tool learns that you said no."),
    ("cancel", DecisionStatus.CANCELLED, "Cancelled. The tool learns"),
])  # fmt: skip
async def test_declined_or_cancelled_in_the_inbox_and_the_retry_learns_it(
    site: Site, era: str, action: str, status: DecisionStatus, said: str
) -> None:
    await call(site, era, "book", city="Oslo")
    decision = only(site, "How many seats to Oslo?")
    with browser() as alice:
        sign_in(alice, site, "alice")
        inbox = alice.get(f"{site.base}/inbox")
        csrf = token(inbox.text, decision.elicitation_id, action)
        moved = alice.post(f"{site.base}/inbox/{decision.elicitation_id}/{action}", data={"csrf": csrf})
        assert moved.status_code == 303 and moved.headers["location"].startswith("/inbox?done=")
        landed = alice.get(site.base + moved.headers["location"])
        assert said in landed.text and decision.elicitation_id not in entries(landed.text)
        again = alice.post(f"{site.base}/inbox/{decision.elicitation_id}/{action}", data={"csrf": csrf})
        assert again.status_code == 409 and "no longer waiting" in again.text
    stored = site.store.get_decision(decision.elicitation_id, Operator())
    assert stored.status is status and stored.content is None
    trail = site.store.audit_trail(decision.elicitation_id, Operator())
    assert [(e.to_status, e.actor, e.reason) for e in trail[1:]] == [
        (status.value, f"browser:{site.principal('alice')}", f"{status.value} in the inbox")
    ]
    assert text(await call(site, era, "book", city="Oslo")) == status.value


@pytest.mark.parametrize("era", ERAS)
async def test_a_url_decision_is_continued_from_its_link_and_the_retry_finishes(site: Site, era: str) -> None:
    await call(site, era, "set_key")
    decision = only(site, "Enter your Example API key")
    with browser() as alice:
        sign_in(alice, site, "alice")
        inbox = alice.get(f"{site.base}/inbox")
        link = re.search(rf'href="(/elicit/{decision.elicitation_id})">Continue</a>', inbox.text)
        assert link
        page = alice.get(site.base + link.group(1))
        form = alice.post(f"{site.base}{link.group(1)}/continue", data={"csrf": hidden(page.text, "csrf")})
        # Its step has started: declining is over, cancelling is not.
        started = alice.get(f"{site.base}/inbox")
        assert ">Decline</button>" not in entries(started.text)[decision.elicitation_id]
        refused = alice.post(
            f"{site.base}/inbox/{decision.elicitation_id}/decline",
            data={"csrf": token(started.text, decision.elicitation_id, "cancel")},
        )
        assert refused.status_code == 409 and "cancel it instead" in refused.text
        done = alice.post(
            f"{site.base}{link.group(1)}/key", data={"csrf": hidden(form.text, "csrf"), "api_key": "sk-inbox-1"}
        )
        assert "Done" in done.text
    assert text(await call(site, era, "set_key")) == "key stored"


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_waiting_on_a_url_decision_wakes_when_it_is_cancelled_in_the_inbox(site: Site, era: str) -> None:
    results: list[CallToolResult] = []

    async def waiting_call() -> None:
        results.append(await call(site, era, "connect", Person([ElicitResult(action="accept")])))

    async def cancel_in_the_inbox() -> None:
        with anyio.fail_after(20):
            while not (waiting := site.store.list_decisions(Operator(), status=DecisionStatus.ACCEPTED_URL)):
                await anyio.sleep(0.05)
        [decision] = waiting
        async with httpx2.AsyncClient(timeout=30) as alice:
            form = await alice.get(f"{site.base}/signin", params={"next": "/inbox"})
            await alice.post(
                f"{site.base}/signin",
                data={
                    "username": "alice",
                    "password": "wonderland",
                    "next": "/inbox",
                    "csrf": hidden(form.text, "csrf"),
                },
            )
            inbox = await alice.get(f"{site.base}/inbox")
            csrf = token(inbox.text, decision.elicitation_id, "cancel")
            moved = await alice.post(f"{site.base}/inbox/{decision.elicitation_id}/cancel", data={"csrf": csrf})
            assert moved.status_code == 303

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(waiting_call)
            group.start_soon(cancel_in_the_inbox)
    assert text(results[0]) == "cancelled"


# -- other people --------------------------------------------------------------------------------------------------


async def test_another_user_sees_none_of_the_persons_decisions_and_a_direct_post_is_refused_as_not_found(
    site: Site,
) -> None:
    await call(site, "legacy", "book", city="Oslo")
    decision = only(site, "How many seats to Oslo?")
    with browser() as alice:
        sign_in(alice, site, "alice")
        alices = alice.get(f"{site.base}/inbox")
        csrf = token(alices.text, decision.elicitation_id, "cancel")
        forged = alice.post(f"{site.base}/inbox/{decision.elicitation_id}/cancel", data={"csrf": "forged"})
        assert forged.status_code == 403 and "expired" in forged.text
    with browser() as bob:
        sign_in(bob, site, "bob")
        bobs = bob.get(f"{site.base}/inbox")
        assert bobs.status_code == 200 and entries(bobs.text) == {} and "Nothing is waiting." in bobs.text
        assert "How many seats" not in bobs.text
        refused = [
            bob.post(f"{site.base}/inbox/{decision.elicitation_id}/{action}", data={"csrf": given})
            for action in ("cancel", "decline")
            for given in (csrf, "forged")
        ]
        missing = bob.post(f"{site.base}/inbox/{new_elicitation_id()}/cancel", data={"csrf": csrf})
    # No form of bob's can carry a token for a decision he was never shown: refused before anything is read,
    # the same for a decision that exists as for one that does not, and nothing is written, not even a note.
    assert all(r.status_code == 403 and "expired" in r.text for r in refused)
    assert missing.status_code == 403 and missing.text == refused[0].text
    assert site.store.get_decision(decision.elicitation_id, Operator()) == decision
    assert [e.actor for e in site.store.audit_trail(decision.elicitation_id, Operator())] == [decision.principal.actor]
    assert "answer at " in error_text(await call(site, "legacy", "book", city="Oslo"))


async def test_an_operator_sees_everyones_decisions_and_cancels_one_with_a_reason(site: Site) -> None:
    await call(site, "legacy", "book", city="Oslo")
    alices = only(site, "How many seats to Oslo?")
    bobs = recorded(site, "bob", url=True, message="Bob connects his account")
    with browser() as carol:
        sign_in(carol, site, "carol")
        inbox = carol.get(f"{site.base}/inbox")
        shown = entries(inbox.text)
        assert list(shown) == [bobs.elicitation_id, alices.elicitation_id]
        assert "Decisions waiting for anyone" in inbox.text and "You are an operator" in inbox.text
        section = shown[alices.elicitation_id]
        assert (
            facts(section)["For"] == "Alice Liddell (alice)" and facts(shown[bobs.elicitation_id])["For"] == "Bob (bob)"
        )
        assert "book asks them to answer a question" in section
        assert ">Answer</a>" not in section and ">Decline</button>" not in section
        assert "Cancel for them</button>" in section and f'maxlength="{MAX_REASON}"' in section
        csrf = token(inbox.text, alices.elicitation_id, "cancel")
        url = f"{site.base}/inbox/{alices.elicitation_id}"

        unsaid = carol.post(f"{url}/cancel", data={"csrf": csrf, "reason": "  \n "})
        assert unsaid.status_code == 400 and "Say why you cancel it" in unsaid.text
        long = "x" * (MAX_REASON + 1)
        too_long = carol.post(f"{url}/cancel", data={"csrf": csrf, "reason": long})
        assert too_long.status_code == 400 and f'value="{long}"' in too_long.text
        declined = carol.post(f"{url}/decline", data={"csrf": csrf})
        assert declined.status_code == 404
        assert site.store.get_decision(alices.elicitation_id, Operator()) == alices

        done = carol.post(f"{url}/cancel", data={"csrf": csrf, "reason": "duplicate\trequest, see #42"})
        assert done.status_code == 303 and done.headers["location"] == "/inbox?done=cancelled-for"
        after = carol.get(site.base + done.headers["location"])
        assert list(entries(after.text)) == [bobs.elicitation_id] and "your reason is in the audit" in after.text
    stored = site.store.get_decision(alices.elicitation_id, Operator())
    assert stored.status is DecisionStatus.CANCELLED
    last = site.store.audit_trail(alices.elicitation_id, Operator())[-1]
    assert (last.actor, last.reason) == (
        f"operator:{site.principal('carol')}",
        "cancelled by an operator in the inbox: duplicate request, see #42",
    )
    assert text(await call(site, "legacy", "book", city="Oslo")) == "cancelled"
    with browser() as alice:
        sign_in(alice, site, "alice")
        assert entries(alice.get(f"{site.base}/inbox").text) == {}


async def test_an_expired_decision_is_expired_when_acted_on(site: Site) -> None:
    with browser() as alice:
        sign_in(alice, site, "alice")
        # Recorded once signed in, so that only the inbox's one page load has to come within its two seconds.
        decision = recorded(site, "alice", ttl=timedelta(seconds=2))
        csrf = token(alice.get(f"{site.base}/inbox").text, decision.elicitation_id, "cancel")
        await anyio.sleep((decision.expires_at - datetime.now(UTC)).total_seconds() + 0.1)
        late = alice.post(f"{site.base}/inbox/{decision.elicitation_id}/cancel", data={"csrf": csrf})
    assert late.status_code == 410 and "expired" in late.text
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.EXPIRED


# -- configuration ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("served", [True, False])
def test_mount_web_serves_the_inbox_with_the_operators_of_its_config(store_url: str, served: bool) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    try:
        elicitation = Elicitation(store, request_state=RequestState(keys=[b"m" * 32]), public_base_url=base)
        auth = LocalAuthorizationServer(base, LocalUsers.from_text(USERS), store, signing_keys=[b"a" * 32])
        server = elicitation.server("own-server", **auth.mcp_server_kwargs(f"{base}/mcp"))
        inbox = InboxSettings(operators=frozenset({f"{base}#carol"})) if served else None
        mount_web(server, elicitation, WebPages(sign_in=auth, page_key=b"p" * 32, inbox=inbox))
        with serving(auth.http_app(server), port), httpx2.Client(timeout=30) as carol:
            form = carol.get(f"{base}/signin", params={"next": "/"})
            carol.post(
                f"{base}/signin",
                data={"username": "carol", "password": "operates", "next": "/", "csrf": hidden(form.text, "csrf")},
            )
            listed = carol.get(f"{base}/inbox")
    finally:
        store.close()
    if served:
        assert listed.status_code == 200 and "Decisions waiting for anyone" in listed.text
    else:
        assert listed.status_code == 404


def test_inbox_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="page size must be from 1 to 100"):
        InboxSettings(page_size=0)
    with pytest.raises(ValueError, match="non-empty principal id"):
        InboxSettings(operators=frozenset({""}))
    with pytest.raises(TypeError, match="a set of principal ids, not one string"):
        InboxSettings(operators="https://elicit.example#carol")  # type: ignore[arg-type]


def test_the_deployment_serves_the_inbox_to_the_operators_of_its_environment(store_url: str, tmp_path: Path) -> None:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    environ = {
        "MCP_ELICIT_USERS": "alice:wonderland,carol:operates",
        "MCP_ELICIT_AUTH_KEYS": "YS1rZXktYS1rZXktYS1rZXktYS1rZXktYS1rZXktMDE=",
        "MCP_ELICIT_STATE_KEYS": "cy1rZXktcy1rZXktcy1rZXktcy1rZXktcy1rZXktMDE=",
        "MCP_ELICIT_VAULT_KEYS": VAULT_KEY,
    }
    assert http_settings(environ, public).operators == frozenset()
    with pytest.raises(SettingsError, match="MCP_ELICIT_OPERATORS names mallory, not among the users"):
        http_settings({**environ, "MCP_ELICIT_OPERATORS": "carol,mallory"}, public)
    settings = http_settings({**environ, "MCP_ELICIT_OPERATORS": " carol , "}, public)
    assert settings.operators == frozenset({"carol"})
    deployment = build_http_deployment(store=store_url, workspace=tmp_path / "workspace", settings=settings)
    try:
        headings = {}
        with serving(deployment.http_app("127.0.0.1"), port):
            for user in ("alice", "carol"):
                with httpx2.Client(timeout=30) as browser:
                    form = browser.get(f"{public}/signin", params={"next": "/"})
                    browser.post(
                        f"{public}/signin",
                        data={"username": user, "password": PASSWORDS[user], "next": "/",
                              "csrf": hidden(form.text, "csrf")},
                    )  # fmt: skip
                    headings[user] = re.findall(r"<h1>([^<]*)</h1>", browser.get(f"{public}/inbox").text)
    finally:
        deployment.elicitation.close()
    assert headings == {"alice": ["Decisions waiting for you"], "carol": ["Decisions waiting for anyone"]}
