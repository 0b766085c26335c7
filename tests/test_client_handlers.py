"""The kit's handling of what a handler answers, and the ready-made handlers, against in-process servers.

In-process servers are real SDK servers (the kit test server, plain `MCPServer`s for what a durable server
would never send) reached through the SDK's in-memory transport, on both eras.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    Root,
    TextContent,
)
from pydantic import BaseModel, FileUrl

from mcp_elicit.client import (
    Accept,
    Asker,
    Cancel,
    Consent,
    ElicitingClient,
    FlowStatus,
    FormReply,
    FormRequest,
    PendingFlows,
    ScriptedHandler,
    ScriptEntry,
    ScriptError,
    UrlReply,
    UrlRequest,
    UrlReview,
    load_script,
    parse_script,
    review_url,
)
from mcp_elicit.client.handler import Mode
from mcp_elicit.client.session import Era
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import Accepted, Elicitation, Flow
from tests.kit_server import build

pytestmark = pytest.mark.anyio
ERAS: list[Era] = ["2025-11-25", "2026-07-28"]
DEFAULTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
        "note": {"type": "string"},
    },
}


class Topic(BaseModel):
    topic: str


def text(result: Any) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


@pytest.fixture
def kit(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[Elicitation, MCPServer]]:
    runtime, server = build(sqlite_url, tmp_path / "effects.json", public_base_url="https://elicit.example")
    yield runtime, server
    runtime.close()


class Replies:
    """Answers forms from a list, and records the requests (with the kit's `problem` notes)."""

    def __init__(self, *replies: FormReply, modes: tuple[Mode, ...] = ("form", "url")) -> None:
        self.replies = list(replies)
        self.modes = frozenset(modes)
        self.asked: list[FormRequest | UrlRequest] = []

    async def form(self, request: FormRequest) -> FormReply:
        self.asked.append(request)
        return self.replies.pop(0) if self.replies else Cancel()

    async def url(self, request: UrlRequest) -> UrlReply:
        self.asked.append(request)
        return Consent()


# -- form answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_an_invalid_answer_is_never_sent_and_the_handler_is_asked_again(
    kit: tuple[Elicitation, MCPServer], era: Era
) -> None:
    runtime, server = kit
    person = Replies(Accept({"approve": "yes", "leak": "secret"}), Accept({"approve": True, "note": "ok"}))
    async with ElicitingClient(server, person, era=era) as client:
        result = await client.call_tool("approve", {"scope": "prod"})
    assert text(result) == "applied prod (ok)"
    first, second = person.asked
    assert isinstance(first, FormRequest) and first.problem is None
    assert isinstance(second, FormRequest) and second.problem is not None
    assert "leak: was not asked for" in second.problem and "approve: 'yes' is not of type 'boolean'" in second.problem
    [decision] = runtime.store.list_decisions(Operator())
    assert decision.content == {"approve": True, "note": "ok"}


@pytest.mark.parametrize("era", ERAS)
async def test_a_handler_that_keeps_answering_invalid_content_ends_in_cancel(
    kit: tuple[Elicitation, MCPServer], era: Era, caplog: pytest.LogCaptureFixture
) -> None:
    runtime, server = kit
    person = Replies(*[Accept({"approve": "maybe"})] * 5)
    with caplog.at_level(logging.ERROR, logger="mcp_elicit.client.elicitor"):
        async with ElicitingClient(server, person, era=era) as client:
            result = await client.call_tool("approve", {"scope": "prod"})
    assert text(result) == "cancelled"
    assert len(person.asked) == 3
    [decision] = runtime.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.CANCELLED and decision.content is None
    assert "invalid content 3 times" in caplog.text


def defaults_server() -> MCPServer:
    server = MCPServer("defaults")

    @server.tool()
    async def legacy_profile(ctx: Context) -> str:
        answer = await ctx.session.elicit_form("Your profile", DEFAULTS_SCHEMA)
        return json.dumps(answer.content)

    @server.tool()
    async def modern_profile(ctx: Context) -> str | InputRequiredResult:
        answered = (ctx.input_responses or {}).get("profile")
        if answered is None:
            ask = ElicitRequest(
                params=ElicitRequestFormParams(message="Your profile", requested_schema=DEFAULTS_SCHEMA)
            )
            return InputRequiredResult(input_requests={"profile": ask})
        return json.dumps(answered.content)  # type: ignore[union-attr]

    return server


