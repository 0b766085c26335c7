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
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    Root,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel, FileUrl

from mcp_elicit.client import (
    Accept,
    Asker,
    Cancel,
    Consent,
    Decline,
    ElicitingClient,
    FlowStatus,
    FormReply,
    FormRequest,
    Pacing,
    PendingFlow,
    PendingFlows,
    QuestionRefused,
    ScriptedHandler,
    ScriptEntry,
    ScriptError,
    SdkOptions,
    ServerSilent,
    Timeouts,
    UrlFlowStopped,
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
from mcp_elicit.model.form_schema import parse_form
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState
from tests.helpers.server import Options, build

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
    runtime, server = build(
        Options(
            sqlite_url,
            tools=("flow", "kit"),
            effects=tmp_path / "effects.json",
            public_base_url="https://elicit.example",
            long_poll=0.2,
        )
    )
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
    assert "unknown field 'leak'" in second.problem and "approve: must be a boolean, not a string" in second.problem
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
async def test_an_answer_is_sent_as_the_handler_gave_it_without_defaults(era: Era, tool: str) -> None:
    async with ElicitingClient(defaults_server(), Replies(Accept({"age": 41})), era=era) as client:
        received = json.loads(text(await client.call_tool(tool, {})))
    assert received == {"age": 41}


@pytest.mark.parametrize(("era", "tool"), [("2025-11-25", "legacy_profile"), ("2026-07-28", "modern_profile")])
async def test_the_scripted_handler_keeps_the_defaults_its_entry_leaves_out(era: Era, tool: str) -> None:
    handler = ScriptedHandler([{"reply": "accept", "content": {"age": 41}}])
    async with ElicitingClient(defaults_server(), handler, era=era) as client:
        received = json.loads(text(await client.call_tool(tool, {})))
    assert received == {"name": "John Doe", "age": 41, "status": "active", "verified": True}


@pytest.mark.parametrize("era", ERAS)
async def test_the_kit_judges_an_answer_as_the_form_does(era: Era) -> None:
    server = MCPServer("emails")
    schema = {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}, "required": ["email"]}

    @server.tool()
    async def contact(ctx: Context) -> str | InputRequiredResult:
        if era == "2025-11-25":
            answer = await ctx.session.elicit_form("Your email", schema)
            return json.dumps(answer.content)
        answered = (ctx.input_responses or {}).get("email")
        if answered is None:
            ask = ElicitRequest(params=ElicitRequestFormParams(message="Your email", requested_schema=schema))
            return InputRequiredResult(input_requests={"email": ask})
        return json.dumps(answered.content)  # type: ignore[union-attr]

    person = Replies(Accept({"email": "ada@localhost"}), Accept({"email": "ada@example.org"}))
    async with ElicitingClient(server, person, era=era) as client:
        received = json.loads(text(await client.call_tool("contact", {})))
    assert received == {"email": "ada@example.org"}
    form = parse_form(schema)
    assert form.problems({"email": "ada@localhost"}) == {"email": ["must be an email address such as name@example.org"]}
    second = person.asked[1]
    assert isinstance(second, FormRequest)
    assert second.problem == "email: must be an email address such as name@example.org"


# -- what the kit refuses to show -------------------------------------------------------------------


