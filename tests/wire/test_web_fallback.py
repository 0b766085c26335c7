"""`Fallback.WEB`: a client that cannot show a question gets a tool error naming the question's page; the person
signs in there and answers; the same call made again continues with that answer.

Real HTTP on loopback (the MCP endpoint, the sign-in pages and the decision pages in one app, stateless
streamable HTTP), httpx2 as the browser; the MCP client in-process (its principal is the configured local
user, the same person the browser signs in as) or over HTTP with a token from the same authorization server.
"""

from __future__ import annotations

import datetime
import enum
import re
import time
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult
from pydantic import AfterValidator, AnyUrl, BaseModel, Field

from mcp_elicit.model import Decision, DecisionStatus, Operator
from mcp_elicit.model.form_schema import parse_form
from mcp_elicit.server import (
    Accepted,
    Cancelled,
    Completed,
    Declined,
    Elicitation,
    Expired,
    Fallback,
    Flow,
    RequestState,
)
from mcp_elicit.server.forms import Email, Titled, form_spec
from mcp_elicit.store import open_store
from mcp_elicit.web import ApiKeyEntry
from mcp_elicit.web.formpage import read_answer, render
from tests.helpers.oauth_client import access_token
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.pages_site import hidden
from tests.helpers.person import Person
from tests.helpers.results import error_text, text
from tests.helpers.server import Seats
from tests.helpers.web_answers import browser_of, page_url, sign_in, submit, web_site

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]


class Region(enum.StrEnum):
    EU = "eu"
    US = "us"
    APAC = "apac"


class EveryKind(BaseModel):
    """One field of every kind the restricted schema has."""

    name: str = Field(title="Your <b>name</b>", description="As on your badge & ID", min_length=2, max_length=40)
    email: Email
    homepage: AnyUrl | None = None
    start: datetime.date = datetime.date(2026, 12, 1)
    meeting: datetime.datetime | None = Field(default=None, description="When to meet")
    seats: int = Field(default=2, ge=1, le=9)
    budget: float | None = Field(default=None, ge=0, le=1000.5)
    approve: bool = Field(title="Approve the booking")
    urgent: bool = True
    size: Literal["s", "m", "l"] = "m"
    priority: Annotated[Literal["p1", "p2"], Titled({"p1": "Page now", "p2": "Next morning"})]
    colour: Annotated[
        Literal["red", "blue"], Titled({"red": "Red <i>hot</i>", "blue": "Blue"}, legacy_enum_names=True)
    ] = "blue"
    regions: Annotated[
        list[Region], Titled({"eu": "Europe", "us": "United States", "apac": "Asia-Pacific"}), Field(max_length=2)
    ]
    tags: list[Literal["alpha", "beta", "gamma"]] = Field(default=["beta"], min_length=1)


REQUIRED = ["name", "email", "approve", "priority", "regions"]


def _not_admin(value: str) -> str:
    if value == "admin":
        raise ValueError("that nickname is reserved")
    return value


class Nickname(BaseModel):
    nickname: Annotated[str, AfterValidator(_not_admin)] = Field(min_length=1)