@pytest.mark.parametrize(("era", "tool"), [("2025-11-25", "legacy_profile"), ("2026-07-28", "modern_profile")])
async def test_fields_left_out_get_their_schema_defaults(era: Era, tool: str) -> None:
    async with ElicitingClient(defaults_server(), Replies(Accept({"age": 41})), era=era) as client:
        received = json.loads(text(await client.call_tool(tool, {})))
    assert received == {"name": "John Doe", "age": 41, "status": "active", "verified": True}


# -- what the kit refuses to show -------------------------------------------------------------------


def url_server() -> MCPServer:
    server = MCPServer("urls")

    @server.tool()
    async def open_page(ctx: Context, url: str) -> str:
        try:
            answer = await ctx.session.elicit_url("Open this page", url, "page-1")
        except MCPError as refused:
            return f"refused {refused.code}: {refused.message}"
        return str(answer.action)

    return server


async def test_an_undeclared_mode_is_refused_and_never_shown() -> None:
    person = Replies(modes=("form",))
    async with ElicitingClient(url_server(), person, era="2025-11-25") as client:
        result = await client.call_tool("open_page", {"url": "https://bank.example/login"})
    assert text(result) == "refused -32602: this client did not declare url elicitation"
    assert person.asked == []


async def test_a_url_that_is_not_http_is_never_offered_or_opened(caplog: pytest.LogCaptureFixture) -> None:
    person = Replies()
    opened: list[str] = []
    pending = PendingFlows()
    async with ElicitingClient(url_server(), person, era="2025-11-25", opener=opened.append, pending=pending) as client:
        result = await client.call_tool("open_page", {"url": "javascript:alert(1)"})
    assert text(result) == "cancel"
    assert person.asked == [] and opened == []
    [flow] = pending.list()
    assert flow.status is FlowStatus.CANCELLED and flow.reason == "not an http(s) URL: never offered"
    assert flow.id == "page-1" and flow.tool == "open_page"


async def test_a_url_that_cannot_be_opened_is_answered_cancel() -> None:
    def no_browser(url: str) -> bool:
        return False

    pending = PendingFlows()
    async with ElicitingClient(url_server(), Replies(), era="2025-11-25", opener=no_browser, pending=pending) as client:
        result = await client.call_tool("open_page", {"url": "https://bank.example/login"})
    assert text(result) == "cancel"
    [flow] = pending.list()
    assert flow.status is FlowStatus.FAILED and "could not be opened" in flow.reason


# -- other input requests, parallel calls, prompts ---------------------------------------------------


def roots_server() -> MCPServer:
    server = MCPServer("roots")

    @server.tool()
    async def where(ctx: Context) -> str | InputRequiredResult:
        answered = (ctx.input_responses or {}).get("roots")
        if answered is None:
            return InputRequiredResult(input_requests={"roots": ListRootsRequest()})
        return ",".join(str(root.uri) for root in answered.roots)  # type: ignore[union-attr]

    return server


async def test_roots_requests_go_to_the_hosts_roots_callback_or_fail_the_call() -> None:
    async def roots(context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl("file:///work"))])

    async with ElicitingClient(roots_server(), Replies(), era="2026-07-28", list_roots_callback=roots) as client:
        assert text(await client.call_tool("where", {})) == "file:///work"
    async with ElicitingClient(roots_server(), Replies(), era="2026-07-28") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("where", {})
    assert refused.value.message == "List roots not supported"