def url_server() -> MCPServer:
    """Plain 2025-11-25 URL elicitations, under one fixed `elicitationId` as a careless server would use it."""
    server = MCPServer("urls")
    completed = anyio.Event()

    @server.tool()
    async def open_page(ctx: Context, url: str) -> str:
        try:
            answer = await ctx.session.elicit_url("Open this page", url, "page-1")
        except MCPError as refused:
            return f"refused {refused.code}: {refused.message}"
        return str(answer.action)

    @server.tool()
    async def open_page_and_wait(ctx: Context, url: str) -> str:
        """Like `open_page`, then holds the call until `complete_page` runs."""
        answer = await ctx.session.elicit_url("Open this page again", url, "page-1")
        await completed.wait()
        return str(answer.action)

    @server.tool()
    async def complete_page(ctx: Context) -> str:
        await ctx.session.send_elicit_complete("page-1")
        completed.set()
        return "completed"

    @server.tool()
    async def wait_a_bit(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "waited"

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
    assert flow.status is FlowStatus.CANCELLED and flow.reason == "not an http(s) URL: do not open it: never offered"
    assert flow.elicitation_id == "page-1" and flow.id == "flow-1" and flow.tool == "open_page"


async def test_a_url_that_cannot_be_opened_is_answered_cancel() -> None:
    def no_browser(url: str) -> bool:
        return False

    pending = PendingFlows()
    async with ElicitingClient(url_server(), Replies(), era="2025-11-25", opener=no_browser, pending=pending) as client:
        result = await client.call_tool("open_page", {"url": "https://bank.example/login"})
    assert text(result) == "cancel"
    [flow] = pending.list()
    assert flow.status is FlowStatus.FAILED and "could not be opened" in flow.reason


@pytest.mark.parametrize(
    ("sent", "opened"),
    [
        ("  https://2130706433/login  ", "https://127.0.0.1/login"),
        ("https://fa\u00df.de/login", "https://xn--fa-hia.de/login"),
        ("https://go\tod.example/a b", "https://good.example/a%20b"),
    ],
)
async def test_what_is_opened_is_the_reviewed_url_the_person_was_shown(sent: str, opened: str) -> None:
    person = Replies()
    browser: list[str] = []
    pending = PendingFlows()
    async with ElicitingClient(
        url_server(), person, era="2025-11-25", opener=browser.append, pending=pending
    ) as client:
        assert text(await client.call_tool("open_page", {"url": sent})) == "accept"
    [asked] = person.asked
    assert isinstance(asked, UrlRequest)
    assert asked.review.url == opened and asked.review.sent == sent
    assert browser == [opened]
    assert pending.list()[0].url == opened


@pytest.mark.parametrize(
    "url", ["https://evil.example\\@good.example/", "https://evil%2Eexample/", "https://pay\u200dpal.com/"]
)
async def test_a_url_a_browser_would_read_otherwise_is_never_offered(url: str) -> None:
    person = Replies()
    browser: list[str] = []
    pending = PendingFlows()
    async with ElicitingClient(
        url_server(), person, era="2025-11-25", opener=browser.append, pending=pending
    ) as client:
        assert text(await client.call_tool("open_page", {"url": url})) == "cancel"
    assert person.asked == [] and browser == []
    [flow] = pending.list()
    assert flow.status is FlowStatus.CANCELLED and flow.reason.endswith("do not open it: never offered")


async def test_an_opener_that_returns_an_awaitable_is_awaited() -> None:
    opened: list[str] = []

    async def open_later(url: str) -> bool:
        await anyio.sleep(0)
        opened.append(url)
        return False

    pending = PendingFlows()
    async with ElicitingClient(
        url_server(), Replies(), era="2025-11-25", opener=lambda url: open_later(url), pending=pending
    ) as client:
        result = await client.call_tool("open_page", {"url": "https://bank.example/login"})
    assert opened == ["https://bank.example/login"]
    assert text(result) == "cancel"
    assert pending.list()[0].status is FlowStatus.FAILED


class HeldDialog:
    """A consent dialog that stays on screen until `release`, then consents (through a shield, if asked to
    ignore being closed, as a handler that never checks would)."""

    modes: frozenset[Mode] = frozenset({"form", "url"})

    def __init__(self, *, ignores_closing: bool = False) -> None:
        self.shown = anyio.Event()
        self.release = anyio.Event()
        self.closed_early = False
        self._ignores_closing = ignores_closing

    async def form(self, request: FormRequest) -> FormReply:
        return Cancel()

    async def url(self, request: UrlRequest) -> UrlReply:
        self.shown.set()
        try:
            with anyio.CancelScope(shield=self._ignores_closing):
                await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.closed_early = True
            raise
        return Consent()


@pytest.mark.parametrize("ignores_closing", [False, True])
@pytest.mark.parametrize("parallel", [False, True], ids=["one-call", "two-calls"])
async def test_a_host_cancel_closes_the_consent_dialog_and_nothing_is_opened(
    parallel: bool, ignores_closing: bool
) -> None:
    person = HeldDialog(ignores_closing=ignores_closing)
    opened: list[str] = []
    pending = PendingFlows()
    outcome: list[str] = []
    async with ElicitingClient(url_server(), person, era="2025-11-25", opener=opened.append, pending=pending) as client:

        async def call() -> None:
            try:
                outcome.append(text(await client.call_tool("open_page", {"url": "https://bank.example/x"})))
            except UrlFlowStopped as stopped:
                outcome.append(f"stopped: {stopped.flow.status}")

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                if parallel:
                    group.start_soon(client.call_tool, "wait_a_bit", {"seconds": 0.5})
                    await anyio.sleep(0.05)
                group.start_soon(call)
                await person.shown.wait()
                [flow] = pending.list(active=True)
                assert pending.cancel(flow.id, "the host gave up")
                await anyio.sleep(0.1)
                person.release.set()
    assert opened == []
    assert pending.get(flow.id).status is FlowStatus.CANCELLED
    assert person.closed_early is not ignores_closing
    assert outcome == (["cancel"] if parallel else ["stopped: cancelled"])


async def test_a_consent_after_its_call_was_given_up_opens_nothing() -> None:
    person = HeldDialog(ignores_closing=True)
    opened: list[str] = []
    pending = PendingFlows()
    async with ElicitingClient(url_server(), person, era="2025-11-25", opener=opened.append, pending=pending) as client:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:

                async def call_given_up() -> None:
                    with anyio.CancelScope() as giving_up:
                        group.start_soon(lambda: _cancel_when(person.shown, giving_up))
                        await client.call_tool("open_page", {"url": "https://bank.example/x"})

                group.start_soon(call_given_up)
                await person.shown.wait()
                await anyio.sleep(0.1)
                person.release.set()
            await anyio.sleep(0.1)
    [flow] = pending.list()
    assert flow.status is FlowStatus.ENDED  # by the client's close: the call's end left the guessed flow alone
    assert opened == []


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def test_a_completion_for_a_reused_id_completes_the_open_flow_not_an_ended_one() -> None:
    pending = PendingFlows()
    async with ElicitingClient(
        url_server(), Replies(), era="2025-11-25", opener=lambda url: True, pending=pending
    ) as client:
        assert text(await client.call_tool("open_page", {"url": "https://bank.example/first"})) == "accept"
        [first] = pending.list()
        assert first.status is FlowStatus.ENDED
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "open_page_and_wait", {"url": "https://bank.example/second"})
                while len(pending.list(active=True)) != 1 or pending.list(active=True)[0].status is not FlowStatus.OPEN:
                    await anyio.sleep(0.01)
                [second] = pending.list(active=True)
                await client.call_tool("complete_page", {})
                assert pending.get(second.id).status is FlowStatus.COMPLETED
    assert pending.get(first.id).status is FlowStatus.ENDED
    assert first.elicitation_id == second.elicitation_id == "page-1" and first.id != second.id


