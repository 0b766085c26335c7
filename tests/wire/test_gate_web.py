"""A gated call approved on the web page (`Fallback.WEB`): the person who made the call signs in, sees the call,
edits what may be edited, and the same call made again runs what they approved, once.

Real HTTP on loopback (the MCP endpoint, the sign-in and the decision pages in one app), httpx2 as the browser,
the MCP client in-process declaring no elicitation at all (its principal is the local user alice).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from mcp import Client
from mcp_types import CallToolResult
from pydantic import Field

from mcp_elicit import Fallback, Flow, Gate
from mcp_elicit.approvals import APPROVAL_KEY
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import Elicitation
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.pages_site import hidden
from tests.helpers.results import error_text
from tests.helpers.web_answers import browser_of, page_url, sign_in, submit, web_site

pytestmark = pytest.mark.anyio

RAN: list[dict[str, Any]] = []


def build_tools(elicitation: Elicitation) -> None:
    @elicitation.tool(fallback=Fallback.WEB, gate=Gate(editable=["amount"]))
    async def refund(flow: Flow, order: str, amount: Annotated[int, Field(ge=1, le=500)]) -> str:
        RAN.append({"order": order, "amount": amount})
        return f"refunded {amount} on {order}"


@pytest.fixture
def site(store_url: str) -> Iterator[Site]:
    RAN.clear()
    with web_site(store_url, "gate-web", build_tools) as served:
        yield served


async def call(site: Site, era: str, **arguments: object) -> CallToolResult:
    async with Client(site.server, mode=era) as client:
        return await client.call_tool("refund", dict(arguments))


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_approved_on_the_page_with_an_edit_the_call_made_again_runs_it_once(site: Site, era: str) -> None:
    url = page_url(await call(site, era, order="A-17", amount=400))
    assert RAN == [], "nothing runs before the approval"
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = (await browser.get(url)).text
        shown = html.unescape(page)
        assert 'Tool: refund\norder: "A-17"\namount: 400' in shown and 'refund(order="A-17", amount=400)' in shown
        assert re.search(r'<input [^>]*name="f\.amount"[^>]*value="400"', page), "prefilled with the call's value"
        done = await submit(browser, url, page, "accept", amount="250")
        assert done.status_code == 200, done.text
    again = await call(site, era, order="A-17", amount=400)
    assert [block.text for block in again.content] == [  # type: ignore[union-attr]
        "The user changed the arguments before approving (amount: 400 → 250); the tool ran with the changes.",
        "refunded 250 on A-17",
    ]
    assert RAN == [{"order": "A-17", "amount": 250}]
    [approval] = site.store.list_decisions(Operator())
    assert (approval.key, approval.status, approval.content) == (APPROVAL_KEY, DecisionStatus.ACCEPTED, {"amount": 250})


async def test_a_post_that_changes_what_may_not_be_changed_is_refused_and_changes_nothing(site: Site) -> None:
    url = page_url(await call(site, "legacy", order="A-18", amount=100))
    [before] = site.store.list_decisions(Operator())
    async with browser_of() as browser:
        await sign_in(browser, site, "alice", "wonderland")
        page = (await browser.get(url)).text
        forged = await submit(browser, url, page, "accept", order="B-99", amount="100")
        too_much = await submit(browser, url, page, "accept", amount="9000")
        assert forged.status_code == 400 and "not sent as the page showed it" in forged.text
        assert too_much.status_code == 400 and "must be at most 500" in too_much.text
        bare = await browser.post(
            f"{url}/answer", data={"csrf": hidden(page, "csrf"), "action": "accept", "f.order": "B"}
        )
        assert bare.status_code == 400
    assert site.store.list_decisions(Operator()) == [before], "still waiting, nothing recorded"
    assert RAN == []
    rejected = await call(site, "legacy", order="A-18", amount=100)
    assert "answer at" in error_text(rejected), "the same call is still waiting on the person"