def build_tools(elicitation: Elicitation) -> None:
    @elicitation.tool(fallback=Fallback.WEB)
    async def register(flow: Flow, event: str) -> str:
        """Every field kind, asked through the web page when the client cannot show forms."""
        answer = await flow.ask(f"Register for {event}", EveryKind, key="profile")
        if isinstance(answer, Accepted):
            return "registered " + answer.data.model_dump_json()
        return type(answer).__name__.lower()

    @elicitation.tool(fallback=Fallback.WEB)
    async def book(flow: Flow, city: str) -> str:
        seats = await flow.ask(f"How many seats to {city}?", Seats)
        match seats:
            case Accepted(data=data):
                return f"booked {data.seats} to {city}"
            case Declined():
                return "declined"
            case Cancelled():
                return "cancelled"
            case Expired():
                return "expired"

    @elicitation.tool(fallback=Fallback.WEB)
    async def quick(flow: Flow) -> str:
        answer = await flow.ask("Quick: how many seats?", Seats, ttl=datetime.timedelta(seconds=1))
        return type(answer).__name__.lower()

    @elicitation.tool(fallback=Fallback.WEB)
    async def nickname(flow: Flow) -> str:
        answer = await flow.ask("Pick a nickname", Nickname)
        return f"hello {answer.data.nickname}" if isinstance(answer, Accepted) else type(answer).__name__.lower()

    @elicitation.tool(fallback=Fallback.WEB)
    async def set_key(flow: Flow) -> str:
        outcome = await flow.ask_url("Enter your Example API key", key="set_api_key")
        return "key stored" if isinstance(outcome, Completed) else type(outcome).__name__.lower()


@pytest.fixture
def site(store_url: str) -> Iterator[Site]:
    flows = {"set_api_key": ApiKeyEntry(vault_name="example-api-key", service_title="Example")}
    with web_site(store_url, "web-fallback", build_tools, flows) as served:
        yield served


async def call(site: Site, era: str, tool: str, **arguments: object) -> CallToolResult:
    """A call from an in-process client that declares no elicitation at all."""
    async with Client(site.server, mode=era) as client:
        return await client.call_tool(tool, dict(arguments))


def only_decision(site: Site) -> Decision:
    [decision] = site.store.list_decisions(Operator())
    return decision


def control(html: str, name: str, value: str | None = None) -> str:
    """The one `<input>` or `<select>` tag for form field `name` (and `value`, for radios and checkboxes)."""
    tag = "select" if value is None and f'<select id="field-{name}"' in html else "input"
    pattern = rf'<{tag} [^>]*name="f\.{name}"' + (rf'[^>]*value="{re.escape(value)}"' if value else "") + "[^>]*>"
    found = re.findall(pattern, html)
    assert len(found) == 1, (name, value, found)
    return str(found[0])


def options(html: str, name: str) -> list[str]:
    found = re.search(rf'<select id="field-{name}"[^>]*>(.*?)</select>', html, re.S)
    assert found, name
    return re.findall(r"<option [^>]*>[^<]*</option>", found.group(1))


VALID: dict[str, str | list[str]] = {
    "name": "Ada <Lovelace>",
    "email": "ada@example.org",
    "homepage": "https://ada.example/notes",
    "start": "2026-12-24",
    "meeting": "2026-12-24T18:30",
    "seats": "3",
    "budget": "99.5",
    "approve": "true",
    "urgent": "false",
    "size": "l",
    "priority": "p2",
    "colour": "red",
    "regions": ["eu", "apac"],
    "tags": ["alpha", "gamma"],
}


# -- registration ------------------------------------------------------------------------------------------


def test_web_fallback_without_a_public_base_url_is_refused_at_registration(store_url: str) -> None:
    runtime = Elicitation(open_store(store_url), request_state=RequestState(single_process=True))
    runtime.server("no-pages")
    try:
        with pytest.raises(ValueError, match=r"Fallback\.WEB .* needs Elicitation\(public_base_url=\.\.\.\)"):
            runtime.tool(fallback=Fallback.WEB)
        runtime.tool(fallback=Fallback.ARGUMENTS)  # the other fallbacks need no pages
    finally:
        runtime.close()


# -- the page ------------------------------------------------------------------------------------------------


