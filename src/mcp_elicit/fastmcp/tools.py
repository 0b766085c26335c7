"""FastMCP 4 servers with durable decision points: a tool body takes a `Flow`, as on the SDK's `MCPServer`.

`FastMCPFlows.tool` registers the body as a FastMCP tool (every `@mcp.tool` option passes through) whose
schema leaves the `Flow` out. FastMCP dispatches the call, validates the arguments and injects its
dependencies as for any tool; the tool's function then runs the body through the same era-blind runtime as
`Elicitation.run_tool`: the operation, its journal, its binding to the caller, the fallbacks, URL mode and
every protocol era, 2026-07-28 included (a round's `InputRequiredResult` is what FastMCP's own guard tools
return). What the body returns is converted by the tool as FastMCP converts any result, recorded in that
form, and replayed as such.

Guarantees: those of the native path (see `mcp_elicit.server.runtime`). The runtime's JSON-RPC errors
(-32042, -32021, -32602 for a refused idempotency key or round state) reach the client as such: FastMCP
turns every exception of a tool into a tool error, so they pass it as `_OnTheWire` (a `BaseException`, as
the runtime's own signals are) to the flows' middleware, which raises the error outside that masking. A
body's `ToolError` fails the operation; any other exception leaves it open, so the same call made again
goes on from what was recorded.

`in_process(server, elicitation)` is the SDK `Server` a FastMCP of these flows runs on: what the testing
`Harness` and the client kit connect to in this process, FastMCP's lifespan and middleware included.

Does not guarantee: anything for a flow tool run as a FastMCP background task (`task=True`, refused at
registration) or called with no MCP request to carry its questions (`FastMCP.call_tool` from code).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar, get_type_hints

import fastmcp
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_context, without_injected_parameters
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import FunctionTool, Tool, ToolResult
from mcp.server import Server
from mcp.server.mcpserver.exceptions import ToolError as FailedOperation
from mcp.server.mcpserver.tools import Tool as SdkTool
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, CallToolResult, InputRequiredResult

from mcp_elicit.approvals.gate import Gate, GatedTool
from mcp_elicit.server.eras import Era, era_of
from mcp_elicit.server.fallback import ANSWERS_ARGUMENT, Fallback
from mcp_elicit.server.flow import Flow
from mcp_elicit.server.forms import check_asks
from mcp_elicit.server.runtime import Elicitation, argument_validator, check_gate

__all__ = ["FastMCPFlows", "in_process"]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class _OnTheWire(BaseException):
    """A JSON-RPC error of the runtime on its way past FastMCP's handling of tool exceptions."""

    def __init__(self, error: MCPError) -> None:
        super().__init__(str(error))
        self.error = error


