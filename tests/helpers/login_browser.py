"""The person's browser for `mcp-elicit login` tests: Debian's Chromium, driven by Playwright, signs in at the URL.

Run as `python tests/helpers/login_browser.py URL` (the tests make it `$BROWSER`, so `webbrowser.open` starts it, or run
it on the address `login` printed). It signs in on the local authorization server's page with
`LOGIN_USER` / `LOGIN_PASSWORD`, and exits 0 only when the browser lands on the command's loopback callback
page saying "Signed in"; otherwise it prints where it stopped and exits 1. A screenshot of each page goes to
`LOGIN_SHOTS` (a path prefix) when set.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from playwright.async_api import async_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


async def sign_in(url: str, username: str, password: str, shots: str | None) -> str:
    """The heading of the page the browser ends on."""
    with tempfile.TemporaryDirectory(prefix="login-browser-") as profile:
        async with async_playwright() as playwright:
            context = await playwright.chromium.launch_persistent_context(
                Path(profile), executable_path=CHROMIUM, headless=True, args=ARGS, locale="en-US"
            )
            try:
                page = context.pages[0] if context.pages else await context.new_page()
                page.set_default_timeout(20_000)
                await page.goto(url)
                if shots:
                    await page.screenshot(path=f"{shots}-signin.png", full_page=True)
                await page.get_by_label("Username").fill(username)
                await page.get_by_label("Password").fill(password)
                async with page.expect_navigation(url="http://127.0.0.1:*/callback?*"):
                    await page.get_by_role("button", name="Sign in", exact=True).click()
                if shots:
                    await page.screenshot(path=f"{shots}-callback.png", full_page=True)
                return (await page.locator("h1").inner_text()).strip()
            finally:
                await context.close()


def main() -> int:
    url = sys.argv[1]
    heading = asyncio.run(
        sign_in(url, os.environ["LOGIN_USER"], os.environ["LOGIN_PASSWORD"], os.environ.get("LOGIN_SHOTS"))
    )
    if heading != "Signed in":
        print(f"the browser ended on {heading!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