def modern_asking_server() -> MCPServer:
    server = MCPServer("modern")

    @server.tool()
    async def ask(ctx: Context, schema: dict[str, Any]) -> str | InputRequiredResult:
        answered = (ctx.input_responses or {}).get("detail")
        if answered is None:
            request = ElicitRequest(params=ElicitRequestFormParams(message="A detail", requested_schema=schema))
            return InputRequiredResult(input_requests={"detail": request})
        return json.dumps(answered.content)  # type: ignore[union-attr]

    @server.tool()
    async def ask_url(ctx: Context) -> str | InputRequiredResult:
        if not ctx.input_responses:
            request = ElicitRequest(params=ElicitRequestURLParams(message="Sign in", url="https://idp.example/"))
            return InputRequiredResult(input_requests={"sign_in": request})
        return "signed in"

    return server


async def test_a_modern_question_the_kit_refuses_stops_the_call_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    schema = {"type": "object", "properties": {"code\nline": {"type": "string", "pattern": "^[A-Z]+$"}}}
    person = Replies(Accept({"code": "X"}))
    with caplog.at_level(logging.WARNING, logger="mcp_elicit.client.elicitor"):
        async with ElicitingClient(modern_asking_server(), person, era="2026-07-28") as client:
            with pytest.raises(QuestionRefused) as refused:
                await client.call_tool("ask", {"schema": schema})
    assert refused.value.key == "detail" and refused.value.message == "A detail"
    assert "'pattern'" in refused.value.reason and "not a restricted form schema" in refused.value.reason
    assert person.asked == []
    [logged] = [record.getMessage() for record in caplog.records if "refused a form" in record.getMessage()]
    assert "code" in logged and "\n" not in logged
    form_only = Replies(modes=("form",))
    async with ElicitingClient(modern_asking_server(), form_only, era="2026-07-28") as client:
        with pytest.raises(QuestionRefused) as undeclared:
            await client.call_tool("ask_url", {})
    assert undeclared.value.key == "sign_in"
    assert undeclared.value.reason == "this client did not declare url elicitation"
    assert form_only.asked == []


