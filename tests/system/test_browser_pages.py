"""What the pages say, in Chromium, against the reference deployment as real processes: the server's one name
(the one its MCP clients see), why the person must sign in, where Continue leads, for whom, and what was done.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_types import SERVER_INFO_META_KEY

from tests.helpers.browser import PASSWORDS, Screenshots, browser_page, client_on_a, first_ask, heading, press
from tests.helpers.browser import chromium as chromium
from tests.helpers.browser import deployment as deployment
from tests.helpers.browser import shots as shots
from tests.helpers.deployment import Deployment

pytestmark = pytest.mark.anyio


def host(url: str) -> str:
    return url.split("://", 1)[1]


async def test_the_pages_say_who_asks_why_where_continue_leads_and_what_was_done(
    deployment: Deployment, chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    async with client_on_a(deployment) as client:
        first, url = await first_ask(client, "connect_account")
    # The name the server gives itself on the wire (2026-07-28 stamps it on every result), as MCP clients show it.
    assert first.meta is not None
    name = first.meta[SERVER_INFO_META_KEY]["name"]
    async with browser_page(chromium, tmp_path / "profile") as page:
        await page.goto(url)
        assert page.url.startswith(f"{deployment.b}/signin?next="), page.url
        why = await page.locator("main").inner_text()
        assert f"Sign in to {name} at {host(deployment.public)}." in why
        assert "The tool connect_account is waiting for you to connect your Example account." in why
        assert "so that I can read your profile" not in why  # the message waits for the sign-in
        await shots(page, "signin")
        await page.get_by_label("Username").fill("alice")
        await page.get_by_label("Password").fill(PASSWORDS["alice"])
        decision = await press(page, "Sign in")

        assert decision.status == 200 and page.url == url
        assert await heading(page) == f"{name} asks you to connect your Example account"
        assert await page.locator(".brand").inner_text() == f"{name} · secure step"
        terms = await page.locator("dt").all_inner_texts()
        details = await page.locator("dd").all_inner_texts()
        summary = dict(zip(terms, details, strict=True))
        assert summary["Server"] == name and summary["Tool"] == "connect_account"
        assert summary["For"] == "Alice Liddell (alice)"
        leads = await page.locator("p.next").inner_text()
        assert leads == (
            f"Continue takes you to Example at {host(deployment.provider)}, where you sign in and allow access; "
            "then you come back here."
        )
        await shots(page, "decision")

        await press(page, "Continue")
        assert page.url.startswith(f"{deployment.provider}/authorize?")
        await page.get_by_label("Username").fill("alice")
        await page.get_by_label("Password").fill("wonderland")
        await press(page, "Sign in")
        done = await press(page, "Allow")
        assert done.status == 200 and page.url.startswith(f"{deployment.b}/elicit/callback?")
        assert await heading(page) == "Done"
        assert await page.locator("p.ok").inner_text() == "Connected to Example as alice (Alice Liddell)."
        await shots(page, "done")
    assert name == "mcp-elicit-reference"
    assert len(shots.taken) == 3