async def test_the_page_renders_every_field_kind_escaped_with_defaults(site: Site) -> None:
    url = page_url(await call(site, "legacy", "register", event="PyCon"))
    async with browser_of() as browser:
        unsigned = await browser.get(url)
        assert unsigned.status_code == 303 and unsigned.headers["location"].startswith("/signin?next=")
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
    html = page.text
    assert page.status_code == 200, html
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert "<script" not in html.lower() and re.search(r"<[^>]*\son\w+=", html) is None
    assert "Register for PyCon" in html and "register" in html and "alice" in html
    assert "Your &lt;b&gt;name&lt;/b&gt;" in html and "<b>name" not in html
    assert "As on your badge &amp; ID" in html and "When to meet" in html and "Approve the booking" in html
    assert html.count('<span class="req">(required)</span>') == len(REQUIRED)

    name = control(html, "name")
    assert 'type="text"' in name and 'minlength="2"' in name and 'maxlength="40"' in name and "required" in name
    assert 'value=""' in name
    assert 'type="email"' in control(html, "email") and "required" in control(html, "email")
    homepage = control(html, "homepage")
    assert 'type="url"' in homepage and "required" not in homepage
    assert 'type="date"' in control(html, "start") and 'value="2026-12-01"' in control(html, "start")
    assert 'type="datetime-local"' in control(html, "meeting") and "In UTC." in html
    seats = control(html, "seats")
    assert all(part in seats for part in ('type="number"', 'step="1"', 'min="1"', 'max="9"', 'value="2"'))
    budget = control(html, "budget")
    assert all(part in budget for part in ('step="any"', 'min="0"', 'max="1000.5"', 'value=""'))

    assert "checked" not in control(html, "approve", "true") and "checked" not in control(html, "approve", "false")
    assert "required" in control(html, "approve", "true") and 'type="radio"' in control(html, "approve", "true")
    assert "checked" in control(html, "urgent", "true") and "checked" not in control(html, "urgent", "false")

    assert options(html, "size") == [
        '<option value="">No answer</option>',
        '<option value="s">s</option>',
        '<option value="m" selected>m</option>',
        '<option value="l">l</option>',
    ]
    assert options(html, "priority") == [
        '<option value="">Choose one</option>',
        '<option value="p1">Page now</option>',
        '<option value="p2">Next morning</option>',
    ]
    assert "required" in control(html, "priority")
    assert options(html, "colour")[1:] == [
        '<option value="red">Red &lt;i&gt;hot&lt;/i&gt;</option>',
        '<option value="blue" selected>Blue</option>',
    ]
    regions = [control(html, "regions", value) for value in ("eu", "us", "apac")]
    assert all('type="checkbox"' in tag and "checked" not in tag for tag in regions)
    assert "> Asia-Pacific</label>" in html and "Choose at most 2." in html
    assert "checked" in control(html, "tags", "beta") and "checked" not in control(html, "tags", "alpha")
    assert "Choose at least 1." in html
    assert '<button class="primary" type="submit" name="action" value="accept">Submit</button>' in html
    assert 'name="action" value="decline" formnovalidate>Decline</button>' in html
    assert 'name="action" value="cancel" formnovalidate>Cancel</button>' in html
    assert only_decision(site).status is DecisionStatus.REQUESTED