async def test_a_legacy_form_outside_the_restricted_schema_is_refused_with_32602() -> None:
    server = MCPServer("legacy-schema")

    @server.tool()
    async def ask(ctx: Context) -> str:
        schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}}}
        try:
            await ctx.session.elicit_form("A code", schema)
        except MCPError as refused:
            return f"refused {refused.code}"
        return "asked"

    person = Replies()
    async with ElicitingClient(server, person, era="2025-11-25") as client:
        assert text(await client.call_tool("ask", {})) == "refused -32602"
    assert person.asked == []


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

    async with ElicitingClient(
        roots_server(), Replies(), era="2026-07-28", sdk=SdkOptions(list_roots_callback=roots)
    ) as client:
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
    runtime = Elicitation(sqlite_url, request_state=RequestState(single_process=True))
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


def resource_server() -> MCPServer:
    server = MCPServer("notes", version="0.3")
    schema = {"type": "object", "properties": {"tone": {"type": "string"}}, "required": ["tone"]}

    @server.resource("modern://{topic}")
    async def modern(topic: str, ctx: Context) -> str | InputRequiredResult:
        answered = (ctx.input_responses or {}).get("tone")
        if answered is None:
            ask = ElicitRequest(params=ElicitRequestFormParams(message="Which tone?", requested_schema=schema))
            return InputRequiredResult(input_requests={"tone": ask})
        assert isinstance(answered, ElicitResult)
        return f"{topic} in a {(answered.content or {}).get('tone')} tone"

    @server.resource("legacy://{topic}")
    async def legacy(topic: str, ctx: Context) -> str:
        answer = await ctx.session.elicit_form("Which tone?", schema)
        return f"{topic} in a {(answer.content or {}).get('tone')} tone"

    return server


@pytest.mark.parametrize(("era", "uri"), [("2025-11-25", "legacy://tides"), ("2026-07-28", "modern://tides")])
async def test_a_resource_that_asks_goes_through_the_same_path(era: Era, uri: str) -> None:
    person = Replies(Accept({"tone": "calm"}))
    async with ElicitingClient(resource_server(), person, era=era) as client:
        read = await client.read_resource(uri)
    first = read.contents[0]
    assert isinstance(first, TextResourceContents) and first.text == "tides in a calm tone"
    [asked] = person.asked
    assert asked.asker == Asker("notes", "0.3", endpoint="in-process server 'notes'", resource=uri)


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
    assert not handler.answers("Deploy?", "form") and handler.answers("Deploy?", "url")
    assert await handler.form(FormRequest(_asker(), "Deploy?", {})) == Cancel()
    assert handler.remaining == [ScriptEntry("consent")]


async def test_a_script_says_whether_an_unused_entry_answers_a_question_before_it_is_asked() -> None:
    handler = ScriptedHandler([{"match": "Deploy", "reply": "decline"}])
    assert handler.answers("Deploy payments?", "form") and not handler.answers("Anything else?", "form")
    assert await handler.form(FormRequest(_asker(), "Deploy payments?", {})) == Decline()
    assert not handler.answers("Deploy payments?", "form"), "each entry answers once"


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
    ([{"reply": "accept", "content": {"note": None}}], "'content' must be an object"),
    ([{"reply": "accept", "content": {"ratio": float("nan")}}], "'content' must be an object"),
    ([{"reply": "accept", "content": {"ratio": float("inf")}}], "'content' must be an object"),
])  # fmt: skip
def test_a_bad_script_is_refused_naming_the_entry(data: Any, complaint: str) -> None:
    with pytest.raises(ScriptError, match=complaint):
        parse_script(data)


