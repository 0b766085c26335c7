"""The conformance adapter: the fixture names `@modelcontextprotocol/conformance` calls, on one mcp-elicit server.

Every fixture that asks for input (a person by elicitation, the client's model by sampling, its roots) is an
`Elicitation.tool` or `Elicitation.prompt` whose body calls `flow.ask`, `flow.sample`, `flow.roots` or
`flow.gather`, so the suite exercises mcp-elicit's own form rendering, round state, requestState sealing,
journaling and answer validation on 2025-11-25 (requests on the live call) and on 2026-07-28
(`InputRequiredResult`), the same way a tool author uses them. The fixtures that ask for nothing (content types,
logging, progress, resources, plain prompts, completion, the sampling capability check) are plain SDK
registrations on the same `MCPServer`: the library has no say in them, and the suite needs them for its other
scenarios.

Run by `python -m conformance.run` (see the Makefile's `conformance` target), never exposed beyond loopback:
unauthenticated calls are accepted from loopback only, and every caller is the one development principal.
"""

from __future__ import annotations

import argparse
import base64
import json
import socket
import sys
import tempfile
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Message, UserMessage
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    ClientCapabilities,
    CompleteRequestParams,
    CompleteResult,
    Completion,
    CreateMessageResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    MissingRequiredClientCapabilityErrorData,
    SamplingCapability,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field

from mcp_elicit.server import (
    Accepted,
    Answer,
    Declined,
    Elicitation,
    Expired,
    Flow,
    IdentityPolicy,
    RequestState,
    TaskPolicy,
    Timing,
    Titled,
)
from mcp_elicit.server.sse_events import MemoryEventStore
from mcp_elicit.server.tasks import TaskStart

SERVER_NAME = "mcp-elicit-conformance"
PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_EMPTY = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
RETRY_INTERVAL_MS = 500
LIST_CACHE_HINT = CacheHint(ttl_ms=300_000, scope="public")


# -- the forms the elicitation fixtures ask ----------------------------------------------------------------