# -- answering -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_invalid_then_valid_answer_on_the_page_and_the_retry_finishes(site: Site, era: str) -> None:
    first = await call(site, era, "register", event="PyCon")
    url = page_url(first)
    decision = only_decision(site)
    assert url == site.elicitation.decision_url(decision.elicitation_id)
    assert "Register for PyCon" in error_text(first) and "cannot ask for" in error_text(first)
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
        invalid = {
            **VALID,
            "name": "A",
            "email": "not-an-address",
            "homepage": "no url",
            "meeting": "tomorrow",
            "seats": "12",
            "budget": "lots",
            "approve": [],
            "priority": "",
            "colour": "green",
            "regions": ["eu", "us", "apac"],
            "tags": [],
        }
        refused = await submit(browser, url, page.text, "accept", **invalid)
        assert refused.status_code == 400
        errors = dict(re.findall(r'<p class="field-error" id="field-(\w+)-error">([^<]*)</p>', refused.text))
        assert errors == {
            "name": "must be at least 2 characters long",
            "email": "must be an email address such as name@example.org",
            "homepage": "must be a full address such as https://example.org/page",
            "meeting": "must be a date and time with its UTC offset, such as 2026-12-01T09:30:00Z",
            "seats": "must be at most 9",
            "budget": "must be a number",
            "approve": "required",
            "priority": "required",
            "colour": "must be one of &#x27;red&#x27;, &#x27;blue&#x27;",
            "regions": "choose at most 2",
            "tags": "choose at least 1",
        }
        assert "nothing was recorded" in refused.text
        assert 'value="A"' in control(refused.text, "name") and "checked" in control(refused.text, "regions", "us")
        assert only_decision(site).status is DecisionStatus.REQUESTED

        done = await submit(browser, url, refused.text, "accept", **VALID)
        assert done.status_code == 200 and "Done" in done.text and "try again" in done.text
        again = await browser.get(url)
        assert again.status_code == 409 and "Already answered" in again.text

    answered = only_decision(site)
    assert answered.status is DecisionStatus.ACCEPTED
    assert answered.content == {
        "name": "Ada <Lovelace>",
        "email": "ada@example.org",
        "homepage": "https://ada.example/notes",
        "start": "2026-12-24",
        "meeting": "2026-12-24T18:30:00Z",
        "seats": 3,
        "budget": 99.5,
        "approve": True,
        "urgent": False,
        "size": "l",
        "priority": "p2",
        "colour": "red",
        "regions": ["eu", "apac"],
        "tags": ["alpha", "gamma"],
    }
    model = form_spec(EveryKind).validate(answered.content)
    assert model.meeting == datetime.datetime(2026, 12, 24, 18, 30, tzinfo=datetime.UTC)
    assert model.regions == [Region.EU, Region.APAC] and model.start == datetime.date(2026, 12, 24)
    trail = site.store.audit_trail(answered.elicitation_id, Operator())
    assert [e.to_status for e in trail] == ["requested", "accepted"]
    assert trail[-1].actor == f"browser:{site.base}#alice" and trail[-1].reason == "answered on the page"

    retried = text(await call(site, era, "register", event="PyCon"))
    assert retried.startswith("registered ")
    assert EveryKind.model_validate_json(retried.removeprefix("registered ")) == model
    assert len(site.store.list_decisions(Operator())) == 1


async def test_unanswered_optional_fields_are_left_out_and_defaults_apply(site: Site) -> None:
    url = page_url(await call(site, "legacy", "register", event="PyCon"))
    minimal: dict[str, str | list[str]] = {
        "name": "Ada",
        "email": "ada@example.org",
        "approve": "false",
        "priority": "p1",
        "regions": [],
    }
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
        empty = {name: "" for name in ("start", "seats", "budget", "size", "homepage", "meeting")}
        done = await submit(browser, url, page.text, "accept", **minimal, **empty, tags="beta")
        assert "Done" in done.text, done.text
    content = only_decision(site).content
    assert content == {
        "name": "Ada",
        "email": "ada@example.org",
        "approve": False,
        "priority": "p1",
        "regions": [],
        "tags": ["beta"],
    }
    model = form_spec(EveryKind).validate(content)
    assert (model.seats, model.size, model.urgent, model.homepage) == (2, "m", True, None)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("action", "status", "title"), [
    ("decline", DecisionStatus.DECLINED, "Declined"),
    ("cancel", DecisionStatus.CANCELLED, "Cancelled"),
])  # fmt: skip
async def test_decline_and_cancel_on_the_page_reach_the_body(
    site: Site, era: str, action: str, status: DecisionStatus, title: str
) -> None:
    url = page_url(await call(site, era, "book", city="Oslo"))
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
        assert 'name="f.seats"' in page.text and "How many seats to Oslo?" in page.text
        closed = await submit(browser, url, page.text, action, seats="not even a number")
        assert closed.status_code == 200 and f"<h1>{title}</h1>" in closed.text
        late = await submit(browser, url, page.text, "accept", seats="2")
        assert late.status_code == 409 and f"<h1>{title}</h1>" in late.text
    decision = only_decision(site)
    assert decision.status is status and decision.content is None
    assert text(await call(site, era, "book", city="Oslo")) == status.value


