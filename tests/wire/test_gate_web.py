"""A gated call approved on the web page (`Fallback.WEB`): the person who made the call signs in, sees the call,
edits what may be edited, and the same call made again runs what they approved, once.

Real HTTP on loopback (the MCP endpoint, the sign-in and the decision pages in one app), httpx2 as the browser,
the MCP client in-process declaring no elicitation at all (its principal is the local user alice).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest

from mcp_elicit.approvals import APPROVAL_KEY
from mcp_elicit.model import DecisionStatus, Operator
from tests.helpers.gate_site import Refunds, call, gate_site
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.pages_site import hidden
from tests.helpers.results import error_text
from tests.helpers.web_answers import browser_of, page_url, sign_in, submit

pytestmark = pytest.mark.anyio


@pytest.fixture
def served(store_url: str) -> Iterator[tuple[Site, Refunds]]:
    with gate_site(store_url) as running:
        yield running


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_approved_on_the_page_with_an_edit_the_call_made_again_runs_it_once(
    served: tuple[Site, Refunds], era: str
) -> None:
    site, refunds = served
    url = page_url(await call(site, era, order="A-17", amount=400))
    assert refunds.ran == [], "nothing runs before the approval"
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
    assert refunds.ran == [{"order": "A-17", "amount": 250}]
    [approval] = site.store.list_decisions(Operator())
    assert (approval.key, approval.status, approval.content) == (APPROVAL_KEY, DecisionStatus.ACCEPTED, {"amount": 250})


async def test_a_post_that_changes_what_may_not_be_changed_is_refused_and_changes_nothing(
    served: tuple[Site, Refunds],
) -> None:
    site, refunds = served
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
    assert refunds.ran == []
    rejected = await call(site, "legacy", order="A-18", amount=100)
    assert "answer at" in error_text(rejected), "the same call is still waiting on the person"