class UserInfo(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


class Defaults(BaseModel):
    """SEP-1034: one default per primitive type, rendered into requestedSchema by mcp-elicit's forms."""

    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: Literal["active", "inactive", "pending"] = Field(default="active", description="User status")
    verified: bool = Field(default=True, description="Verification status")


class EnumChoices(BaseModel):
    """SEP-1330: the enum shapes a form can use; the legacy titled one is rendered as mcp-elicit renders titles."""

    untitledSingle: Literal["option1", "option2", "option3"] | None = Field(
        default=None, description="Select one option"
    )
    titledSingle: (
        Annotated[
            Literal["value1", "value2", "value3"],
            Titled({"value1": "First Option", "value2": "Second Option", "value3": "Third Option"}),
        ]
        | None
    ) = Field(default=None, description="Select one option with titles")
    legacyEnum: (
        Annotated[
            Literal["opt1", "opt2", "opt3"],
            Titled({"opt1": "Option One", "opt2": "Option Two", "opt3": "Option Three"}, legacy_enum_names=True),
        ]
        | None
    ) = Field(default=None, description="Select one option (legacy)")
    untitledMulti: list[Literal["option1", "option2", "option3"]] | None = Field(
        default=None, min_length=1, max_length=3, description="Select multiple options"
    )
    titledMulti: (
        Annotated[
            list[Literal["value1", "value2", "value3"]],
            Titled({"value1": "First Choice", "value2": "Second Choice", "value3": "Third Choice"}),
        ]
        | None
    ) = Field(default=None, min_length=1, max_length=3, description="Select multiple options with titles")


class Name(BaseModel):
    name: str


class Color(BaseModel):
    color: str


class Confirmation(BaseModel):
    ok: bool


class PromptContext(BaseModel):
    context: str


def build_server(elicitation: Elicitation) -> MCPServer:
    """Every fixture of the suite's server scenarios that this adapter can express, on one server."""
    server = elicitation.server(
        SERVER_NAME,
        version="1.0.0",
        tools=[_json_schema_tool()],
        cache_hints={
            "tools/list": LIST_CACHE_HINT,
            "prompts/list": LIST_CACHE_HINT,
            "resources/list": LIST_CACHE_HINT,
            "resources/templates/list": LIST_CACHE_HINT,
        },
    )
    _elicitation_fixtures(elicitation)
    _input_fixtures(elicitation)
    _content_fixtures(server)
    _resources(server)
    _protocol_handlers(server)
    _prompts(server)
    _task_fixtures(elicitation, server)
    return server


# -- fixtures that ask a person: only the public mcp-elicit API ---------------------------------------------


def _elicitation_fixtures(elicitation: Elicitation) -> None:
    @elicitation.tool()
    async def test_elicitation(flow: Flow, message: str) -> str:
        """Ask for a username and an email address with the caller's message (tools-call-elicitation)."""
        return "User response: " + _outcome(await flow.ask(message, UserInfo, key="user_info"))

    @elicitation.tool()
    async def test_elicitation_sep1034_defaults(flow: Flow) -> str:
        """Ask a form whose every primitive field has a default (SEP-1034)."""
        answer = await flow.ask("Please review and update the form fields with defaults", Defaults, key="defaults")
        return "Elicitation completed: " + _outcome(answer)

    @elicitation.tool()
    async def test_elicitation_sep1330_enums(flow: Flow) -> str:
        """Ask a form with single- and multi-select choices, titled and untitled (SEP-1330)."""
        answer = await flow.ask("Please select options from the enum fields", EnumChoices, key="enums")
        return "Elicitation completed: " + _outcome(answer)

    @elicitation.tool()
    async def test_input_required_result_elicitation(flow: Flow) -> str:
        """Ask the user's name in one round (SEP-2322 A1, and the missing/extra/invalid response scenarios)."""
        answer = await flow.ask("What is your name?", Name, key="user_name")
        return f"Hello, {answer.data.name}!" if isinstance(answer, Accepted) else _outcome(answer)

    @elicitation.tool()
    async def test_input_required_result_request_state(flow: Flow) -> str:
        """Ask for a confirmation; the retry is only accepted with the sealed requestState of its round."""
        answer = await flow.ask("Please confirm", Confirmation, key="confirm")
        if isinstance(answer, Accepted) and answer.data.ok:
            return "state-ok: requestState validated"
        return "not confirmed: " + _outcome(answer)

    @elicitation.tool()
    async def test_input_required_result_multi_round(flow: Flow) -> str:
        """Ask two questions in two rounds; each round's requestState is new."""
        name = await flow.ask("Step 1: What is your name?", Name, key="step1")
        if not isinstance(name, Accepted):
            return "no name: " + _outcome(name)
        color = await flow.ask("Step 2: What is your favorite color?", Color, key="step2")
        if not isinstance(color, Accepted):
            return "no color: " + _outcome(color)
        return f"Multi-round complete for {name.data.name} who likes {color.data.color}"

    @elicitation.tool()
    async def test_input_required_result_tampered_state(flow: Flow) -> str:
        """Ask for a confirmation; a tampered requestState is refused by the SDK boundary before the body runs."""
        answer = await flow.ask("Please confirm", Confirmation, key="confirm")
        return "integrity-ok: state verified" if isinstance(answer, Accepted) else _outcome(answer)

    @elicitation.tool()
    async def test_streaming_elicitation(flow: Flow) -> str:
        """Ask one question; on 2026-07-28 it must come back as an InputRequiredResult, never a stream request."""
        answer = await flow.ask("Continue the streaming check?", Confirmation, key="continue")
        return "Streaming complete: " + _outcome(answer)


def _input_fixtures(elicitation: Elicitation) -> None:
    """SEP-2322 rounds that ask the client's model, its roots, several things at once, or from a prompt."""

    @elicitation.tool()
    async def test_sampling(flow: Flow, prompt: str) -> str:
        """Ask the client's model for a completion (2025-11-25: sampling/createMessage on the live call)."""
        reply = await flow.sample(prompt, max_tokens=100, key="completion")
        return f"LLM response: {_text(reply)}"

    @elicitation.tool()
    async def test_input_required_result_sampling(flow: Flow) -> str:
        """Ask the client's model one question in an input round."""
        reply = await flow.sample("What is the capital of France?", max_tokens=100, key="capital_question")
        return f"Sampling result: {_text(reply)}"

    @elicitation.tool()
    async def test_input_required_result_list_roots(flow: Flow) -> str:
        """Ask the client for its roots in an input round."""
        roots = await flow.roots(key="client_roots")
        return f"Found {len(roots)} root(s)"

    @elicitation.tool()
    async def test_input_required_result_capabilities(flow: Flow) -> str:
        """Ask only the client's model: a client that declared sampling and no elicitation gets a sampling-only
        round, and one that declared no sampling gets -32021 naming the sampling capability."""
        reply = await flow.sample("Reply with one word to confirm you can be asked.", max_tokens=20, key="confirm")
        return f"capabilities-ok: {_text(reply)}"

    @elicitation.tool()
    async def test_input_required_result_multiple_inputs(flow: Flow) -> str:
        """One round carrying an elicitation, a sampling request and a roots request (`flow.gather`)."""
        name, greeting, roots = await flow.gather(
            flow.ask("What is your name?", Name, key="user_name"),
            flow.sample("Generate a greeting", max_tokens=50, key="greeting"),
            flow.roots(key="client_roots"),
        )
        who = name.data.name if isinstance(name, Accepted) else _outcome(name)
        return f"Name: {who}; greeting: {_text(greeting)}; roots: {len(roots)}"

    @elicitation.prompt(title="Prompt That Asks For Context")
    async def test_input_required_result_prompt(flow: Flow) -> str:
        """A prompt that asks the user what context to use before it is rendered (SEP-2322 on prompts/get)."""
        answer = await flow.ask("What context should the prompt use?", PromptContext, key="user_context")
        if isinstance(answer, Accepted):
            return f"Use this context: {answer.data.context}"
        return "No context given: " + _outcome(answer)


def _text(reply: CreateMessageResult) -> str:
    return reply.content.text if isinstance(reply.content, TextContent) else "No response"


def _outcome(answer: Answer[Any]) -> str:
    if isinstance(answer, Accepted):
        content = answer.data.model_dump(mode="json", exclude_none=True)
        return f"action=accept, content={json.dumps(content, sort_keys=True)}"
    if isinstance(answer, Declined):
        return "action=decline"
    if isinstance(answer, Expired):
        return "expired"
    return "action=cancel"


# -- the tasks extension's fixtures (io.modelcontextprotocol/tasks, 2026-07-28) -------------------------------


class DeleteConfirmation(BaseModel):
    confirm: bool


class NamedConfirmation(BaseModel):
    name: str = ""
    confirm: bool = False


class UserName(BaseModel):
    name: str


def _task_fixtures(elicitation: Elicitation, server: MCPServer) -> None:
    """The fixtures of the suite's `tasks-*` scenarios: task-capable tools are `Elicitation.tool(task=...)`."""

    @server.tool()
    def greet(name: str) -> str:
        """Sync only."""
        return f"Hello, {name}!"

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def slow_compute(flow: Flow, seconds: float, label: str = "") -> str:
        """Sleep `seconds`, then answer; a cancelled task stops sleeping."""
        await anyio.sleep(seconds)
        return f"computed {label} after {seconds:g} s"

    @elicitation.tool(task=TaskPolicy.REQUIRED)
    async def failing_job(flow: Flow) -> str:
        """A tool error after about a second."""
        await anyio.sleep(1)
        raise ToolError("the job failed")

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def protocol_error_job(flow: Flow) -> str:
        """Ends in a JSON-RPC error, not a tool error."""
        raise MCPError(code=-32603, message="the job broke down")

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def confirm_delete(flow: Flow, filename: str) -> str:
        """One question, asked through the task."""
        answer = await flow.ask(f"Delete {filename}?", DeleteConfirmation, key="confirm")
        deleted = isinstance(answer, Accepted) and answer.data.confirm
        return f"{filename} {'deleted' if deleted else 'kept'}"

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def multi_input(flow: Flow) -> str:
        """Two questions outstanding at once, answerable one at a time."""
        first, second = await flow.gather(
            flow.ask("First entry?", NamedConfirmation, key="first"),
            flow.ask("Second entry?", NamedConfirmation, key="second"),
        )
        return f"first: {_outcome(first)}; second: {_outcome(second)}"

    @elicitation.tool(task=TaskPolicy.REQUIRED, task_start=TaskStart.FLOW)
    async def test_tool_with_task(flow: Flow) -> str:
        """Asks the name on the call (MRTR), then goes on as a task that greets with it."""
        name = await flow.ask("What is your name?", UserName, key="user_name")
        await flow.begin_task()
        return f"Hello, {name.data.name}!" if isinstance(name, Accepted) else "Hello, stranger!"


# -- fixtures that ask no person: plain SDK registrations -----------------------------------------------------


def _json_schema_tool() -> Tool:
    """SEP-1613/SEP-2106: a tool whose listed inputSchema keeps the 2020-12 keywords verbatim."""

    def json_schema_2020_12_tool(
        name: str | None = None,
        address: dict[str, str] | None = None,
        contactMethod: Literal["phone", "email"] | None = None,
        phone: str | None = None,
        email: str | None = None,
    ) -> str:
        """Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)."""
        arguments = {"name": name, "address": address, "contactMethod": contactMethod, "phone": phone, "email": email}
        shown = {key: value for key, value in arguments.items() if value is not None}
        return f"JSON Schema 2020-12 tool called with: {json.dumps(shown, sort_keys=True)}"

    tool = Tool.from_function(json_schema_2020_12_tool)
    return tool.model_copy(update={"parameters": JSON_SCHEMA_2020_12})


def _content_fixtures(server: MCPServer) -> None:
    @server.tool()
    def test_simple_text() -> str:
        """Return one text block."""
        return "This is a simple text response for testing."

    @server.tool()
    def test_image_content() -> list[ImageContent]:
        """Return one PNG image block."""
        return [ImageContent(type="image", data=PNG_1X1, mime_type="image/png")]

    @server.tool()
    def test_audio_content() -> list[AudioContent]:
        """Return one WAV audio block."""
        return [AudioContent(type="audio", data=WAV_EMPTY, mime_type="audio/wav")]

    @server.tool()
    def test_embedded_resource() -> list[EmbeddedResource]:
        """Return one embedded text resource."""
        return [
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
                ),
            )
        ]

    @server.tool()
    def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
        """Return text, image and an embedded resource together."""
        return [
            TextContent(type="text", text="Multiple content types test:"),
            ImageContent(type="image", data=PNG_1X1, mime_type="image/png"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="test://mixed-content-resource",
                    mime_type="application/json",
                    text=json.dumps({"test": "data", "value": 123}),
                ),
            ),
        ]

    @server.tool()
    async def test_tool_with_logging(ctx: Context) -> str:
        """Send three info log messages while running."""
        for step, text in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
            if step:
                await anyio.sleep(0.05)
            await ctx.info(text)
        return "Tool with logging executed successfully"

    @server.tool()
    async def test_logging_tool(ctx: Context) -> str:
        """Log once; on 2026-07-28 the SDK sends it only when the request asked for a log level."""
        await ctx.info("test_logging_tool ran")
        return "Logging tool complete"

    @server.tool()
    async def test_tool_with_progress(ctx: Context) -> str:
        """Report progress 0, 50 and 100 of 100."""
        for step, progress in enumerate((0, 50, 100)):
            if step:
                await anyio.sleep(0.05)
            await ctx.report_progress(progress, 100, f"Completed step {progress} of 100")
        return "Progress tool complete"

    @server.tool()
    def test_custom_header(
        region: Annotated[str, Field(description="Where to run", json_schema_extra={"x-mcp-header": "Region"})],
    ) -> str:
        """Take a parameter that is mirrored in the Mcp-Param-Region header (SEP-2243)."""
        return f"Region: {region}"

    @server.tool()
    def test_error_handling() -> str:
        """Always fail, as a tool error the model can read."""
        raise ToolError("This tool intentionally returns an error for testing")

    @server.tool()
    async def test_reconnection(ctx: Context) -> str:
        """Close the call's SSE stream mid-call, then answer (SEP-1699)."""
        await ctx.close_sse_stream()
        await anyio.sleep(0.1)
        return "Reconnection test completed successfully."

    @server.tool()
    def test_missing_capability(ctx: Context) -> str:
        """Needs the client's sampling capability and says so with -32021 when it was not declared."""
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.sampling is None:
            data = MissingRequiredClientCapabilityErrorData(
                required_capabilities=ClientCapabilities(sampling=SamplingCapability())
            )
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message="This tool needs the client's sampling capability",
                data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
            )
        return "Success"

    @server.tool()
    async def test_trigger_tool_change(ctx: Context) -> str:
        """Announce a tools list change to subscribers."""
        await ctx.notify_tools_changed()
        return "tools list change announced"

    @server.tool()
    async def test_trigger_prompt_change(ctx: Context) -> str:
        """Announce a prompts list change to subscribers."""
        await ctx.notify_prompts_changed()
        return "prompts list change announced"


