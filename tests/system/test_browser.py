"""The URL-mode pages in a real browser: Debian's Chromium, headless, driven by Playwright, against the reference
HTTP deployment as real processes (two instances on one store, the stand-in provider).

An MCP client on instance A asks for a decision the real way; Chromium opens the decision URL (served by B),
signs in, continues to the provider, consents and lands on our "Done" page; then the client's retry finishes.
Screenshots of each page go to test-artifacts/screenshots/<test>-<step>.png for a person to look at.

Chromium is mandatory under CI=true: a missing /usr/bin/chromium fails the run instead of skipping. Browsers
that Playwright would download itself are never used (no `playwright install`).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, Result
from playwright.async_api import Page, Response

from mcp_elicit.model import DecisionOrigin, DecisionStatus, Operator, Principal, new_operation, new_url_decision
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.store import open_store
from tests.helpers.browser import (
    NARROW,
    PASSWORDS,
    WIDE,
    Screenshots,
    browser_page,
    client_on_a,
    first_ask,
    heading,
    press,
)
from tests.helpers.browser import chromium as chromium
from tests.helpers.browser import deployment as deployment
from tests.helpers.browser import shots as shots
from tests.helpers.deployment import Deployment
from tests.helpers.results import text

pytestmark = pytest.mark.anyio

CANARY = "canary-sk-browser-7c41e9"


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
        decision = store.get_decision(url.rsplit("/", 1)[-1], Operator())
        assert decision.status is DecisionStatus.EXTERNAL_COMPLETED
        trail = store.audit_trail(decision.elicitation_id, Operator())
    finally:
        store.close()
    assert all(CANARY not in str(entry.details) + entry.reason for entry in trail)
    assert all(CANARY not in log.read_text(errors="replace") for log in deployment.logs)


async def test_another_user_gets_the_refusal_page_and_switches_to_the_account_asked(
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
            assert [await b.inner_text() for b in await page.get_by_role("button").all()] == [
                "Sign out and switch account"
            ]
            assert "alice" not in (await page.content()).lower()
            await shots(page, "refused")
            after = store.get_decision(elicitation_id, Operator())
            signing_in = await press(page, "Sign out and switch account")
            assert signing_in.status == 200
            reason = await page.locator(".reason").inner_text()
            assert "The tool connect_account is waiting for you to connect your Example account." in reason
            assert "Signed in as" not in await page.content()  # signed out: no session on the sign-in page
            await shots(page, "switch")
            decision = await sign_in_here(page, deployment, shots, "alice", PASSWORDS["alice"])
            assert decision.status == 200 and page.url == url
            assert await heading(page) == "mcp-elicit-reference asks you to connect your Example account"
            assert await page.get_by_role("button", name="Continue").count() == 1
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
