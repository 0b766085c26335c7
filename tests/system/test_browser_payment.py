"""A payment in Chromium: the person opens the server's page for the decision, signs in, reads the amount the
server computed, continues to the stand-in provider's checkout, is declined once, pays, and comes back to a page
that says Done once the provider's webhook (sent twice, out of order) has completed the decision, once.

The site is `tests.helpers.payments_site` (sign-in, decision pages and the provider served on loopback); Chromium
is Debian's, driven by Playwright as in `tests.system.test_browser`. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from mcp_elicit.model import DecisionStatus, Operator
from tests.helpers.browser import Screenshots, browser_page, heading, press
from tests.helpers.browser import chromium as chromium
from tests.helpers.browser import shots as shots
from tests.helpers.payments_site import INVOICE, ask_payment, payments_site

pytestmark = pytest.mark.anyio


async def test_a_payment_through_the_checkout_in_chromium(
    sqlite_url: str, chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    with payments_site(sqlite_url, duplicates=2, jitter=0.3) as site:
        decision = ask_payment(site, "alice")
        url = f"{site.base}/elicit/{decision.elicitation_id}"
        async with browser_page(chromium, tmp_path / "alice") as page:
            await page.goto(url)
            await page.get_by_label("Username").fill("alice")
            await page.get_by_label("Password").fill("alice-pw")
            await press(page, "Sign in")
            assert page.url == url and await heading(page) == "Invoices asks you to pay with Example Pay"
            assert INVOICE.shown in await page.locator("dl").first.inner_text()
            await shots(page, "amount")
            await press(page, "Continue")
            assert page.url.startswith(f"{site.provider}/checkout/"), page.url
            assert await heading(page) == f"Pay {INVOICE.shown}"
            await press(page, "Fail (card declined)")
            assert "declined" in await page.locator("p.error").inner_text()
            await press(page, f"Pay {INVOICE.shown}")
            assert page.url == url
            deadline = time.monotonic() + 15
            while await heading(page) != "Done" and time.monotonic() < deadline:
                await anyio.sleep(0.2)
                await page.reload()
            assert await heading(page) == "Done"
            await shots(page, "done")
        await anyio.sleep(1.0)  # the remaining copies and the late failure arrive, and change nothing
        trail = site.store.audit_trail(decision.elicitation_id, Operator("test"))
        assert [row.to_status for row in trail].count(DecisionStatus.EXTERNAL_COMPLETED) == 1
        assert site.store.get_decision(decision.elicitation_id, Operator("test")).status is (
            DecisionStatus.EXTERNAL_COMPLETED
        )
