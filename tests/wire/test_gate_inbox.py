"""A gated call approved from the decision inbox: the client cannot be asked (`Fallback.WEB`), the person finds the
approval in their inbox, opens it, approves with an edit, and the same call made again runs the edit, once.

Real HTTP on loopback (the MCP endpoint, sign-in, the inbox and the decision pages in one app), httpx2 as the
browser, the MCP client in-process declaring no elicitation (its principal is alice).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from mcp import Client
from mcp_types import CallToolResult

from mcp_elicit.approvals import APPROVAL_KEY
from mcp_elicit.model import DecisionStatus, Operator
from tests.helpers.gate_site import Refunds
from tests.helpers.inbox_site import USERS, browser, inbox_routes, sign_in
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.pages_site import hidden, mcp_site
from tests.helpers.results import error_text

pytestmark = pytest.mark.anyio


@pytest.fixture
def served(store_url: str) -> Iterator[tuple[Site, Refunds]]:
    refunds = Refunds()
    with mcp_site(store_url, "gate-inbox", refunds.build, users=USERS, more_routes=inbox_routes) as site:
        yield site, refunds


async def refund(site: Site, era: str, **arguments: object) -> CallToolResult:
    async with Client(site.server, mode=era) as client:
        return await client.call_tool("refund", dict(arguments))


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_approved_from_the_inbox_with_an_edit_the_call_made_again_runs_it_once(
    served: tuple[Site, Refunds], era: str
) -> None:
    site, refunds = served
    waiting = await refund(site, era, order="A-17", amount=400)
    assert "answer at" in error_text(waiting) and refunds.ran == []
    [approval] = site.store.list_decisions(Operator())
    assert approval.key == APPROVAL_KEY
    with browser() as alice:
        sign_in(alice, site, "alice")
        inbox = alice.get(f"{site.base}/inbox").text
        link = re.search(rf'href="(/elicit/{approval.elicitation_id})">Answer</a>', inbox)
        assert link, "the approval is in the person's inbox, to answer"
        assert 'Tool: refund\norder: "A-17"\namount: 400' in unescape(inbox)
        page = alice.get(site.base + link.group(1)).text
        assert re.search(r'<input [^>]*name="f\.amount"[^>]*value="400"', page), "prefilled with the call's value"
        done = alice.post(
            f"{site.base}/elicit/{approval.elicitation_id}/answer",
            data={"csrf": hidden(page, "csrf"), "action": "accept", "f.amount": "250"},
        )
        assert done.status_code == 200, done.text
        after = alice.get(f"{site.base}/inbox").text
    assert approval.elicitation_id not in after and "Nothing is waiting." in after
    again = await refund(site, era, order="A-17", amount=400)
    assert [block.text for block in again.content] == [  # type: ignore[union-attr]
        "The user changed the arguments before approving (amount: 400 → 250); the tool ran with the changes.",
        "refunded 250 on A-17",
    ]
    assert refunds.ran == [{"order": "A-17", "amount": 250}]
    stored = site.store.get_decision(approval.elicitation_id, Operator())
    assert (stored.status, stored.content) == (DecisionStatus.ACCEPTED, {"amount": 250})
    trail = site.store.audit_trail(approval.elicitation_id, Operator())
    assert (trail[-1].to_status, trail[-1].actor) == ("accepted", f"browser:{site.principal('alice')}")
    asked_again = await refund(site, era, order="A-17", amount=400)
    assert "answer at" in error_text(asked_again), "an ended gated call made again is a new call, asked again"
    assert refunds.ran == [{"order": "A-17", "amount": 250}], "the edit ran once"