def _asker() -> Asker:
    return Asker("demo-server", tool="deploy")


def _review() -> UrlReview:
    return review_url("https://example.com/connect")


# -- the pending-flow registry --------------------------------------------------------------------------


def test_finished_flows_are_forgotten_by_finish_time_and_never_while_a_call_holds_them() -> None:
    pending = PendingFlows(keep_finished=1)
    review = review_url("https://elicit.example/elicit/1")

    def add() -> PendingFlow:
        flow = PendingFlow("", "server", "Connect", review.url, review, FlowStatus.AWAITING_CONSENT)
        return pending.add(flow, "connection")

    held, first, second = add(), add(), add()
    assert [held.id, first.id, second.id] == ["flow-1", "flow-2", "flow-3"]
    call = object()
    pending.hold(held.id, call, retry=lambda: True, stop=lambda reason: None)
    pending.finish([held.id], FlowStatus.ENDED, "the call finished")
    pending.finish([second.id], FlowStatus.ENDED, "the call finished")
    pending.finish([first.id], FlowStatus.ENDED, "the call finished")
    assert [flow.id for flow in pending.list()] == [held.id, first.id]
    assert pending.retry_now(held.id)
    pending.release([held.id], call)
    assert [flow.id for flow in pending.list()] == [first.id]


# -- a person past consent, a server that goes quiet, questions that are not the call's -------------


