"""The URL-mode pages in a real browser: Debian's Chromium, headless, driven by Playwright, against the reference
HTTP deployment as real processes (two instances on one store, the stand-in provider).

An MCP client on instance A asks for a decision the real way; Chromium opens the decision URL (served by B),
signs in, continues to the provider, consents and lands on our "Done" page; then the client's retry finishes.
Screenshots of each page go to test-artifacts/screenshots/<test>-<step>.png for a person to look at.

Chromium is mandatory under CI=true: a missing /usr/bin/chromium fails the run instead of skipping. Browsers
that Playwright would download itself are never used (no `playwright install`).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitRequestURLParams, ElicitResult, InputRequiredResult, Result
from playwright.async_api import Page, Response, ViewportSize, async_playwright

from mcp_elicit.model import DecisionOrigin, DecisionStatus, Operator, Principal, new_operation, new_url_decision
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.store import open_store
from tests.helpers.environment import IN_CI
from tests.helpers.person import Person
from tests.runtime.test_server_flow import text
from tests.system.test_deployment import Deployment, mcp_on_a, processes

pytestmark = pytest.mark.anyio

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
CANARY = "canary-sk-browser-7c41e9"
ERA = "2026-07-28"
WIDE: ViewportSize = {"width": 960, "height": 720}
NARROW: ViewportSize = {"width": 375, "height": 720}  # a phone: the page must not scroll sideways
PASSWORDS = {"alice": "wonderland", "bob": "builder"}  # as tests.system.test_deployment.processes configures them


@dataclass
class Screenshots:
    """Saves full-page screenshots as test-artifacts/screenshots/<prefix>-<step>.png."""

    prefix: str
    taken: list[Path] = field(default_factory=list)

    async def __call__(self, page: Page, step: str) -> None:
        path = SCREENSHOTS / f"{self.prefix}-{step}.png"
        await page.screenshot(path=path, full_page=True)
        self.taken.append(path)


@pytest.fixture
def chromium() -> Path:
    if not os.access(CHROMIUM, os.X_OK):
        message = f"Debian's Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if IN_CI:
            pytest.fail(f"{message}; the browser tests are mandatory under CI=true")
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture
def deployment(chromium: Path, store_url: str, tmp_path: Path) -> Iterator[Deployment]:
    """The processes start only once Chromium is known to be there, on a store already migrated here: two
    `serve` processes migrating one fresh SQLite file at once were seen to fail with "database is locked"."""
    open_store(store_url).close()
    with processes(store_url, tmp_path) as running:
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


async def sign_in_here(
    page: Page, deployment: Deployment, shots: Screenshots, username: str, password: str
) -> Response:
    """Our own /signin page (the issuer of the MCP tokens), where the decision link sends a new browser."""
    assert page.url.startswith(f"{deployment.b}/signin?next="), page.url
    assert await heading(page) == "Sign in"
    await page.get_by_label("Username").fill(username)
    await page.get_by_label("Password").fill(password)
    await shots(page, "signin")
    return await press(page, "Sign in")


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


async def accepted_retry(
    client: Client, first: CallToolResult | InputRequiredResult | Result, tool: str
) -> CallToolResult:
    """Call `tool` again with `first`'s request state and its URL decision accepted: the final result."""
    retried = await client.session.call_tool(
        tool,
        {},
        input_responses={tool: ElicitResult(action="accept")},
        request_state=first.request_state,  # type: ignore[union-attr]
        allow_input_required=True,
    )
    assert isinstance(retried, CallToolResult)
    return retried


async def open_decision(page: Page, deployment: Deployment, url: str, shots: Screenshots, user: str) -> Response:
    """Open a decision link in a browser that is not signed in: sign in as `user`; the page the link shows then."""
    assert url.startswith(f"{deployment.b}/elicit/"), url
    first = await page.goto(url)
    assert first is not None and first.status == 200
    return await sign_in_here(page, deployment, shots, user, PASSWORDS[user])