async def test_a_form_posted_with_an_action_the_page_has_not_is_refused_and_changes_nothing(site: Site) -> None:
    url = page_url(await call(site, "legacy", "book", city="Oslo"))
    before = only_decision(site)
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
        torn = await submit(browser, url, page.text, "approve", seats="2")
        assert torn.status_code == 400 and "This form was not sent whole" in torn.text
        headless = await browser.post(f"{url}/answer", data={"csrf": hidden(page.text, "csrf"), "f.seats": "2"})
        assert headless.status_code == 400
        assert "How many seats to Oslo?" in (await browser.get(url)).text  # still open to answer
    assert only_decision(site) == before


async def test_another_user_gets_the_refusal_page_and_nothing_changes(site: Site) -> None:
    url = page_url(await call(site, "legacy", "book", city="Oslo"))
    before = only_decision(site)
    async with browser_of() as alice:
        await sign_in(alice, site, "alice", "wonderland")
        alices_page = await alice.get(url)
        forged = await alice.post(f"{url}/answer", data={"csrf": "forged", "action": "accept", "f.seats": "2"})
        assert forged.status_code == 403 and "expired" in forged.text
    async with browser_of() as bob:
        await sign_in(bob, site, "bob", "builder")
        refused = await bob.get(url)
        assert refused.status_code == 403 and "another account" in refused.text
        assert 'name="f.seats"' not in refused.text and "How many seats" not in refused.text
        posted = await submit(bob, url, alices_page.text, "accept", seats="2")
        assert posted.status_code == 403
    assert only_decision(site) == before
    notes = [e for e in site.store.audit_trail(before.elicitation_id, Operator()) if e.actor.startswith("browser:")]
    assert notes and all(e.from_status == e.to_status == "requested" for e in notes)
    assert {e.actor for e in notes} == {f"browser:{site.base}#bob"}
    assert error_text(await call(site, "legacy", "book", city="Oslo")).count(url) == 1


# -- the runtime around it -----------------------------------------------------------------------------------


async def test_over_stateless_http_a_declared_elicitation_cannot_be_used_and_the_page_answers(site: Site) -> None:
    person = Person()
    async with browser_of() as browser:
        token = await access_token(browser, site.base)  # signs the browser in as alice, too
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            transport = streamable_http_client(f"{site.base}/mcp", http_client=http)
            async with Client(transport, mode="legacy", elicitation_callback=person) as client:
                first = await client.call_tool("book", {"city": "Oslo"})
                url = page_url(first)
                page = await browser.get(url)
                assert "Done" in (await submit(browser, url, page.text, "accept", seats="4")).text
                done = await client.call_tool("book", {"city": "Oslo"})
    assert text(done) == "booked 4 to Oslo"
    assert person.asked == []
    decision = only_decision(site)
    assert decision.principal_id == f"{site.base}#alice" and decision.client_id != "stdio"


async def test_an_answer_the_model_refuses_is_asked_again_with_a_new_page(site: Site) -> None:
    first_url = page_url(await call(site, "2026-07-28", "nickname"))
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(first_url)
        assert "Done" in (await submit(browser, first_url, page.text, "accept", nickname="admin")).text
        again = await call(site, "2026-07-28", "nickname")
        second_url = page_url(again)
        assert second_url != first_url
        assert "could not be used" in error_text(again) and "nickname" in error_text(again)
        page = await browser.get(second_url)
        assert "could not be used" in page.text
        assert "Done" in (await submit(browser, second_url, page.text, "accept", nickname="ada")).text
    assert text(await call(site, "2026-07-28", "nickname")) == "hello ada"
    keys = sorted((d.key, d.status.value) for d in site.store.list_decisions(Operator()))
    assert keys == [("nickname", "accepted"), ("nickname#2", "accepted")]


