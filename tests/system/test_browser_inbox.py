"""The decision inbox in Chromium: alice answers one decision and declines another there and the calls that asked
finish with it; bob sees none of hers and his direct POST is refused; carol, an operator, cancels with a reason.

The site is `tests.wire.test_inbox`'s (MCP endpoint, sign-in, decision pages and inbox served on loopback); Chromium
is Debian's, driven by Playwright as in `tests.system.test_browser`. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page

from mcp_elicit.model import DecisionStatus, Operator
from tests.helpers.browser import NARROW, WIDE, Screenshots, browser_page, heading, press
from tests.helpers.browser import chromium as chromium
from tests.helpers.browser import shots as shots
from tests.helpers.inbox_site import PASSWORDS, call, only, recorded
from tests.helpers.inbox_site import site as site
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.results import text

pytestmark = pytest.mark.anyio


async def sign_in_to_the_inbox(page: Page, site: Site, user: str) -> None:
    await page.goto(f"{site.base}/inbox")
    assert page.url.startswith(f"{site.base}/signin?next="), page.url
    await page.get_by_label("Username").fill(user)
    await page.get_by_label("Password").fill(PASSWORDS[user])
    landed = await press(page, "Sign in")
    assert landed.status == 200 and page.url == f"{site.base}/inbox"


async def test_the_inbox_in_chromium_for_the_person_another_user_and_an_operator(
    site: Site, chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    await call(site, "2026-07-28", "book", city="Oslo")
    await call(site, "2026-07-28", "set_key")
    booked, keyed = only(site, "How many seats to Oslo?"), only(site, "Enter your Example API key")
    deploy = recorded(site, "alice", tool="deploy", client="ops-console", message="Approve the deploy of v2?")

    async with browser_page(chromium, tmp_path / "alice") as page:
        await sign_in_to_the_inbox(page, site, "alice")
        assert await heading(page) == "Decisions waiting for you"
        assert await page.locator("section.entry h2").all_inner_texts() == [
            "deploy asks you to answer a question",
            "set_key asks you to enter your Example API key",
            "book asks you to answer a question",
        ]
        await shots(page, "alice")
        await page.set_viewport_size(NARROW)
        assert await page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
        await shots(page, "alice-narrow")
        await page.set_viewport_size(WIDE)

        form = page.locator("section.entry", has_text="How many seats to Oslo?")
        async with page.expect_navigation():
            await form.get_by_role("link", name="Answer").click()
        assert page.url == f"{site.base}/elicit/{booked.elicitation_id}"
        await page.get_by_label("Seats").fill("2")
        await shots(page, "form")
        done = await press(page, "Submit")
        assert done.status == 200 and await heading(page) == "Done"

        await page.goto(f"{site.base}/inbox")
        assert await page.locator("section.entry").count() == 2
        url_entry = page.locator("section.entry", has_text="Enter your Example API key")
        assert await url_entry.get_by_role("link", name="Continue").get_attribute("href") == (
            f"/elicit/{keyed.elicitation_id}"
        )
        async with page.expect_navigation():
            await url_entry.get_by_role("button", name="Decline").click()
        assert page.url == f"{site.base}/inbox?done=declined"
        assert await page.locator("p.ok").inner_text() == "Declined. The tool learns that you said no."
        assert await page.locator("section.entry h2").all_inner_texts() == ["deploy asks you to answer a question"]
        await shots(page, "alice-declined")
    assert text(await call(site, "2026-07-28", "book", city="Oslo")) == "booked 2 to Oslo"
    assert text(await call(site, "2026-07-28", "set_key")) == "declined"

    async with browser_page(chromium, tmp_path / "bob") as page:
        await sign_in_to_the_inbox(page, site, "bob")
        assert await page.locator("section.entry").count() == 0
        assert "Nothing is waiting." in await page.locator("main").inner_text()
        assert "deploy" not in await page.content()
        await shots(page, "bob")
        posted = await page.request.post(f"{site.base}/inbox/{deploy.elicitation_id}/cancel", form={"csrf": "x"})
        assert posted.status == 403 and "expired" in await posted.text()  # refused before anything is read
    assert site.store.get_decision(deploy.elicitation_id, Operator()) == deploy

    async with browser_page(chromium, tmp_path / "carol") as page:
        await sign_in_to_the_inbox(page, site, "carol")
        assert await heading(page) == "Decisions waiting for anyone"
        entry = page.locator("section.entry", has_text="Approve the deploy of v2?")
        assert "Alice Liddell (alice)" in await entry.locator("dl").inner_text()
        assert await entry.get_by_role("link").count() == 0
        await entry.get_by_label("Reason").fill("v2 was withdrawn")
        await shots(page, "operator")
        async with page.expect_navigation():
            await entry.get_by_role("button", name="Cancel for them").click()
        assert "your reason is in the audit" in await page.locator("p.ok").inner_text()
        assert await page.locator("section.entry").count() == 0
        await shots(page, "operator-cancelled")
    cancelled = site.store.get_decision(deploy.elicitation_id, Operator())
    assert cancelled.status is DecisionStatus.CANCELLED
    last = site.store.audit_trail(deploy.elicitation_id, Operator())[-1]
    assert (last.actor, last.reason) == (
        f"operator:{site.principal('carol')}",
        "cancelled by an operator in the inbox: v2 was withdrawn",
    )
    assert len(shots.taken) == 7
