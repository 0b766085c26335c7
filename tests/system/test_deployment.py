"""The reference HTTP deployment as real processes: two `mcp-elicit serve` instances on one store and key
ring, the stand-in provider, an MCP client on instance A and a browser whose callback lands on instance B."""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitCompleteNotification, ElicitResult, InputRequiredResult

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.store import open_store
from tests.helpers.deployment import Deployment, mcp_on_a, module_deployment
from tests.helpers.oauth_client import code_for, hidden_fields, pkce, redeem, registered
from tests.helpers.person import Person
from tests.helpers.results import text

pytestmark = pytest.mark.anyio


async def connect_in_browser(browser: httpx2.AsyncClient, deployment: Deployment, url: str) -> str:
    """Open the decision page (served by B), continue, consent at the provider; return the final page."""
    assert urlsplit(url).netloc == urlsplit(deployment.b).netloc
    page = await browser.get(url)
    assert page.status_code == 200, page.text
    csrf = re.search(r'name="csrf" value="([^"]*)"', page.text)
    assert csrf is not None
    started = await browser.post(url + "/continue", data={"csrf": csrf.group(1)})
    assert started.status_code == 303, started.text
    authorize = started.headers["location"]
    form = await browser.get(authorize)
    signed = await browser.post(
        authorize.split("?")[0],
        data={
            "username": "alice",
            "password": "wonderland",
            "request": hidden_fields(form.text, "/authorize")["request"],
        },
    )
    consent = hidden_fields(signed.text, "/authorize/consent")
    decided = await browser.post(authorize.split("?")[0] + "/consent", data={**consent, "action": "allow"})
    assert decided.status_code == 302
    done = await browser.get(decided.headers["location"])
    return done.text


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with module_deployment(tmp_path_factory) as running:
        yield running


async def test_modern_call_on_a_browser_on_b_retry_finishes(deployment: Deployment) -> None:
    async with (
        httpx2.AsyncClient(timeout=30) as browser,
        mcp_on_a(deployment, browser, "2026-07-28", elicitation_callback=Person()) as client,
    ):
        first = await client.session.call_tool("connect_account", {}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.input_requests is not None
        url = first.input_requests["connect_account"].params.url  # type: ignore[union-attr]
        assert "Done" in await connect_in_browser(browser, deployment, url)
        done = await client.session.call_tool(
            "connect_account",
            {},
            input_responses={"connect_account": ElicitResult(action="accept")},
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, CallToolResult)
    assert text(done) == "Connected as alice (Alice Liddell)."
    store = open_store(deployment.store_url)
    try:
        decision = store.get_decision(url.rsplit("/", 1)[-1], Operator())
        assert decision.status is DecisionStatus.EXTERNAL_COMPLETED
        trail = store.audit_trail(decision.elicitation_id, Operator())
    finally:
        store.close()
    assert any(e.actor.startswith("browser:") for e in trail)


async def test_legacy_waiting_call_on_a_resumes_when_the_callback_lands_on_b(deployment: Deployment) -> None:
    notified: list[str] = []

    async def on_message(message: object) -> None:
        if isinstance(message, ElicitCompleteNotification):
            notified.append(message.params.elicitation_id)

    async with httpx2.AsyncClient(timeout=30) as browser:
        urls: list[str] = []

        async def consent(context: object, params: object) -> ElicitResult:
            urls.append(params.url)  # type: ignore[attr-defined]
            return ElicitResult(action="accept")

        async with mcp_on_a(
            deployment, browser, "legacy", elicitation_callback=consent, message_handler=on_message
        ) as client:
            results: list[CallToolResult] = []

            async def call() -> None:
                results.append(await client.call_tool("connect_account", {}))

            async def browse() -> None:
                with anyio.fail_after(20):
                    while not urls:
                        await anyio.sleep(0.05)
                assert "Done" in await connect_in_browser(browser, deployment, urls[0])

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                group.start_soon(browse)
            await anyio.sleep(0.2)
    assert text(results[0]) == "Connected as alice (Alice Liddell)."
    assert notified == [urls[0].rsplit("/", 1)[-1]]


async def test_a_canary_api_key_never_reaches_mcp_messages_results_logs_or_audit(deployment: Deployment) -> None:
    canary = "canary-" + base64.b16encode(os.urandom(8)).decode()
    wire: list[bytes] = []

    async def record_request(request: httpx2.Request) -> None:
        wire.append(request.content)

    async def record_response(response: httpx2.Response) -> None:
        wire.append(await response.aread())

    async with httpx2.AsyncClient(timeout=30) as browser:
        registration = await registered(deployment.public)
        verifier, challenge = pkce()
        code = await code_for(browser, deployment.public, registration, challenge)
        token = (await redeem(deployment.public, registration, code, verifier)).json()["access_token"]
        hooks: dict[str, list[Callable[..., Any]]] = {"request": [record_request], "response": [record_response]}
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=60, event_hooks=hooks
        ) as http, Client(
            streamable_http_client(f"{deployment.a}/mcp", http_client=http), mode="2026-07-28",
            elicitation_callback=Person(),
        ) as client:  # fmt: skip
            first = await client.session.call_tool("set_api_key", {}, allow_input_required=True)
            assert isinstance(first, InputRequiredResult) and first.input_requests is not None
            url = first.input_requests["set_api_key"].params.url  # type: ignore[union-attr]
            page = await browser.get(url)
            csrf = re.search(r'name="csrf" value="([^"]*)"', page.text)
            assert csrf is not None
            form = await browser.post(url + "/continue", data={"csrf": csrf.group(1)})
            key_csrf = re.search(r'name="csrf" value="([^"]*)"', form.text)
            assert key_csrf is not None
            done = await browser.post(url + "/key", data={"csrf": key_csrf.group(1), "api_key": canary})
            assert "Done" in done.text
            result = await client.session.call_tool(
                "set_api_key", {}, input_responses={"set_api_key": ElicitResult(action="accept")},
                request_state=first.request_state, allow_input_required=True,
            )  # fmt: skip
    assert isinstance(result, CallToolResult)
    assert text(result) == "Your Example API key is stored on the server."
    assert len(wire) >= 4 and any(b"set_api_key" in message for message in wire)
    assert not any(canary.encode() in message for message in wire)
    assert canary not in result.model_dump_json()
    for log in deployment.logs:
        assert canary.encode() not in log.read_bytes(), log.name
    store = open_store(deployment.store_url)
    try:
        decision = store.get_decision(url.rsplit("/", 1)[-1], Operator())
        trail = store.audit_trail(decision.elicitation_id, Operator())
        assert trail and all(canary not in f"{e.reason} {e.details} {e.actor}" for e in trail)
        vaulted = store.vault_get(f"{deployment.public}#alice", "example-api-key")
        assert vaulted is not None and canary.encode() not in vaulted.sealed
    finally:
        store.close()