async def test_a_question_left_unanswered_past_its_ttl_ends_as_expired(site: Site) -> None:
    url = page_url(await call(site, "legacy", "quick"))
    time.sleep(1.1)
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        late = await browser.get(url)
        assert late.status_code == 410 and "expired" in late.text and 'name="f.seats"' not in late.text
    assert text(await call(site, "legacy", "quick")) == "expired"
    assert only_decision(site).status is DecisionStatus.EXPIRED


@pytest.mark.parametrize("era", ERAS)
async def test_a_url_decision_falls_back_to_its_page_too(site: Site, era: str) -> None:
    url = page_url(await call(site, era, "set_key"))
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
        assert "enter your Example API key" in page.text
        form = await browser.post(f"{url}/continue", data={"csrf": hidden(page.text, "csrf")})
        done = await browser.post(f"{url}/key", data={"csrf": hidden(form.text, "csrf"), "api_key": "sk-test-123"})
        assert "Done" in done.text
    assert text(await call(site, era, "set_key")) == "key stored"
    assert only_decision(site).status is DecisionStatus.EXTERNAL_COMPLETED


@pytest.mark.parametrize(("era", "pages"), [("legacy", 1), ("2026-07-28", 2)])
async def test_questions_gathered_together_are_listed_together_where_the_era_has_rounds(
    site: Site, era: str, pages: int
) -> None:
    @site.elicitation.tool(fallback=Fallback.WEB)
    async def pair(flow: Flow) -> str:
        first, second = await flow.gather(flow.ask("First?", Seats, key="one"), flow.ask("Second?", Seats, key="two"))
        return f"{type(first).__name__} {type(second).__name__}"

    message = error_text(await call(site, era, "pair"))
    assert len(re.findall(r"answer at http://\S+/elicit/\S+ \(open until", message)) == pages
    assert "First?" in message and ("Second?" in message) is (pages == 2)


# -- reading and rendering without a server ---------------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "when": {"type": "string", "format": "date-time", "default": "2026-12-24T18:30:00+02:00"},
        "note": {"type": "string"},
    },
    "required": ["count"],
}


@pytest.mark.parametrize(("posted", "content", "problems"), [
    ({"count": ["1e1"], "ratio": ["-0.5"]}, {"count": 10, "ratio": -0.5}, {}),
    ({"count": [" 3.0 "], "ratio": ["7"]}, {"count": 3, "ratio": 7}, {}),
    ({"count": ["3.5"], "ratio": ["inf"]}, {}, {"count": ["must be a whole number"], "ratio": ["must be a number"]}),
    ({"count": ["NaN"], "ratio": ["1e999"]}, {}, {"count": ["must be a whole number"], "ratio": ["must be a number"]}),
    ({"count": [""]}, {}, {"count": ["required"]}),
    ({"count": ["1"], "when": ["2026-12-24T18:30:15"]}, {"count": 1, "when": "2026-12-24T18:30:15Z"}, {}),
    ({"count": ["1"], "when": ["2026-12-24T18:30:00+02:00"]}, {"count": 1, "when": "2026-12-24T18:30:00+02:00"}, {}),
    ({"count": ["1"], "note": ["  keep my spaces "]}, {"count": 1, "note": "  keep my spaces "}, {}),
])  # fmt: skip
def test_posted_strings_become_json_values_by_the_schema(
    posted: dict[str, list[str]], content: dict[str, Any], problems: dict[str, list[str]]
) -> None:
    assert read_answer(parse_form(SCHEMA), posted) == (content, problems)


def test_a_date_time_default_is_shown_in_utc() -> None:
    html = render(parse_form(SCHEMA))
    assert 'name="f.when" type="datetime-local" value="2026-12-24T16:30:00"' in html
    assert '<label for="field-count">Count' in html