class Clock:
    """The kit's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Declines(Replies):
    async def url(self, request: UrlRequest) -> UrlReply:
        self.asked.append(request)
        return Decline()


def quiet_server() -> tuple[MCPServer, dict[str, Any]]:
    """2025-11-25 URL questions from tools that then go quiet, give up asking, or go on to other things;
    `remember` keeps the server's session so a test can ask a question no request of the client's made."""
    server = MCPServer("quiet")
    state: dict[str, Any] = {"calls": 0, "session": None}

    @server.tool()
    async def open_page(ctx: Context) -> str:
        state["calls"] += 1
        answer = await ctx.session.elicit_url("Open this page", "https://bank.example/x", "page-1")
        return str(answer.action)

    @server.tool()
    async def open_then_go_silent(ctx: Context) -> str:
        """Takes consent, then never completes the flow nor answers the call."""
        await ctx.session.elicit_url("Open this page", "https://bank.example/x", "page-1")
        await anyio.sleep(3600)
        return "never"

    @server.tool()
    async def give_up_asking(ctx: Context) -> str:
        with anyio.move_on_after(0.3):
            await ctx.session.elicit_url("Open this page", "https://bank.example/x", "page-1")
        return "gave up"

    @server.tool()
    async def ask_then_go_on(ctx: Context) -> str:
        answer = await ctx.session.elicit_url("Open this page", "https://bank.example/x", "page-1")
        await anyio.sleep(0.5)
        return f"went on after {answer.action}"

    @server.tool()
    async def remember(ctx: Context) -> str:
        state["session"] = ctx.session
        return "remembered"

    @server.tool()
    async def wait_a_bit(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "waited"

    return server, state


async def test_a_server_that_took_consent_and_went_silent_is_cut_after_max_wait() -> None:
    server, _ = quiet_server()
    clock = Clock()
    pending = PendingFlows()
    outcome: list[object] = []
    async with ElicitingClient(
        server, Replies(), era="2025-11-25", opener=lambda url: True, pending=pending,
        timeouts=Timeouts(request=1), pacing=Pacing(max_wait=60), clock=clock,
    ) as client:  # fmt: skip

        async def call() -> None:
            try:
                outcome.append(await client.call_tool("open_then_go_silent", {}))
            except ServerSilent as silent:
                outcome.append(silent)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                while not pending.list(active=True) or pending.list()[0].status is not FlowStatus.OPEN:
                    await anyio.sleep(0.01)
                [flow] = pending.list()
                assert flow.opened_at == clock.now
                clock.now += 30
                await anyio.sleep(0.5)
                assert outcome == []  # the person is in the browser: not cut
                clock.now += 31
    [result] = outcome
    assert isinstance(result, ServerSilent)


async def test_retry_while_the_person_is_still_asked_returns_false_and_sends_nothing() -> None:
    server, state = quiet_server()
    person = HeldDialog()
    pending = PendingFlows()
    async with ElicitingClient(server, person, era="2025-11-25", opener=lambda url: True, pending=pending) as client:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                results: list[str] = []

                async def call() -> None:
                    results.append(text(await client.call_tool("open_page", {})))

                group.start_soon(call)
                await person.shown.wait()
                [flow] = pending.list()
                assert not pending.retry_now(flow.id)
                await anyio.sleep(0.2)
                person.release.set()
    assert results == ["accept"] and state["calls"] == 1 and not person.closed_early


async def test_held_calls_are_not_reissued_when_the_host_says_so() -> None:
    server, _ = quiet_server()
    pending = PendingFlows()
    async with ElicitingClient(
        server,
        Replies(),
        era="2025-11-25",
        opener=lambda url: True,
        pending=pending,
        pacing=Pacing(reissue_held_calls=False),
    ) as client:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "open_then_go_silent", {})
                while not pending.list() or pending.list()[0].status is not FlowStatus.OPEN:
                    await anyio.sleep(0.01)
                [flow] = pending.list()
                assert not pending.retry_now(flow.id)
                group.cancel_scope.cancel()


async def test_a_question_outside_the_one_call_in_flight_outlives_that_call() -> None:
    server, state = quiet_server()
    person = HeldDialog()
    opened: list[str] = []
    pending = PendingFlows()
    answers: list[str] = []
    async with ElicitingClient(server, person, era="2025-11-25", opener=opened.append, pending=pending) as client:
        assert text(await client.call_tool("remember", {})) == "remembered"

        async def ask_unrelated() -> None:
            answer = await state["session"].elicit_url("Open this page", "https://bank.example/y", "late-1")
            answers.append(str(answer.action))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                results: list[str] = []

                async def call() -> None:
                    results.append(text(await client.call_tool("wait_a_bit", {"seconds": 0.5})))

                group.start_soon(call)
                await anyio.sleep(0.1)
                group.start_soon(ask_unrelated)
                await person.shown.wait()
                while not results:
                    await anyio.sleep(0.01)
                [flow] = pending.list()
                assert flow.status is FlowStatus.AWAITING_CONSENT  # the call's end did not withdraw it
                person.release.set()
    assert answers == ["accept"] and not person.closed_early and opened == ["https://bank.example/y"]
    assert pending.get(flow.id).opened_at is not None  # opened after consent, then ended with the client


async def test_a_question_the_server_withdraws_leaves_the_flow_cancelled() -> None:
    server, _ = quiet_server()
    person = HeldDialog()
    pending = PendingFlows()
    async with ElicitingClient(server, person, era="2025-11-25", opener=lambda url: True, pending=pending) as client:
        with anyio.fail_after(10):
            assert text(await client.call_tool("give_up_asking", {})) == "gave up"
            while not pending.list() or pending.list()[0].status is FlowStatus.AWAITING_CONSENT:
                await anyio.sleep(0.01)
    [flow] = pending.list()
    assert (flow.status, flow.reason) == (FlowStatus.CANCELLED, "withdrawn by the server")
    assert person.closed_early


async def test_cancelling_a_flow_declined_earlier_does_not_stop_the_call() -> None:
    server, _ = quiet_server()
    pending = PendingFlows()
    async with ElicitingClient(server, Declines(), era="2025-11-25", pending=pending) as client:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                results: list[str] = []

                async def call() -> None:
                    results.append(text(await client.call_tool("ask_then_go_on", {})))

                group.start_soon(call)
                while not pending.list() or pending.list()[0].status is not FlowStatus.DECLINED:
                    await anyio.sleep(0.01)
                [flow] = pending.list()
                assert not pending.cancel(flow.id)
    assert results == ["went on after decline"]
