"""One-line asks through `Fallback.WEB`: the page renders the one-value form from the stored schema, checks the
posted answer against it, and the same call made again gets the typed value, on both eras and both stores.

Real HTTP on loopback (the MCP endpoint, sign-in and decision pages in one app), httpx2 as the browser, an
in-process client that declares no elicitation.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from mcp import Client
from mcp_types import CallToolResult
from pydantic import AfterValidator, Field

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import Accepted, Elicitation, Fallback, Flow
from tests.helpers.ask_types import Region, Trip
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.results import error_text, text
from tests.helpers.web_answers import browser_of, page_url, sign_in, submit, web_site

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]


@dataclasses.dataclass(frozen=True)
class WebCase:
    tool: str
    asked: Any
    message: str
    posted: dict[str, str | list[str]]
    data: Any
    content: dict[str, Any]


CASES = [
    WebCase("confirm", bool, "Ship release 1.4 to production?", {"value": "true"}, True, {"value": True}),
    WebCase("decline_it", bool, "Keep the old release?", {"value": "false"}, False, {"value": False}),
    WebCase("seats", Annotated[int, Field(ge=1, le=9)], "How many seats?", {"value": "4"}, 4, {"value": 4}),
    WebCase("region", {Region.EU: "Europe", Region.US: "United States"}, "Where should it run?", {"value": "us"},
            Region.US, {"value": "us"}),
    WebCase("regions", list[Region], "Which regions?", {"value": ["eu", "us"]}, [Region.EU, Region.US],
            {"value": ["eu", "us"]}),
    WebCase("trip", Trip, "Plan the trip", {"city": "Oslo", "seats": "2", "region": "eu"}, Trip("Oslo", 2, Region.EU),
            {"city": "Oslo", "seats": 2, "region": "eu"}),
]  # fmt: skip


def _not_admin(value: str) -> str:
    if value == "admin":
        raise ValueError("that nickname is reserved")
    return value


Nickname = Annotated[str, AfterValidator(_not_admin)] | None


def build(elicitation: Elicitation) -> None:
    for case in CASES:
        register(elicitation, case)

    @elicitation.tool(fallback=Fallback.WEB)
    async def nickname(flow: Flow) -> str:
        return repr(await flow.ask("Pick a nickname (or leave it empty)", Nickname))


def register(elicitation: Elicitation, case: WebCase) -> None:
    async def body(flow: Flow) -> str:
        answer = await flow.ask(case.message, case.asked)
        return repr(answer)

    elicitation.tool(name=case.tool, fallback=Fallback.WEB, asks=[case.asked])(body)


@pytest.fixture
def site(store_url: str) -> Iterator[Site]:
    with web_site(store_url, "one-line-web", build) as served:
        yield served


async def call(site: Site, era: str, tool: str) -> CallToolResult:
    async with Client(site.server, mode=era) as client:
        return await client.call_tool(tool, {})


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("case", CASES, ids=[case.tool for case in CASES])
async def test_a_one_line_ask_is_answered_on_the_page_and_the_retry_gets_the_typed_value(
    site: Site, era: str, case: WebCase
) -> None:
    url = page_url(await call(site, era, case.tool))
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
        assert page.status_code == 200
        assert case.message in page.text
        done = await submit(browser, url, page.text, "accept", **case.posted)
        assert done.status_code == 200 and "Done" in done.text, done.text
    [decision] = site.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.ACCEPTED
    assert decision.content == case.content
    assert text(await call(site, era, case.tool)) == repr(Accepted(case.data))


@pytest.mark.parametrize("era", ["2026-07-28"])  # the page checks the stored schema, whichever era asked
async def test_the_page_checks_a_one_value_answer_against_the_stored_schema(site: Site, era: str) -> None:
    url = page_url(await call(site, era, "seats"))
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
        assert re.search(r'<input [^>]*name="f\.value"[^>]*>', page.text)
        refused = await submit(browser, url, page.text, "accept", value="12")
        assert refused.status_code == 400
        errors = dict(re.findall(r'<p class="field-error" id="field-(\w+)-error">([^<]*)</p>', refused.text))
        assert errors == {"value": "must be at most 9"}
        [decision] = site.store.list_decisions(Operator())
        assert decision.status is DecisionStatus.REQUESTED
        done = await submit(browser, url, refused.text, "accept", value="9")
        assert "Done" in done.text
    assert text(await call(site, era, "seats")) == repr(Accepted(9))


@pytest.mark.parametrize("era", ERAS)
async def test_declining_a_yes_no_on_the_page_is_not_a_no(site: Site, era: str) -> None:
    url = page_url(await call(site, era, "confirm"))
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(url)
        closed = await submit(browser, url, page.text, "decline")
        assert closed.status_code == 200 and "<h1>Declined</h1>" in closed.text
    assert text(await call(site, era, "confirm")) == "Declined()"


async def test_an_answer_the_type_refuses_on_resume_is_asked_again_with_a_new_page(site: Site) -> None:
    """The page checks the stored schema only; the type's own validator refuses "admin" when the body resumes."""
    first_url = page_url(await call(site, "2026-07-28", "nickname"))
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = await browser.get(first_url)
        assert "Done" in (await submit(browser, first_url, page.text, "accept", value="admin")).text
        again = await call(site, "2026-07-28", "nickname")
        second_url = page_url(again)
        assert second_url != first_url
        assert "could not be used" in error_text(again) and "that nickname is reserved" in error_text(again)
        page = await browser.get(second_url)
        assert "Done" in (await submit(browser, second_url, page.text, "accept", value="")).text
    assert text(await call(site, "2026-07-28", "nickname")) == repr(Accepted(None))
    keys = sorted((d.key, d.status.value, d.content) for d in site.store.list_decisions(Operator()))
    assert keys == [("text", "accepted", {"value": "admin"}), ("text#2", "accepted", {})]
