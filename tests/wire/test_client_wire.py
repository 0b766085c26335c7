"""The kit's wire behaviour, seen by a raw JSON-RPC server on loopback that records every request body.

A hand-written server can say what an SDK server never would (no `resultType`, an unknown one, a
`requestState` with odd spacing), and its record is the bytes the client really sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import SERVER_INFO_META_KEY, TextContent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_elicit.client import (
    Accept,
    ElicitingClient,
    Http,
    NoPersonHandler,
    ScriptedHandler,
    UnknownResultType,
)
from mcp_elicit.client.handler import Mode
from tests.helpers.http_harness import free_port, serving

pytestmark = pytest.mark.anyio
CONFIRM = {
    "method": "elicitation/create",
    "params": {
        "message": "Please confirm",
        "requestedSchema": {"type": "object", "properties": {"confirmed": {"type": "boolean"}}},
    },
}
MODERN_RESULT = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
URL_REQUIRED = {
    "code": -32042,
    "message": "URL elicitation required",
    "data": {"elicitations": [{"mode": "url", "message": "Link", "url": "https://idp.example/", "elicitationId": "l"}]},
}


@dataclass
class Raw:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    states: list[str] = field(default_factory=list)

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("method") == "tools/call" and tool in (None, r["params"].get("name"))]


def tool_results(raw: Raw) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    def echo_state(params: dict[str, Any]) -> dict[str, Any]:
        tag = (params.get("arguments") or {}).get("tag", "")
        if "inputResponses" not in params:
            state = '{"nonce": "' + uuid.uuid4().hex + '",   "spacing": [2,  1], "tag": "' + tag + '"} '
            raw.states.append(state)
            return {"resultType": "input_required", "inputRequests": {"confirm": CONFIRM}, "requestState": state}
        if json.loads(params["requestState"])["tag"] != tag:
            return {
                "resultType": "complete",
                "isError": True,
                "content": [{"type": "text", "text": "state of another call"}],
            }
        return {"resultType": "complete", "content": [{"type": "text", "text": params["requestState"]}]}

    def no_state(params: dict[str, Any]) -> dict[str, Any]:
        if "inputResponses" not in params:
            return {"resultType": "input_required", "inputRequests": {"confirm": CONFIRM}}
        return {"resultType": "complete", "content": [{"type": "text", "text": "no-state-ok"}]}

    return {
        "echo_state": echo_state,
        "no_state": no_state,
        "no_result_type": lambda params: {"content": [{"type": "text", "text": "plain"}]},
        "bogus": lambda params: {"resultType": "bogus", "content": [{"type": "text", "text": "?"}]},
        "task": lambda params: {"resultType": "task", "taskId": "t-1", "status": "working"},
        "plain": lambda params: {"resultType": "complete", "content": [{"type": "text", "text": "ok"}]},
    }


@pytest.fixture
def raw() -> Iterator[Raw]:
    port = free_port()
    recorded = Raw(f"http://127.0.0.1:{port}/mcp")
    tools = tool_results(recorded)

    async def endpoint(request: Request) -> Response:
        body = await request.json()
        recorded.requests.append(body)
        if "id" not in body:
            return Response(status_code=202)
        method, params = body["method"], body.get("params") or {}
        result: dict[str, Any]
        if method == "initialize":
            offered = params.get("protocolVersion")
            result = {
                "protocolVersion": offered if offered in ("2025-06-18", "2025-11-25") else "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1.0", "title": "Raw Server"},
            }
        elif method == "server/discover":
            info = {"name": "raw", "version": "2.0", "title": "Raw Server"}
            result = {
                **MODERN_RESULT,
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
                "_meta": {SERVER_INFO_META_KEY: info},
            }
        elif method == "tools/list":
            listed = [{"name": name, "inputSchema": {"type": "object"}} for name in tools]
            result = {**MODERN_RESULT, "tools": listed}
        elif method == "tools/call" and params["name"] == "needs_url":
            return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "error": URL_REQUIRED})
        elif method == "tools/call":
            result = tools[params["name"]](params)
        else:
            return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32601, "message": method}})
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": result})

    with serving(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])]), port):
        yield recorded


def text_of(result: Any) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def confirming() -> ScriptedHandler:
    return ScriptedHandler([{"reply": "accept", "content": {"confirmed": True}}] * 4)


async def test_request_state_is_echoed_byte_for_byte_with_a_new_id(raw: Raw) -> None:
    async with ElicitingClient(Http(raw.url), confirming(), era="2026-07-28") as client:
        result = await client.call_tool("echo_state", {})
    [state] = raw.states
    assert text_of(result) == state
    first, retry = raw.calls("echo_state")
    assert "requestState" not in first["params"] and "inputResponses" not in first["params"]
    assert retry["params"]["requestState"] == state
    assert retry["params"]["inputResponses"] == {"confirm": {"action": "accept", "content": {"confirmed": True}}}
    assert retry["id"] != first["id"]


async def test_a_round_without_state_is_retried_without_state(raw: Raw) -> None:
    async with ElicitingClient(Http(raw.url), confirming(), era="auto") as client:
        assert client.protocol_version == "2026-07-28"
        assert text_of(await client.call_tool("no_state", {})) == "no-state-ok"
    first, retry = raw.calls("no_state")
    assert "requestState" not in retry["params"] and retry["id"] != first["id"]


async def test_parallel_calls_never_share_responses_or_state(raw: Raw) -> None:
    """Each round's state is bound to its call by a tag; the server refuses a state sent with another call's."""
    results: dict[str, str] = {}
    async with ElicitingClient(Http(raw.url), confirming(), era="2026-07-28") as client:

        async def call(tag: str) -> None:
            result = await client.call_tool("echo_state", {"tag": tag})
            assert not result.is_error, text_of(result)
            results[tag] = text_of(result)

        async def plain() -> None:
            results["plain"] = text_of(await client.call_tool("plain", {}))

        async with anyio.create_task_group() as group:
            group.start_soon(call, "a")
            group.start_soon(call, "b")
            group.start_soon(plain)
    assert results["plain"] == "ok"
    assert json.loads(results["a"])["tag"] == "a" and json.loads(results["b"])["tag"] == "b"
    assert sorted([results["a"], results["b"]]) == sorted(raw.states)
    for retry in [r for r in raw.calls("echo_state") if "requestState" in r["params"]]:
        assert json.loads(retry["params"]["requestState"])["tag"] == retry["params"]["arguments"]["tag"]
    [plain_call] = raw.calls("plain")
    assert "requestState" not in plain_call["params"] and "inputResponses" not in plain_call["params"]
    ids = [r["id"] for r in raw.calls()]
    assert len(ids) == len(set(ids))


async def test_a_result_without_result_type_is_complete(raw: Raw) -> None:
    async with ElicitingClient(Http(raw.url), confirming(), era="2026-07-28") as client:
        assert text_of(await client.call_tool("no_result_type", {})) == "plain"
    assert len(raw.calls("no_result_type")) == 1


@pytest.mark.parametrize("tool", ["bogus", "task"])
async def test_an_unknown_result_type_is_an_error(raw: Raw, tool: str) -> None:
    async with ElicitingClient(Http(raw.url), confirming(), era="2026-07-28") as client:
        with pytest.raises(UnknownResultType) as refused:
            await client.call_tool(tool, {})
    assert refused.value.result_type == tool
    assert len(raw.calls(tool)) == 1


@pytest.mark.parametrize("era", ["2026-07-28", "auto"])
@pytest.mark.parametrize(("modes", "declared"), [(("form",), {"form": {}}), (("url",), {"url": {}}), ((), None)])
async def test_every_modern_request_carries_exactly_the_declared_modes(
    raw: Raw, era: Any, modes: tuple[Mode, ...], declared: dict[str, Any] | None
) -> None:
    handler = ScriptedHandler([], modes=modes) if modes else NoPersonHandler()
    async with ElicitingClient(Http(raw.url), handler, era=era) as client:
        await client.call_tool("plain", {})
        assert client.asker.server_name == "raw" and client.asker.server_version == "2.0"
    methods = [r["method"] for r in raw.requests]
    assert "server/discover" in methods and "tools/call" in methods
    for request in raw.requests:
        capabilities = request["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert capabilities.get("elicitation") == declared, request["method"]


@pytest.mark.parametrize(("modes", "declared"), [(("url",), {"url": {}}), (("form", "url"), {"form": {}, "url": {}})])
async def test_initialize_carries_exactly_the_declared_modes(
    raw: Raw, modes: tuple[Mode, ...], declared: dict[str, Any]
) -> None:
    async with ElicitingClient(Http(raw.url), ScriptedHandler([], modes=modes), era="2025-11-25") as client:
        await client.call_tool("plain", {})
        assert client.asker.server_title == "Raw Server"
    [initialize] = [r for r in raw.requests if r["method"] == "initialize"]
    assert initialize["params"]["capabilities"]["elicitation"] == declared
    assert json.dumps(raw.requests).count('"elicitation"') == 1


async def test_initialize_without_modes_declares_no_elicitation(raw: Raw) -> None:
    async with ElicitingClient(Http(raw.url), NoPersonHandler(), era="2025-11-25") as client:
        await client.call_tool("plain", {})
    [initialize] = [r for r in raw.requests if r["method"] == "initialize"]
    assert "elicitation" not in initialize["params"]["capabilities"]


async def test_a_form_answer_is_sent_as_accepted_content(raw: Raw) -> None:
    class Yes:
        modes: frozenset[Mode] = frozenset({"form"})

        async def form(self, request: Any) -> Accept:
            return Accept({"confirmed": True})

        async def url(self, request: Any) -> Any:
            raise AssertionError("no URL question here")

    async with ElicitingClient(Http(raw.url), Yes(), era="2026-07-28") as client:
        await client.call_tool("no_state", {})
    retry = raw.calls("no_state")[-1]
    assert retry["params"]["inputResponses"]["confirm"] == {"action": "accept", "content": {"confirmed": True}}


async def test_era_2025_06_18_is_offered_and_has_no_32042_path(raw: Raw) -> None:
    handler = ScriptedHandler([{"reply": "consent"}])
    async with ElicitingClient(Http(raw.url), handler, era="2025-06-18") as client:
        assert client.protocol_version == "2025-06-18"
        with pytest.raises(MCPError) as refused:
            await client.call_tool("needs_url", {})
    assert refused.value.code == -32042
    assert handler.asked == []
    [initialize] = [r for r in raw.requests if r["method"] == "initialize"]
    assert initialize["params"]["protocolVersion"] == "2025-06-18"
    assert len(raw.calls("needs_url")) == 1