def _resources(server: MCPServer) -> None:
    @server.resource("test://static-text", name="static-text", title="Static Text Resource", mime_type="text/plain")
    def static_text() -> str:
        """A static text resource for testing."""
        return "This is the content of the static text resource."

    @server.resource(
        "test://static-binary", name="static-binary", title="Static Binary Resource", mime_type="image/png"
    )
    def static_binary() -> bytes:
        """A static binary resource (image) for testing."""
        return base64.b64decode(PNG_1X1)

    @server.resource("test://template/{id}/data", name="template", mime_type="application/json")
    def template(id: str) -> str:
        """A resource template with parameter substitution."""
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})

    @server.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
    def watched() -> str:
        """A resource clients may subscribe to."""
        return "Watched resource content"


def _protocol_handlers(server: MCPServer) -> None:
    """Subscriptions, log level and completion, which `MCPServer` has no decorator for on 2025-11-25.

    The SDK points to the lowlevel `Server.add_request_handler` for them; on 2026-07-28 it answers the
    removed methods with -32601 itself, whatever is registered here. Nothing here changes a resource, so a
    subscription is acknowledged and never notified.
    """

    async def subscribe(ctx: ServerRequestContext[Any], params: SubscribeRequestParams) -> EmptyResult:
        return EmptyResult()

    async def unsubscribe(ctx: ServerRequestContext[Any], params: UnsubscribeRequestParams) -> EmptyResult:
        return EmptyResult()

    async def set_level(ctx: ServerRequestContext[Any], params: SetLevelRequestParams) -> EmptyResult:
        return EmptyResult()

    async def complete(ctx: ServerRequestContext[Any], params: CompleteRequestParams) -> CompleteResult:
        return CompleteResult(completion=Completion(values=[], total=0, has_more=False))

    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)
    lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
    lowlevel.add_request_handler("completion/complete", CompleteRequestParams, complete)


