"""Two approvers in Chromium: the first opens the signed link a notification carries, signs in, lowers the amount
and approves; the second finds the call in their inbox's queue, reads the first's approval and its change from the
call as made, and what Approve approves, and approves the same values; the decision ends accepted with them.

The site is `tests.helpers.approvers_site` (sign-in, decision pages and inbox served on loopback, alice's call
recorded with release-managers as approvers, two of them needed); Chromium is Debian's, driven by Playwright as in
`tests.system.test_browser`. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.model.approvers import ApproverRule
from tests.helpers.approvers_site import ApproversSite, approvers_site
from tests.helpers.browser import Screenshots, browser_page, heading, press
from tests.helpers.browser import chromium as chromium
from tests.helpers.browser import shots as shots

pytestmark = pytest.mark.anyio


@pytest.fixture
def site(sqlite_url: str) -> Iterator[ApproversSite]:
    with approvers_site(sqlite_url) as served:
        yield served


async def test_two_approvers_from_a_link_and_the_inbox_in_chromium(
    site: ApproversSite, chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    decision = site.ask(ApproverRule(("release-managers",), quorum=2))
    link = site.link(decision)
    async with browser_page(chromium, tmp_path / "bob") as page:
        await page.goto(link)
        assert page.url.startswith(f"{site.base}/signin?next="), page.url
        await page.get_by_label("Username").fill("bob")
        await page.get_by_label("Password").fill("bob-pw")
        await press(page, "Sign in")
        assert page.url == link and await heading(page) == "Refund desk asks for your approval"
        assert await page.locator("div.message").inner_text() == "Approve this refund?"
        amount = page.get_by_label("Amount")
        assert await amount.input_value() == "400", "prefilled with the call's value"
        assert await page.locator("p.approves").inner_text() == "Approve approves: the call as made."
        assert await page.get_by_role("button", name="Cancel").count() == 0
        await shots(page, "link")
        await amount.fill("250")
        done = await press(page, "Approve")
        assert done.status == 200 and await heading(page) == "Your approval was recorded"
        assert "Your approval was recorded: 1 of 2" in await page.locator("p.ok").inner_text()
        await shots(page, "first-approval")
    assert site.store.get_decision(decision.elicitation_id, Operator()).status is DecisionStatus.REQUESTED

    async with browser_page(chromium, tmp_path / "carol") as page:
        await page.goto(f"{site.base}/inbox")
        await page.get_by_label("Username").fill("carol")
        await page.get_by_label("Password").fill("carol-pw")
        await press(page, "Sign in")
        queue = page.locator("section.approval")
        assert await queue.count() == 1
        assert "Waiting for approval by release-managers (1 of 2)" in await queue.inner_text()
        await shots(page, "queue")
        async with page.expect_navigation():
            await queue.get_by_role("link", name="Open to approve").click()
        assert await heading(page) == "Refund desk asks for your approval"
        tally = await page.locator("p.tally").inner_text()
        assert "Approved 1 of 2: Bob (bob). Bob (bob) changed amount: 400 → 250." in tally, "the change, plainly"
        assert await page.get_by_label("Amount").input_value() == "250", "the leading proposal prefills the form"
        approves = await page.locator("p.approves").inner_text()
        assert approves == "Approve approves: amount 250 (changed from 400), the rest as called."
        await shots(page, "second-approver")
        done = await press(page, "Approve")
        assert done.status == 200 and await heading(page) == "Approved"
        assert "the call runs with amount 250 (changed from 400)" in await page.locator("p.ok").inner_text()
        await shots(page, "approved")
    ended = site.store.get_decision(decision.elicitation_id, Operator())
    assert ended.status is DecisionStatus.ACCEPTED and ended.content == {"amount": 250}