async def test_parallel_modern_calls_each_get_their_own_answer(kit: tuple[Elicitation, MCPServer]) -> None:
    _, server = kit

    class ByScope:
        modes: frozenset[Mode] = frozenset({"form"})

        async def form(self, request: FormRequest) -> FormReply:
            await anyio.sleep(0.05)
            return Accept({"approve": True, "note": "north" if "north" in request.message else "south"})

        async def url(self, request: UrlRequest) -> UrlReply:
            return Cancel()

    results: dict[str, str] = {}
    async with ElicitingClient(server, ByScope(), era="2026-07-28") as client:

        async def call(scope: str) -> None:
            results[scope] = text(await client.call_tool("approve", {"scope": scope}))

        async with anyio.create_task_group() as group:
            group.start_soon(call, "north")
            group.start_soon(call, "south")
    assert results == {"north": "applied north (north)", "south": "applied south (south)"}


@pytest.mark.parametrize("era", ERAS)
async def test_a_prompt_that_asks_goes_through_the_same_path(sqlite_url: str, era: Era) -> None:
    runtime = Elicitation(sqlite_url, single_process=True)
    server = runtime.server("prompting", version="3.0")

    @runtime.prompt()
    async def brief(flow: Flow) -> str:
        answer = await flow.ask("Which topic?", Topic, key="topic")
        return f"Write about {answer.data.topic}" if isinstance(answer, Accepted) else "Write about nothing"

    person = Replies(Accept({"topic": "tides"}))
    try:
        async with ElicitingClient(server, person, era=era) as client:
            prompt = await client.get_prompt("brief")
    finally:
        runtime.close()
    first = prompt.messages[0].content
    assert isinstance(first, TextContent) and first.text == "Write about tides"
    [asked] = person.asked
    assert asked.asker.prompt == "brief" and asked.asker.tool is None
    assert (asked.asker.server_name, asked.asker.server_version) == ("prompting", "3.0")


# -- the script format -------------------------------------------------------------------------------


async def test_a_script_answers_in_order_each_entry_once() -> None:
    handler = ScriptedHandler(
        [
            {"match": "Deploy", "reply": "accept", "content": {"approve": True}},
            {"match": "Deploy", "reply": "decline"},
            {"match": "Connect", "reply": "consent"},
            {"reply": "cancel"},
        ]
    )
    ask = FormRequest(asker=_asker(), message="Deploy payments?", requested_schema={})
    assert await handler.form(ask) == Accept({"approve": True})
    assert await handler.form(ask) != Accept({"approve": True})
    assert await handler.url(UrlRequest(_asker(), "Connect your account", _review())) == Consent()
    assert await handler.form(FormRequest(_asker(), "Anything else?", {})) == Cancel()
    assert await handler.form(FormRequest(_asker(), "Deploy again?", {})) == Cancel()
    assert handler.remaining == [] and len(handler.asked) == 5


async def test_a_consent_entry_never_answers_a_form() -> None:
    handler = ScriptedHandler([{"reply": "consent"}])
    assert await handler.form(FormRequest(_asker(), "Deploy?", {})) == Cancel()
    assert handler.remaining == [ScriptEntry("consent")]


def test_a_script_file_is_plain_json(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"match": "seats", "reply": "accept", "content": {"seats": 2, "tags": ["a"]}}]))
    assert load_script(script) == [ScriptEntry("accept", "seats", {"seats": 2, "tags": ["a"]})]
    assert ScriptedHandler.from_file(script, modes=("form",)).modes == frozenset({"form"})
    script.write_text("[{")
    with pytest.raises(ScriptError, match="is not JSON"):
        load_script(script)


@pytest.mark.parametrize(("data", "complaint"), [
    ({"reply": "accept"}, "a JSON list"),
    (["accept"], "entry 1 is not an object"),
    ([{"reply": "maybe"}], "'reply' must be one of"),
    ([{"reply": "accept", "answer": 1}], "unknown keys: answer"),
    ([{"reply": "decline", "content": {}}], "'content' goes with 'accept' only"),
    ([{"reply": "accept", "content": {"nested": {"a": 1}}}], "'content' must be an object"),
    ([{"reply": "cancel", "match": 3}], "'match' must be a string"),
])  # fmt: skip
def test_a_bad_script_is_refused_naming_the_entry(data: Any, complaint: str) -> None:
    with pytest.raises(ScriptError, match=complaint):
        parse_script(data)


def _asker() -> Asker:
    return Asker("demo-server", tool="deploy")


def _review() -> UrlReview:
    return review_url("https://example.com/connect")