async def test_oauth_connect_in_chromium_then_the_retry_finishes(
    deployment: Deployment, chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    async with client_on_a(deployment) as client:
        first, url = await first_ask(client, "connect_account")
        async with browser_page(chromium, tmp_path / "profile") as page:
            decision = await open_decision(page, deployment, url, shots, "alice")
            assert decision.status == 200 and page.url == url
            assert await heading(page) == "mcp-elicit-reference asks you to connect your Example account"
            facts = await page.locator("dl").inner_text()
            assert "connect_account" in facts and "alice" in facts
            await shots(page, "decision")
            await page.set_viewport_size(NARROW)
            assert await page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
            await shots(page, "decision-narrow")
            await page.set_viewport_size(WIDE)

            provider_sign_in = await press(page, "Continue")
            assert provider_sign_in.status == 200 and page.url.startswith(f"{deployment.provider}/authorize?")
            assert await heading(page) == "Sign in to continue to elicit-reference"
            await page.get_by_label("Username").fill("alice")
            await page.get_by_label("Password").fill("wonderland")
            await shots(page, "provider-signin")

            consent = await press(page, "Sign in")
            assert consent.status == 200
            assert "wants to read your profile" in await heading(page)
            assert "Alice Liddell" in await page.locator("main").inner_text()
            await shots(page, "provider-consent")

            done = await press(page, "Allow")
            assert done.status == 200 and page.url.startswith(f"{deployment.b}/elicit/callback?")
            assert await heading(page) == "Done"
            await shots(page, "done")
        retried = await accepted_retry(client, first, "connect_account")
    assert text(retried) == "Connected as alice (Alice Liddell)."
    assert len(shots.taken) == 6


async def test_api_key_in_chromium_reaches_the_vault_not_the_tool_result(
    deployment: Deployment, chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    async with client_on_a(deployment) as client:
        first, url = await first_ask(client, "set_api_key")
        async with browser_page(chromium, tmp_path / "profile") as page:
            await open_decision(page, deployment, url, shots, "alice")
            assert await heading(page) == "mcp-elicit-reference asks you to enter your Example API key"
            await shots(page, "decision")

            form = await press(page, "Continue")
            assert form.status == 200 and page.url == f"{url}/continue"
            assert await heading(page) == "Your Example API key"
            key = page.get_by_label("API key")
            assert await key.get_attribute("type") == "password"
            await key.fill(CANARY)
            await shots(page, "key-form")

            done = await press(page, "Save key")
            assert done.status == 200 and await heading(page) == "Done"
            assert CANARY not in await page.content()
            await shots(page, "done")
        retried = await accepted_retry(client, first, "set_api_key")
    assert text(retried) == "Your Example API key is stored on the server."
    assert CANARY not in retried.model_dump_json()
    store = open_store(deployment.store_url)
    try:
        [decision] = store.list_decisions(Operator())
        assert decision.status is DecisionStatus.EXTERNAL_COMPLETED
        trail = store.audit_trail(decision.elicitation_id, Operator())
    finally:
        store.close()
    assert all(CANARY not in str(entry.details) + entry.reason for entry in trail)
    assert all(CANARY not in log.read_text(errors="replace") for log in deployment.logs)


async def test_another_user_gets_the_refusal_page_and_the_decision_is_untouched(
    deployment: Deployment, chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    async with client_on_a(deployment) as client:
        _, url = await first_ask(client, "connect_account")
    elicitation_id = url.rsplit("/", 1)[-1]
    store = open_store(deployment.store_url)
    try:
        before = store.get_decision(elicitation_id, Operator())
        async with browser_page(chromium, tmp_path / "profile") as page:
            refused = await open_decision(page, deployment, url, shots, "bob")
            assert refused.status == 403 and page.url == url
            assert await heading(page) == "This step belongs to another account"
            assert await page.get_by_role("button").count() == 0
            await shots(page, "refused")
        after = store.get_decision(elicitation_id, Operator())
        notes = [e for e in store.audit_trail(elicitation_id, Operator()) if e.actor.startswith("browser:")]
    finally:
        store.close()
    assert after == before and after.status is DecisionStatus.REQUESTED
    assert [e.actor for e in notes] == [f"browser:{deployment.public}#bob"]


async def test_an_expired_link_shows_the_expired_page(
    deployment: Deployment, chromium: Path, tmp_path: Path, shots: Screenshots
) -> None:
    # The reference tools ask with the library's default TTL and no knob reaches it from outside the process,
    # so this decision is made directly in the deployment's store, with a one-second TTL.
    store = open_store(deployment.store_url)
    try:
        principal = Principal(f"{deployment.public}#alice", "browser-test")
        now = datetime.now(UTC)
        operation = store.create_operation(
            new_operation(principal, method="tools/call", target="connect_account",
                          request_digest="sha256:" + uuid.uuid4().hex, now=now, ttl=timedelta(hours=1))
        )  # fmt: skip
        elicitation_id = new_elicitation_id()
        decision = store.create_decision(
            new_url_decision(
                DecisionOrigin(operation_id=operation.operation_id, key="connect_account", principal=principal,
                               origin_method="tools/call", origin_request_digest=operation.request_digest),
                message="Connect your Example account so that I can read your profile.",
                url=f"{deployment.public}/elicit/{elicitation_id}", now=now, ttl=timedelta(seconds=1),
                elicitation_id=elicitation_id,
            )
        )  # fmt: skip
        assert decision.url is not None
        await anyio.sleep(max(0.0, (decision.expires_at - datetime.now(UTC)).total_seconds()) + 0.2)
        async with browser_page(chromium, tmp_path / "profile") as page:
            # Nothing has swept it yet: the page itself sees the TTL passed and offers no Continue.
            expired = await open_decision(page, deployment, decision.url, shots, "alice")
            assert expired.status == 410
            assert await heading(page) == "This link has expired"
            assert await page.get_by_role("button", name="Continue", exact=True).count() == 0
            assert "next request starts a new step" in await page.locator("main").inner_text()
            await shots(page, "expired")
            reopened = await page.goto(decision.url)
            assert reopened is not None and reopened.status == 410
            assert await heading(page) == "This link has expired"
        stored = store.get_decision(elicitation_id, Operator())
    finally:
        store.close()
    assert stored.status is DecisionStatus.EXPIRED
