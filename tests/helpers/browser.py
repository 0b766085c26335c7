"""The reference deployment in a real browser: Debian's Chromium, headless, driven by Playwright; screenshots."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitRequestURLParams, InputRequiredResult, Result
from playwright.async_api import Page, Response, ViewportSize, async_playwright

from tests.helpers.deployment import Deployment, mcp_on_a, module_deployment
from tests.helpers.environment import IN_CI
from tests.helpers.person import Person

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
ERA = "2026-07-28"
WIDE: ViewportSize = {"width": 960, "height": 720}
NARROW: ViewportSize = {"width": 375, "height": 720}  # a phone: the page must not scroll sideways
PASSWORDS = {"alice": "wonderland", "bob": "builder"}  # as `deployment.processes` configures them


@dataclass
class Screenshots:
    """Saves full-page screenshots as test-artifacts/screenshots/<prefix>-<step>.png."""

    prefix: str
    taken: list[Path] = field(default_factory=list)

    async def __call__(self, page: Page, step: str) -> None:
        path = SCREENSHOTS / f"{self.prefix}-{step}.png"
        await page.screenshot(path=path, full_page=True)
        self.taken.append(path)


def require_chromium() -> Path:
    if not os.access(CHROMIUM, os.X_OK):
        message = f"Debian's Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if IN_CI:
            pytest.fail(f"{message}; the browser tests are mandatory under CI=true")
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture
def chromium() -> Path:
    return require_chromium()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The processes start only once Chromium is known to be there."""
    require_chromium()
    with module_deployment(tmp_path_factory) as running:
        yield running


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Screenshots:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return Screenshots(re.sub(r"[^A-Za-z0-9_.]+", "-", request.node.name).strip("-"))


@asynccontextmanager
async def browser_page(chromium: Path, profile: Path) -> AsyncIterator[Page]:
    """A page in a fresh Chromium with a fresh user-data directory, closed afterwards."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=WIDE,
            locale="en-US",
            timezone_id="UTC",
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            page.set_default_timeout(20_000)
            yield page
        finally:
            await context.close()


async def press(page: Page, button: str) -> Response:
    """Click a button that submits a form; the response of the page it lands on (after any redirects)."""
    async with page.expect_navigation() as navigation:
        await page.get_by_role("button", name=button, exact=True).click()
    response = await navigation.value
    assert response is not None
    return response


async def heading(page: Page) -> str:
    return (await page.locator("h1").inner_text()).strip()


def decision_url(result: object, key: str) -> str:
    assert isinstance(result, InputRequiredResult) and result.input_requests is not None, result
    params = result.input_requests[key].params
    assert isinstance(params, ElicitRequestURLParams), params
    return params.url


@asynccontextmanager
async def client_on_a(deployment: Deployment) -> AsyncIterator[Client]:
    """alice's MCP client on instance A, in era `ERA`, signed in with an HTTP client of its own; it shows the
    person no question itself."""
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        mcp_on_a(deployment, http, ERA, elicitation_callback=Person()) as client,
    ):
        yield client


async def first_ask(client: Client, tool: str) -> tuple[CallToolResult | InputRequiredResult | Result, str]:
    """Call `tool`, which asks for a URL decision keyed by its own name: the result, and the decision's URL."""
    first = await client.session.call_tool(tool, {}, allow_input_required=True)
    return first, decision_url(first, tool)
