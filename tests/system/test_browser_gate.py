"""An approval in Chromium: the person opens the page the gated call named, signs in, reads the call, lowers the
amount in the prefilled field and approves; the same call made again runs what they approved, once.

The site is `tests.helpers.gate_site` (MCP endpoint, sign-in and decision pages served on loopback); Chromium is
Debian's, driven by Playwright as in `tests.system.test_browser`. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.browser import Screenshots, browser_page, heading, press
from tests.helpers.browser import chromium as chromium
from tests.helpers.browser import shots as shots
from tests.helpers.gate_site import Refunds, call, gate_site
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.web_answers import page_url

pytestmark = pytest.mark.anyio


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[Site, Refunds]]:
    with gate_site(sqlite_url) as running:
        yield running


async def test_an_approval_with_an_edit_in_chromium(
    served: tuple[Site, Refunds], chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    site, refunds = served
    url = page_url(await call(site, "2026-07-28", order="A-17", amount=400))
    async with browser_page(chromium, tmp_path / "alice") as page:
        await page.goto(url)
        assert page.url.startswith(f"{site.base}/signin?next="), page.url
        await page.get_by_label("Username").fill("alice")
        await page.get_by_label("Password").fill("wonderland")
        await press(page, "Sign in")
        assert page.url == url and await heading(page) == "Test server needs your answer"
        message = await page.locator("div.message").inner_text()
        assert message.splitlines()[:5] == ["Approve this call?", "", "Tool: refund", 'order: "A-17"', "amount: 400"]
        amount = page.get_by_label("Amount")
        assert await amount.input_value() == "400", "prefilled with the call's value"
        reject = page.get_by_role("group", name="Reject this call")
        assert await reject.get_by_label("No").is_checked(), "approving is what the page offers first"
        await shots(page, "approval")
        await amount.fill("250")
        await page.get_by_label("Note to the assistant (optional)").fill("half now, half next week")
        done = await press(page, "Submit")
        assert done.status == 200
        await shots(page, "approved")
    assert refunds.ran == [], "the page records the approval; the call made again runs it"
    again = await call(site, "2026-07-28", order="A-17", amount=400)
    assert [block.text for block in again.content] == [  # type: ignore[union-attr]
        "The user changed the arguments before approving (amount: 400 → 250); the tool ran with the changes.",
        "Note from the user: half now, half next week",
        "refunded 250 on A-17",
    ]
    assert refunds.ran == [{"order": "A-17", "amount": 250}]
