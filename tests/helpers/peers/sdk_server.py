"""A stdio server of the SDK's own kind, written without mcp-elicit: a plain `MCPServer`.

`book` asks with `ctx.elicit`, the way tools written for the SDK ask: an `elicitation/create` request on the
live call, which 2026-07-28 connections do not have, so there the SDK fails the call; on 2025-11-25 the
question reaches the client. `reserve` asks the way FastMCP 4's `Context.elicit` does: on a 2026-07-28
connection it refuses before sending anything, in FastMCP's words, as a tool error. `connect` sends a
URL-mode request with `ctx.elicit_url`, which the SDK sends on any protocol (2025-06-18 included), and says
how the client answered. `capabilities` returns the client capabilities the server received. `crash` logs
a line and raises: the SDK answers only "Error executing tool crash" and logs the traceback to stderr.
`digest` gives the SHA-256 of an environment variable of its process. `hold` writes a marker file and then
sleeps, so that a test knows the call is in flight before it kills
the process (`pid`), and writes `cancelled` there if the call is cancelled. `die` ends the process in the
middle of a call. `count` reports progress, `say` logs a message to the client, `change` announces that the
tool list changed (the way its protocol era does), `link` sends a URL-mode request and then says the flow is
complete (`notifications/elicitation/complete`), `finish` says so of a URL flow by its id (as a server does
once the person is done on its page, often after the call that asked ended), `refuse` fails with the generic
JSON-RPC error `-32000` (`REFUSAL`), as servers do for their own errors, `meta` returns the `_meta` its request
came with, and `quiz`
asks the 2026-07-28 way, with an `InputRequiredResult` (which only a 2026-07-28 session can carry). `sample` asks
the client's model what `QUESTION` is, and `roots` asks for the client's roots, each the way its session's era
asks: a request on the live call on the handshake, an `InputRequiredResult` on 2026-07-28. `weather` takes a
`region` its schema mirrors into the `Mcp-Param-Region` header (`x-mcp-header`), which the SDK's server requires
of a 2026-07-28 call over HTTP. The
`greeting` prompt completes its `name`, there is a note resource with a template, and it gives `INSTRUCTIONS`. Run it as
`python -m tests.helpers.peers.sdk_server`; `server` is the same server for in-process use. A peer of its own
(not `tests.helpers.server`): it stands for tools written for the SDK, without mcp-elicit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import warnings
from pathlib import Path
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    Completion,
    CompletionArgument,
    CompletionContext,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel, Field


class Seats(BaseModel):
    seats: int = Field(ge=1, le=9, description="How many seats")


CRASH_LOG = "opening the ledger"
CONNECT_URL = "https://accounts.example/connect"

INSTRUCTIONS = "Book seats, then read the notes."

server = MCPServer("sdk-server", instructions=INSTRUCTIONS)
log = logging.getLogger("tests.helpers.peers.sdk_server")


@server.tool()
async def book(ctx: Context, city: str) -> str:
    """Ask how many seats, then book them."""
    answer = await ctx.elicit(f"How many seats to {city}?", Seats)
    if answer.action == "accept":
        return f"booked {answer.data.seats} to {city}"
    return f"not booked ({answer.action})"


@server.tool()
async def reserve(ctx: Context, city: str) -> str:
    """Ask how many seats, refusing up front where the protocol has no server-initiated requests."""
    if ctx.protocol_version == "2026-07-28":
        raise ToolError(
            f"elicitation via server-initiated requests is unavailable on {ctx.protocol_version} connections."
        )
    return await book(ctx, city)


@server.tool()
async def connect(ctx: Context) -> str:
    """Send the person to a page to connect an account."""
    try:
        answer = await ctx.elicit_url("Connect your account", CONNECT_URL, "connect-1")
    except MCPError as refused:
        return f"refused: {refused.code} {refused.error.message}"
    return answer.action


LINK_ID = "link-1"


@server.tool()
async def link(ctx: Context) -> str:
    """Send the person to a page, then say the flow there is complete."""
    answer = await ctx.elicit_url("Link your account", CONNECT_URL, LINK_ID)
    await ctx.request_context.session.send_elicit_complete(LINK_ID)
    return answer.action


@server.tool()
async def finish(ctx: Context, elicitation_id: str) -> str:
    """Say that the URL flow `elicitation_id` is complete."""
    await ctx.request_context.session.send_elicit_complete(elicitation_id)
    return "completed"


REFUSAL = "quota exceeded"


@server.tool()
async def refuse() -> str:
    """Fail with the generic server error code, -32000."""
    raise MCPError(-32000, REFUSAL)


@server.tool()
async def meta(ctx: Context) -> str:
    """The `_meta` of this request, as the server received it."""
    return json.dumps(ctx.request_context.meta or {}, sort_keys=True)


@server.tool()
async def capabilities(ctx: Context) -> str:
    """The client capabilities of this connection."""
    declared = ctx.client_capabilities
    return json.dumps(declared.model_dump(mode="json", by_alias=True, exclude_none=True) if declared else None)


@server.tool()
async def crash() -> str:
    """Fail the way a bug does."""
    log.warning(CRASH_LOG)
    ledger: dict[str, int] = {}
    return str(ledger["read-only ledger"])


@server.tool()
async def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
async def digest(variable: str) -> str:
    """The SHA-256 of the environment variable `variable` (empty: it is not set), so that a test learns which secret
    the process was started with without the secret coming back."""
    value = os.environ.get(variable)
    return "" if value is None else hashlib.sha256(value.encode()).hexdigest()


@server.tool()
async def hold(marker: str, seconds: float) -> str:
    """Write `marker`, then sleep; `cancelled` in `marker` if the call is cancelled."""
    Path(marker).write_text("holding")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        Path(marker).write_text("cancelled")
        raise
    return f"held {seconds} s"


@server.tool()
async def die() -> str:
    """End the process in the middle of the call, as a crash does."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