class FastMCPFlows(Middleware):
    """Flow tools on FastMCP servers, run by one `Elicitation` (its store, keys and public base URL).

    `server(name, ...)` builds the `FastMCP`: requestState sealed with the elicitation's key ring, its
    lifespan running the runtime's background work around any lifespan given, and these flows as the last
    of its middleware. `tool(...)` registers bodies on it.
    """

    def __init__(self, elicitation: Elicitation) -> None:
        self.elicitation = elicitation
        self._servers: list[FastMCP[Any]] = []

    def server(
        self,
        name: str,
        *,
        lifespan: Callable[[Any], AbstractAsyncContextManager[Any]] | None = None,
        middleware: Sequence[Middleware] = (),
        **options: Any,
    ) -> FastMCP[Any]:
        """A `FastMCP` serving these flows; `options` are FastMCP's own (`auth=`, `instructions=`, ...)."""
        server: FastMCP[Any] = FastMCP(
            name,
            request_state_security=self.elicitation.request_state_security,
            lifespan=self._lifespan(lifespan),
            middleware=[*middleware, self],
            **options,
        )
        self._servers.append(server)
        return server

    def _lifespan(
        self, inner: Callable[[Any], AbstractAsyncContextManager[Any]] | None
    ) -> Callable[[Any], AbstractAsyncContextManager[Any]]:
        """The runtime's lifespan in a task of its own, around `inner`.

        FastMCP ends a lifespan inside a cancel scope of its own, entered after the lifespan was; a task
        group spanning the lifespan's `yield` cannot end there. Kept in its own task, the runtime's background
        work starts and ends whole however FastMCP nests the teardown.
        """
        background = self.elicitation.lifespan()

        @asynccontextmanager
        async def lifespan(server: Any) -> AsyncIterator[Any]:
            started, stop = asyncio.Event(), asyncio.Event()

            async def host() -> None:
                async with background(server):
                    started.set()
                    await stop.wait()

            hosting = asyncio.create_task(host())
            waiting = asyncio.create_task(started.wait())
            await asyncio.wait({hosting, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if hosting.done():
                await hosting  # it failed to start: its error is the lifespan's
            try:
                if inner is None:
                    yield {}
                else:
                    async with inner(server) as state:
                        yield state
            finally:
                stop.set()
                await hosting

        return lifespan

    def tool(
        self,
        server: FastMCP[Any] | None = None,
        *,
        fallback: Fallback = Fallback.ERROR,
        asks: Sequence[object] = (),
        gate: Gate | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Register a body that takes a `Flow` as a tool of `server` (the one `server()` built, if only one).

        `options` are `@mcp.tool`'s (`name`, `description`, `tags`, `annotations`, `timeout`...); `fallback`,
        `asks` and `gate` mean what they mean for `Elicitation.tool`, and are checked here. The body is returned
        as it is, so it stays callable with a `Flow` of one's own.
        """
        target = self._target(server)
        self.elicitation.check_fallback(fallback)
        check_gate(gate, fallback)
        if options.get("task"):
            raise ValueError("a flow tool asks through its Flow on the call; it cannot run as a background task")

        def register(body: F) -> F:
            check_asks(asks, f"tool {options.get('name') or body.__name__!r}")
            flow_tool = _FlowTool(self.elicitation, body, fallback)
            function = flow_tool.function()
            if gate is not None:
                flow_tool.gate(gate, options.get("name") or body.__name__)
            flow_tool.tool = target.add_tool(FunctionTool.from_function(function, **options))
            return body

        return register

    def _target(self, server: FastMCP[Any] | None) -> FastMCP[Any]:
        if server is not None:
            if server not in self._servers:
                raise ValueError("that FastMCP was not built by these flows: create it with FastMCPFlows.server(...)")
            return server
        if len(self._servers) != 1:
            raise RuntimeError("create the server with FastMCPFlows.server(...) first, or name the server")
        return self._servers[0]

    async def __call__(self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]) -> Any:
        """Put a flow tool's JSON-RPC error on the wire as such; every other message passes untouched.

        A raw `__call__` (FastMCP's documented override, run once per message) rather than `on_call_tool`:
        only a flow tool raises `_OnTheWire`, so no hook dispatch is needed to tell a tool call apart.
        """
        try:
            return await call_next(context)
        except _OnTheWire as carried:
            raise carried.error from None


def in_process(server: FastMCP[Any], elicitation: Elicitation) -> Server[Any]:
    """The SDK `Server` under `server`, a FastMCP of `FastMCPFlows(elicitation)`, to connect to it in this process.

    `Harness(elicitation, server=server)` and the plugin's `elicit_server` use it; `ElicitingClient` takes it as
    it takes any in-process `Server`. Each connection runs what serving the FastMCP runs: its lifespan (the
    lowlevel server's lifespan enters FastMCP's, the flows' background work included, once however many
    connections overlap), its middleware and its requestState boundary, as FastMCP's own in-memory client does.
    A FastMCP these flows did not build is refused: its flow tools would record into another store.
    """
    if not isinstance(server, FastMCP):
        raise TypeError(
            f"in_process takes a FastMCP built with FastMCPFlows(...).server(...), not {type(server).__name__}"
        )
    if not any(isinstance(layer, FastMCPFlows) and layer.elicitation is elicitation for layer in server.middleware):
        raise ValueError(
            f"the FastMCP {server.name!r} was not built by FastMCPFlows(elicitation).server(...) for this Elicitation"
        )
    # What FastMCP's own in-memory transport runs; FastMCP names no public accessor, so a release that renames
    # it is said here rather than as an AttributeError deep in a test.
    inner = getattr(server, "_mcp_server", None)
    if not isinstance(inner, Server):
        raise RuntimeError(
            f"this FastMCP ({fastmcp.__version__}) keeps its SDK server where mcp_elicit.fastmcp does not look; "
            "in_process was built against fastmcp 4.2"
        )
    return inner


class _FlowTool:
    """One registered body, and the function FastMCP calls for it: the body's parameters but the Flow."""

    def __init__(self, elicitation: Elicitation, body: Callable[..., Awaitable[Any]], fallback: Fallback) -> None:
        hints = get_type_hints(body, include_extras=True)
        signature = inspect.signature(body, eval_str=True)
        flow_names = [p.name for p in signature.parameters.values() if hints.get(p.name) is Flow]
        if len(flow_names) != 1:
            raise TypeError(f"tool {body.__name__!r} must take exactly one parameter annotated Flow")
        if not inspect.iscoroutinefunction(body):
            raise TypeError(f"tool {body.__name__!r} takes a Flow, so it must be async (async def)")
        self.elicitation = elicitation
        self.body = body
        self.flow_parameter = flow_names[0]
        self.fallback = fallback
        self.tool: Tool | None = None
        kept = [p for p in signature.parameters.values() if p.name != self.flow_parameter]
        self._annotations: dict[str, Any] = {p.name: hints[p.name] for p in kept if p.name in hints}
        if fallback is Fallback.ARGUMENTS:
            answers_type = dict[str, dict[str, Any]] | None
            kept.append(
                inspect.Parameter(
                    ANSWERS_ARGUMENT, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=answers_type
                )
            )
            self._annotations[ANSWERS_ARGUMENT] = answers_type
        if "return" in hints:
            self._annotations["return"] = hints["return"]
        self._signature = signature.replace(parameters=kept)
        self._injected: frozenset[str] = frozenset()
        self._arguments_only: Callable[..., Any] | None = None
        self._gated: GatedTool | None = None

    def function(self) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(self.body)
        async def run(**arguments: Any) -> Any:
            return await self.run(arguments)

        run.__signature__ = self._signature  # type: ignore[attr-defined]
        run.__annotations__ = self._annotations
        del run.__wrapped__  # FastMCP reads the signature above, not the body's
        self._arguments_only = without_injected_parameters(run)
        arguments_only = inspect.signature(self._arguments_only).parameters
        self._injected = frozenset(self._signature.parameters) - frozenset(arguments_only)
        return run

    def gate(self, gate: Gate, name: str) -> None:
        """Bind `gate` to this tool's arguments (FastMCP's dependencies are none of them), as validated for it."""
        assert self._arguments_only is not None, "function() first"
        described = SdkTool.from_function(self._arguments_only, name=name)
        self._gated = gate.bind(name, described.parameters, argument_validator(described))

    async def run(self, given: dict[str, Any]) -> Any:
        """One call: the body through the runtime, with FastMCP's dependencies kept out of the request digest."""
        tool = self.tool
        context = get_context()
        request = context.request_context
        if tool is None or request is None:
            raise ToolError(f"tool {self.body.__name__!r} asks through a Flow, which needs an MCP request to carry it")
        injected = {name: value for name, value in given.items() if name in self._injected}
        arguments = {name: value for name, value in given.items() if name not in self._injected}
        # inputResponses and requestState are 2026-07-28 fields; FastMCP parses the request's params again
        # for each, so an earlier era's call does not ask for them.
        rounds = era_of(request.protocol_version) is Era.MRTR
        params = CallToolRequestParams(
            name=tool.name,
            arguments=arguments,
            input_responses=context.input_responses if rounds else None,
            request_state=context.request_state if rounds else None,
        )
        ran: list[tuple[ToolResult, CallToolResult]] = []

        async def body(flow: Flow) -> CallToolResult:
            passed = {name: value for name, value in flow.arguments.items() if name != ANSWERS_ARGUMENT}
            try:
                value = await self.body(**{self.flow_parameter: flow}, **passed, **injected)
            except ToolError as error:
                raise FailedOperation(str(error)) from None
            produced = tool.convert_result(value)
            ran.append((produced, _wire(produced)))
            return ran[-1][1]

        try:
            outcome = await self.elicitation.run_tool(request, params, body, fallback=self.fallback, gate=self._gated)
        except MCPError as error:
            raise _OnTheWire(error) from None
        if isinstance(outcome, InputRequiredResult):
            return outcome
        for produced, wire in ran:
            if outcome is wire:
                return produced
        return ToolResult.from_mcp_result(outcome)  # a replayed or refused result; FastMCP marks it as its own


def _wire(result: ToolResult) -> CallToolResult:
    """The tool result as the wire carries it, which is what the operation records."""
    shaped = result.to_mcp_result()
    if isinstance(shaped, CallToolResult):
        return shaped
    if isinstance(shaped, tuple):
        content, structured = shaped
        return CallToolResult(content=content, structured_content=structured)
    return CallToolResult(content=shaped)
