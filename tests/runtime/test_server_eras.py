"""Era edges: -32042 and the lost-notification retry, old peers that cannot be asked, the lowlevel Server.

The era edges are wire shapes the client kit handles for its host (a `-32042` and its retry, a round, a
completion notice, a pre-2025-06-18 handshake), so those tests speak through the SDK's client or raw HTTP;
the lowlevel server is called through `mcp_elicit.testing.Harness`, as its users would test it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import CallToolRequestParams, CallToolResult, ElicitResult, ListToolsResult, TextContent, Tool

import mcp_elicit.testing as scripted
from mcp_elicit.model import DecisionStatus, Operator, Principal
from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, RequestState
from mcp_elicit.store import DecisionConflict, open_store
from mcp_elicit.testing import Harness
from tests.helpers.http_harness import free_port, serving
from tests.helpers.person import Person
from tests.helpers.raw_http import handshake, post
from tests.helpers.results import text, unwrap
from tests.helpers.server import Approval, Counter, flow_tools

pytestmark = pytest.mark.anyio
LOCAL = Principal("local-user", "stdio")


@pytest.fixture
def elicitation(store_url: str, tmp_path: Path) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(store_url), request_state=RequestState(single_process=True), public_base_url="https://elicit.example"
    )
    runtime.server("era-server")
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    yield runtime
    runtime.close()


def complete(elicitation: Elicitation) -> None:
    complete_as(elicitation, LOCAL)


def complete_as(elicitation: Elicitation, owner: Principal) -> None:
    store = elicitation.store
    [decision] = store.list_decisions(Operator())
    consented = store.transition(decision, DecisionStatus.ACCEPTED_URL, caller=owner, reason="page opened")
    pending = store.transition(consented, DecisionStatus.EXTERNAL_PENDING, caller=owner)
    store.transition(pending, DecisionStatus.EXTERNAL_COMPLETED, caller=owner, reason="provider callback")


async def test_legacy_non_blocking_url_answers_32042_then_a_manual_retry_completes(elicitation: Elicitation) -> None:
    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=Person()) as client:
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await client.call_tool("connect_later", {})
        error = unwrap(raised.value)
        assert isinstance(error, MCPError) and error.code == -32042
        [wanted] = UrlElicitationRequiredError.from_error(error.error).elicitations
        [decision] = elicitation.store.list_decisions(Operator())
        assert wanted.elicitation_id == decision.elicitation_id
        assert wanted.url == f"https://elicit.example/elicit/{decision.elicitation_id}"

        with pytest.raises((MCPError, BaseExceptionGroup)) as still:
            await client.call_tool("connect_later", {})
        assert getattr(unwrap(still.value), "code", None) == -32042

        complete(elicitation)
        assert text(await client.call_tool("connect_later", {})) == "connected"
    assert len(elicitation.store.list_decisions(Operator())) == 1


async def test_modern_era_never_emits_32042(elicitation: Elicitation) -> None:
    person = Person([ElicitResult(action="accept")])
    async with Client(elicitation.mcp_server, mode="2026-07-28", elicitation_callback=person) as client:
        first = await client.session.call_tool("connect_later", {}, allow_input_required=True)
        assert not isinstance(first, CallToolResult)
        assert first.input_requests is not None and list(first.input_requests) == ["connect_account"]
        complete(elicitation)
        done = await client.call_tool(
            "connect_later", {}, input_responses={"connect_account": ElicitResult(action="accept")},
            request_state=first.request_state,
        )  # fmt: skip
    assert text(done) == "connected"


async def test_duplicate_completion_has_one_effect(elicitation: Elicitation) -> None:
    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=Person()) as client:
        with pytest.raises((MCPError, BaseExceptionGroup)):
            await client.call_tool("connect_later", {})
        complete(elicitation)
        [done] = elicitation.store.list_decisions(Operator())
        second_callback = replace(
            done, status=DecisionStatus.EXTERNAL_PENDING, completion_version=done.completion_version - 1
        )
        with pytest.raises(DecisionConflict):
            elicitation.store.transition(second_callback, DecisionStatus.EXTERNAL_COMPLETED, caller=LOCAL)
        assert text(await client.call_tool("connect_later", {})) == "connected"
        assert text(await client.call_tool("connect_later", {})) == "connected"
    trail = elicitation.store.audit_trail(done.elicitation_id, Operator())
    assert [e.to_status for e in trail].count("external_completed") == 1


@pytest.fixture
def raw_server(store_url: str, tmp_path: Path) -> Iterator[tuple[Elicitation, str]]:
    port = free_port()
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"r" * 32]),
        public_base_url=f"http://127.0.0.1:{port}",
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
    )
    server = runtime.server("raw-era-server")
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    with serving(server.streamable_http_app(host="127.0.0.1"), port) as base:
        yield runtime, f"{base}/mcp"
    runtime.close()


@pytest.mark.parametrize(("version", "tool", "mode"), [
    ("2024-11-05", "approve", "form"),
    ("2025-03-26", "approve", "form"),
    ("2025-06-18", "connect", "url"),
])  # fmt: skip
def test_peers_that_cannot_be_asked_get_a_clear_error_and_no_elicitation(
    raw_server: tuple[Elicitation, str], version: str, tool: str, mode: str
) -> None:
    runtime, url = raw_server
    session = handshake(url, version, {"elicitation": {"form": {}, "url": {}}})
    _, messages = post(
        url,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": {"scope": "prod"}}},
        session,
    )
    assert [m.get("method") for m in messages if "method" in m] == []
    result = messages[-1]["result"]
    assert result["isError"] is True
    assert f"{mode} elicitation" in result["content"][0]["text"]
    [decision] = runtime.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.REQUESTED


async def test_lowlevel_server_runs_the_same_flow(store_url: str) -> None:
    runtime = Elicitation(open_store(store_url), request_state=RequestState(single_process=True))

    async def list_tools(context: ServerRequestContext[Any, Any], params: Any) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="approve_low", input_schema={"type": "object"})])

    async def call_tool(context: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> Any:
        async def body(flow: Flow) -> CallToolResult:
            answer = await flow.ask("Approve?", Approval, key="approve_low")
            verdict = "approved" if isinstance(answer, Accepted) and answer.data.approve else "refused"
            return CallToolResult(content=[TextContent(type="text", text=verdict)])

        return await runtime.run_tool(context, params, body)

    server: Server[Any] = Server("lowlevel", on_list_tools=list_tools, on_call_tool=call_tool)
    runtime.install(server)
    harness = Harness(runtime, server=server)
    try:
        for era in ("2025-11-25", "2026-07-28"):
            answers = {"approve_low": scripted.accept(approve=True)}
            called = await harness.call("approve_low", {"era": era}, era=era, answers=answers)
            assert called.text == "approved"
            assert len(called.asked) == 1
        refused = await harness.call("approve_low", {"era": "none"}, era="2025-11-25", modes=())
        assert refused.result.is_error
    finally:
        runtime.close()


async def test_legacy_32042_client_is_notified_on_its_session_when_the_flow_completes(
    raw_server: tuple[Elicitation, str],
) -> None:
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import ElicitCompleteNotification

    runtime, url = raw_server
    notified: list[str] = []

    async def on_message(message: object) -> None:
        if isinstance(message, ElicitCompleteNotification):
            notified.append(message.params.elicitation_id)

    async with httpx2.AsyncClient(timeout=30) as http, Client(
        streamable_http_client(url, http_client=http), mode="legacy", elicitation_callback=Person(),
        message_handler=on_message,
    ) as client:  # fmt: skip
        with pytest.raises(MCPError) as raised:
            await client.call_tool("connect_later", {})
        assert raised.value.code == -32042
        [decision] = runtime.store.list_decisions(Operator())
        complete_as(runtime, Principal("loopback-dev", "loopback"))
        with anyio.fail_after(10):
            while not notified:
                await anyio.sleep(0.05)
        assert notified == [decision.elicitation_id]
        assert text(await client.call_tool("connect_later", {})) == "connected"