@server.tool()
async def count(to: int, ctx: Context) -> str:
    """Report progress from 1 to `to`, then say so."""
    for done in range(1, to + 1):
        await ctx.report_progress(done, to, f"step {done}")
    return f"counted to {to}"


@server.tool()
async def say(message: str, ctx: Context) -> str:
    """Log `message` to the client at info level (logging is deprecated at 2026-07-28, and still served)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.log("info", message, logger_name="sdk-server")
    return "said"


@server.tool()
async def change(ctx: Context) -> str:
    """Announce that the tool list changed: a notice on a handshake session, a listen event on 2026-07-28."""
    if ctx.protocol_version == "2026-07-28":
        await ctx.notify_tools_changed()
    else:
        await ctx.request_context.session.send_tool_list_changed()
    return "announced"


QUIZ = ElicitRequest(
    params=ElicitRequestFormParams(
        message="What is 6 x 7?",
        requested_schema={"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]},
    )
)


@server.tool()
async def quiz(ctx: Context) -> str | InputRequiredResult:
    """Ask with an `InputRequiredResult`, and say the answer on the retry."""
    answer = (ctx.input_responses or {}).get("answer")
    if not isinstance(answer, ElicitResult):
        return InputRequiredResult(input_requests={"answer": QUIZ}, request_state="quiz-1")
    return f"answered {answer.action} {(answer.content or {}).get('answer')} ({ctx.request_state})"


QUESTION = "What is 2 + 2?"


@server.tool()
async def sample(ctx: Context) -> str | InputRequiredResult:
    """Ask the client's model, and say what it answered."""
    message = SamplingMessage(role="user", content=TextContent(type="text", text=QUESTION))
    if ctx.protocol_version == "2026-07-28":
        answer = (ctx.input_responses or {}).get("model")
        if not isinstance(answer, CreateMessageResult):
            asked = CreateMessageRequest(params=CreateMessageRequestParams(messages=[message], max_tokens=10))
            return InputRequiredResult(input_requests={"model": asked})
    else:
        session = ctx.request_context.session
        with warnings.catch_warnings():  # deprecated at 2026-07-28, and still served on the handshake
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            answer = await session.create_message([message], max_tokens=10, related_request_id=ctx.request_id)
    said = answer.content
    return f"the model said {said.text if isinstance(said, TextContent) else said}"


@server.tool()
async def roots(ctx: Context) -> str | InputRequiredResult:
    """Ask for the client's roots, and say them."""
    if ctx.protocol_version == "2026-07-28":
        answer = (ctx.input_responses or {}).get("roots")
        if not isinstance(answer, ListRootsResult):
            return InputRequiredResult(input_requests={"roots": ListRootsRequest()})
    else:
        request = ListRootsRequest()
        related = ServerMessageMetadata(related_request_id=ctx.request_id)
        answer = await ctx.request_context.session.send_request(request, ListRootsResult, metadata=related)
    return " ".join(str(root.uri) for root in answer.roots)


@server.tool()
async def weather(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    """The weather in `region`."""
    return f"sunny in {region}"


@server.prompt()
def greeting(name: str) -> str:
    """A greeting for `name`."""
    return f"Say hello to {name}."


@server.resource("note://readme", mime_type="text/plain")
def readme() -> str:
    """The readme note."""
    return "read me"


@server.resource("note://{name}", mime_type="text/plain")
def note(name: str) -> str:
    """A note by name."""
    return f"note {name}"


NAMES = ("Ada", "Alan", "Grace")


@server.completion()  # type: ignore[untyped-decorator, no-untyped-call]  # the SDK leaves it untyped
async def complete(
    ref: PromptReference | ResourceTemplateReference, argument: CompletionArgument, context: CompletionContext | None
) -> Completion:
    """Names that start with what was typed."""
    return Completion(values=[name for name in NAMES if name.startswith(argument.value)])


if __name__ == "__main__":
    server.run("stdio")