def _prompts(server: MCPServer) -> None:
    @server.prompt(title="Simple Test Prompt")
    def test_simple_prompt() -> str:
        """A simple prompt without arguments."""
        return "This is a simple prompt for testing."

    @server.prompt(title="Prompt With Arguments")
    def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
        """A prompt with required arguments."""
        return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"

    @server.prompt(title="Prompt With Embedded Resource")
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[Message]:
        """A prompt that includes an embedded resource."""
        resource = TextResourceContents(
            uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
        )
        return [
            UserMessage(EmbeddedResource(type="resource", resource=resource)),
            UserMessage("Please process the embedded resource above."),
        ]

    @server.prompt(title="Prompt With Image")
    def test_prompt_with_image() -> list[Message]:
        """A prompt that includes image content."""
        return [
            UserMessage(ImageContent(type="image", data=PNG_1X1, mime_type="image/png")),
            UserMessage("Please analyze the image above."),
        ]


# -- serving --------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """Serve on a free loopback port, written to `--port-file`, with a store that dies with the process.

    `Timing(replay_window=0)`: the suite repeats identical calls across scenarios, each meant as a new call. With the
    default window a first round would be answered with the recorded result of the previous scenario's call,
    which is mcp-elicit's retry guarantee but not what the scenario asks.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port-file", type=Path, required=True, help="where to write the port once listening")
    arguments = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-conformance-") as scratch:
        elicitation = Elicitation(
            f"sqlite:///{scratch}/conformance.db",
            request_state=RequestState(single_process=True),
            identity=IdentityPolicy(allow_unauthenticated_loopback=True),
            timing=Timing(replay_window=timedelta(0)),
        )
        try:
            app = build_server(elicitation).streamable_http_app(
                host="127.0.0.1", event_store=MemoryEventStore(), retry_interval=RETRY_INTERVAL_MS
            )
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind(("127.0.0.1", 0))
            port = listener.getsockname()[1]
            arguments.port_file.write_text(f"{port}\n")
            print(f"serving the conformance adapter on http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
            config = uvicorn.Config(app, log_level="warning", lifespan="on")
            uvicorn.Server(config).run(sockets=[listener])
        finally:
            elicitation.close()


if __name__ == "__main__":
    main()
