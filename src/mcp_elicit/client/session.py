"""`ElicitingClient`: an MCP client whose elicitations reach a person safely, on every protocol era.

    async with ElicitingClient(Http("https://mcp.example/mcp", bearer_token=token), handler) as client:
        result = await client.call_tool("deploy", {"service": "payments"})

It is the SDK's `mcp.Client` behind the kit's transport wrapper (`transport.KitTransport`), and it adds:

- the handler's modes, and only those, declared on every era (`capabilities`), read once at connection;
- every question put to the handler through one path (`elicitor.Elicitor`): undeclared modes refused,
  form answers checked, URLs reviewed and opened only after consent, decline and cancel kept apart;
- its own 2026-07-28 round loop paced for a person (`mrtr_loop`), and the 2025-11-25 `-32042` path
  (`url_required`), both steerable through `pending` (`PendingFlows`: list, retry now, cancel), and a
  call in still-waiting rounds with no open URL flow of its own through `rounds` (`RoundWaits`, the same
  controls; cancelling stops the call with `CallStopped`);
- no read timeout cutting a call while a person decides (`watch.SilenceWatch`): the server may stay
  silent `Timeouts.request` seconds, counted only while nobody is deciding, in a dialog or (on a
  2025-11-25 call the server holds during a URL flow) in the browser, for at most `Pacing.max_wait`
  seconds after the URL was opened (`BROWSER_LIMIT_FACTOR` x `Timeouts.request` when `max_wait` is None):
  a server that took consent and then never completes nor answers is cut all the same. The connection
  set-up (`initialize`, `server/discover`) gets `Timeouts.connect` in all (`DEFAULT_CONNECT_TIMEOUT`).

Eras: `"auto"` negotiates (2026-07-28 if the server offers it, else the `initialize` handshake),
`"2025-11-25"` pins the handshake (the SDK offers 2025-11-25; the server may settle on 2025-06-18),
`"2025-06-18"` offers 2025-06-18 in the handshake, and `"2026-07-28"` requires the stateless era: a server
that does not speak it (or a pinned handshake era) is refused at connection with `UnsupportedEra`, naming
what it offers. 2025-06-18 has no URL mode: the kit declares form mode only there, and refuses a URL
elicitation on such a connection (`-32602`) without showing it, whatever was declared (a negotiated
connection may settle on 2025-06-18 after `initialize` declared URL mode). A 2025-06-18 server reads any
declared elicitation capability as form support, so a URL-only handler declares none there. `-32042` is
handled on 2025-11-25 only: 2025-06-18 has no URL mode and 2026-07-28 forbids it.

A server that goes away (its process killed, its HTTP endpoint stopped) ends calls in flight, and the
`async with` block, with one `ConnectionLost`, its cause chained; an exception of the block itself
leaves it unchanged, never wrapped in an exception group.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx2
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client, StdioServerParameters
from mcp.client import ClientRequestContext, ClientSession, Transport
from mcp.client._memory import InMemoryTransport  # the SDK's in-process transport, as Client builds it itself
from mcp.client.session import IncomingMessage
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    URL_ELICITATION_REQUIRED,
    CallToolResult,
    ElicitCompleteNotification,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    GetPromptResult,
    Implementation,
    InputRequest,
    InputRequiredResult,
    InputResponse,
    InputResponses,
    ListToolsResult,
    ReadResourceResult,
    UnsupportedProtocolVersionErrorData,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_elicit import __version__
from mcp_elicit.client.calls import CallInFlight, Sleep
from mcp_elicit.client.capabilities import has_url_mode
from mcp_elicit.client.config import Http, SdkOptions, Stdio, Timeouts
from mcp_elicit.client.elicitor import Elicitor
from mcp_elicit.client.errors import (
    CallStopped,
    ConnectionLost,
    KitError,
    QuestionRefused,
    ServerSilent,
    StillWaiting,
    TooManyRounds,
    UnknownResultType,
    UnsupportedEra,
    UrlFlowStopped,
)
from mcp_elicit.client.handler import Asker, ElicitationHandler, Mode
from mcp_elicit.client.mrtr_loop import Pacing, RoundWaits, drive
from mcp_elicit.client.opener import UrlOpener, system_browser
from mcp_elicit.client.pending import FlowStatus, PendingFlows
from mcp_elicit.client.tasks import CreatedTask, Tasks
from mcp_elicit.client.transport import KitTransport, legacy_task, unknown_result_type
from mcp_elicit.client.url_required import fulfil_url_required
from mcp_elicit.client.watch import SilenceWatch

log = logging.getLogger(__name__)

Era = Literal["auto", "2025-06-18", "2025-11-25", "2026-07-28"]
SDK_MODE: dict[str, str] = {"auto": "auto", "2025-06-18": "legacy", "2025-11-25": "legacy", "2026-07-28": "auto"}
"""The SDK's connection mode per era. 2026-07-28 negotiates too, then requires the result: the SDK's own
2026-07-28 mode assumes the server speaks it without asking, and a server that does not then fails the
first call with a validation error; negotiated, it says what it speaks instead."""
OFFERED_VERSION: dict[str, str] = {"2025-06-18": "2025-06-18"}
"""Handshake eras the kit offers itself, since the SDK always offers its newest one."""
URL_REQUIRED_VERSION = "2025-11-25"
"""The one era with the `-32042` path: URL mode starts there, and 2026-07-28 forbids the error."""
BROWSER_LIMIT_FACTOR = 4
"""Without `Pacing.max_wait`, a person counts as busy in the browser for this many `Timeouts.request`s
after opening a URL (2 hours at the defaults): never unbounded, or a silent server would hang a call."""
HTTP_CONNECT_TIMEOUT = 30.0
"""Connect, write and pool timeout of the kit's own HTTP client; it has no read timeout (see `watch`)."""

CLIENT_INFO = Implementation(name="mcp-elicit", version=__version__)

Target = Http | Stdio | Server[Any] | MCPServer | Transport
"""Where the server is: over HTTP, a child process over stdio, in this process, or any SDK `Transport`."""
R = TypeVar("R")
Send = Callable[[InputResponses | None, str | None], Awaitable[R | InputRequiredResult]]


class ElicitingClient:
    """An MCP client for one server; enter it with `async with`, then call tools, prompts and resources.

    `target`: where the server is (`Target`): `Http(url, ...)` with what authenticates the host, `Stdio(command,
    args)`, an in-process `Server` / `MCPServer`, or any SDK `Transport`.
    `opener` is the only thing that ever touches a URL-mode URL, after consent (default: system browser).
    `pending` may be shared by several clients, so one host view lists the flows of all its servers.
    `rounds` (this client's own) shows its calls in still-waiting rounds that no open flow stands for: a
    status line shows it next to `FlowWaits(pending, ...)`.
    `tasks`: declare the 2026-07-28 tasks extension, so a server may run a call as a task; the kit then
    follows it (see `client.tasks`) and `call_tool` returns its result all the same.
    `tool_approval` (with `tasks`): declare the experimental tool-approval extension too (a draft, SEP-2848), so a
    server may answer a call that waits on others' approval with a task; it is followed like any task, and its
    wait reads "waiting for approval".
    `timeouts` bounds a silent server (`Timeouts`), `pacing` how the kit goes back to a server that is not
    done (`Pacing`), and `sdk` is what the SDK's client gets as it is (`SdkOptions`).
    `clock` and `sleep` drive the silence watch and the pacing; tests replace them.
    """

    def __init__(
        self,
        target: Target,
        handler: ElicitationHandler,
        *,
        era: Era = "auto",
        opener: UrlOpener = system_browser,
        pending: PendingFlows | None = None,
        tasks: bool = False,
        tool_approval: bool = False,
        timeouts: Timeouts | None = None,
        pacing: Pacing | None = None,
        sdk: SdkOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        if tool_approval and not tasks:
            raise ValueError("tool_approval=True needs tasks=True: an approval the server waits on is a task")
        if era not in SDK_MODE:
            raise ValueError(f"era must be one of {sorted(SDK_MODE)}, not {era!r}")
        if isinstance(target, str | Sequence | StdioServerParameters):
            raise TypeError(
                f"say where the server is with Http(url) or Stdio(command, args), not a {type(target).__name__}"
            )
        self.target = target
        self.handler = handler
        self.era = era
        self.endpoint = _endpoint(target)
        self.pending = pending if pending is not None else PendingFlows()
        self.timeouts = timeouts if timeouts is not None else Timeouts()
        self.pacing = pacing if pacing is not None else Pacing()
        self.sdk = sdk if sdk is not None else SdkOptions()
        self.rounds = RoundWaits(
            server=lambda: self._asker_for(None).server_name,
            flow_open=lambda flow_id: self._flow_status(flow_id) is FlowStatus.OPEN,
        )
        self._clock = clock
        self._sleep = sleep
        self._watch = SilenceWatch(self.timeouts.request, clock)
        self._modes: frozenset[Mode] = frozenset()
        self._elicitor = Elicitor(
            handler,
            self.pending,
            opener,
            connection=self,
            modes=lambda: self._modes,
            asker=self._asker_for,
            protocol_version=lambda: self._client.protocol_version if self._client is not None else None,
            person_deciding=self._watch.person_deciding,
            clock=clock,
        )
        self.tasks = Tasks(
            lambda: self.session,
            self._dispatch,
            clock,
            sleep,
            server=lambda: self._asker_for(None).server_name,
            protocol=lambda: self.protocol_version,
            approval=tool_approval,
        )
        """The tasks this client follows: status, cancel, and `attach` after a restart."""
        self._declares_tasks = tasks
        self._task_support: dict[str, str] = {}
        """Each listed tool's 2025-11-25 `execution.taskSupport`, where it has one."""
        self._client: Client | None = None
        self._stack: AsyncExitStack | None = None
        self._server_info: Implementation | None = None
        self._calls: set[CallInFlight] = set()

    # -- connecting -------------------------------------------------------------------------------

    async def __aenter__(self) -> ElicitingClient:
        if self._stack is not None:
            raise RuntimeError("this ElicitingClient is already open")
        self._modes = frozenset(self.handler.modes)
        stack = AsyncExitStack()
        try:
            group = await stack.enter_async_context(_task_group())
            stack.callback(group.cancel_scope.cancel)
            group.start_soon(self._watch.run)
            transport = KitTransport(
                await self._transport(stack),
                self._modes,
                on_inbound=self._watch.heard,
                offer_version=OFFERED_VERSION.get(self.era),
                task_results=self._declares_tasks,
                task_tools=self._runs_as_legacy_task if self._declares_tasks else None,
            )
            client = Client(
                transport,
                mode=SDK_MODE[self.era],
                elicitation_callback=self._on_elicitation,
                message_handler=self._on_message,
                sampling_callback=self.sdk.sampling_callback,
                list_roots_callback=self.sdk.list_roots_callback,
                client_info=self.sdk.client_info or CLIENT_INFO,
                extensions=self.tasks.extensions() if self._declares_tasks else None,
            )
            connection = _Connection(client, self._identify)
            stack.push_async_callback(connection.close)
            with anyio.move_on_after(self.timeouts.connect) as setup:
                self._server_info = await group.start(connection.hold)
            if setup.cancelled_caught:
                assert self.timeouts.connect is not None
                raise ServerSilent(self.timeouts.connect, connecting=True)
            self._client = client
        except BaseException as failed:
            self._client = None
            try:
                await stack.aclose()
            finally:
                _raise_as_kit_error(failed, connecting=True, wanted=None if self.era == "auto" else self.era)
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await self._close(stack, exc)
        finally:
            self._client = None
            self.pending.finish(self.pending.of_connection(self), FlowStatus.ENDED, "the client closed")

    async def _close(self, stack: AsyncExitStack, raised: BaseException | None) -> None:
        """Close the connection; what the block raised is left as it is, a lost connection is `ConnectionLost`.

        Only a cancellation goes into the task group's exit (it must, to be told apart from the group's own):
        any other exception of the block would come out of the group wrapped in an `ExceptionGroup`, which no
        `except KitError` or `except MCPError` around the block catches.
        """
        handed = raised if isinstance(raised, anyio.get_cancelled_exc_class()) else None
        try:
            await stack.__aexit__(type(handed) if handed is not None else None, handed, None)
        except BaseException as closing:
            if raised is not None and handed is None:
                log.debug("closing the connection failed after the block raised %r", raised, exc_info=closing)
                return
            _raise_as_kit_error(closing, connecting=False)
            raise

    async def _transport(self, stack: AsyncExitStack) -> AbstractAsyncContextManager[Any]:
        target = self.target
        if isinstance(target, Http):
            http = target.http_client
            if http is None:
                http = await stack.enter_async_context(
                    kit_http_client(headers=target.headers, bearer_token=target.bearer_token, auth=target.auth)
                )
            return streamable_http_client(target.url, http_client=http)
        if isinstance(target, Stdio):
            env = dict(target.env) if target.env is not None else None
            return stdio_client(
                StdioServerParameters(command=target.command, args=list(target.args), env=env, cwd=target.cwd)
            )
        if isinstance(target, Server | MCPServer):
            return InMemoryTransport(target)
        return target

    async def _identify(self, client: Client) -> Implementation | None:
        """The server's name for the person: from `initialize`, or `server/discover` (asked again if it had none).

        Refuses a server that negotiated another era than the one required (`UnsupportedEra`).
        """
        version = client.protocol_version
        if self.era in MODERN_PROTOCOL_VERSIONS and version != self.era:
            raise UnsupportedEra(self.era, [version])
        if client.server_info is not None:
            return client.server_info
        if version not in MODERN_PROTOCOL_VERSIONS:
            return None
        try:
            raw = await client.session.send_discover(version)
        except MCPError:
            return None
        for candidate in ((raw.get("_meta") or {}).get(SERVER_INFO_META_KEY), raw.get("serverInfo")):
            try:
                return Implementation.model_validate(candidate)
            except ValidationError:
                continue
        return None

    # -- what the host sees -----------------------------------------------------------------------

    @property
    def session(self) -> ClientSession:
        """The SDK session underneath, for what the kit does not wrap."""
        return self._connected().session

    @property
    def protocol_version(self) -> str:
        return self._connected().protocol_version

    @property
    def server_info(self) -> Implementation | None:
        return self._server_info

    @property
    def asker(self) -> Asker:
        """Who asks, as the handler sees it (without the call)."""
        return self._asker_for(None)

    def _connected(self) -> Client:
        if self._client is None:
            raise RuntimeError("use the ElicitingClient inside `async with`")
        return self._client

    def _asker_for(self, call: CallInFlight | None) -> Asker:
        info = self._server_info
        return Asker(
            server_name=info.name if info is not None else _label(self.target),
            server_version=(info.version or None) if info is not None else None,
            server_title=info.title if info is not None else None,
            tool=call.name if call is not None and call.kind == "tool" else None,
            prompt=call.name if call is not None and call.kind == "prompt" else None,
            endpoint=self.endpoint,
            resource=call.name if call is not None and call.kind == "resource" else None,
        )

    # -- calls ------------------------------------------------------------------------------------

    async def list_tools(self) -> ListToolsResult:
        client = self._connected()
        with _losing_connection():
            listing = await self._watch.guard(lambda: client.list_tools(cache_mode="refresh"))
        for tool in listing.tools:
            if tool.execution is not None and tool.execution.task_support is not None:
                self._task_support[tool.name] = tool.execution.task_support
        return listing

    def _runs_as_legacy_task(self, tool: str) -> bool:
        """Whether a 2025-11-25 call of `tool` asks for a task: the server declared task-augmented tool calls
        and listed the tool as supporting them (never a guess: a tool not listed runs on the call)."""
        client = self._client
        declared = client.session.server_capabilities if client is not None else None
        tasks = declared.tasks if declared is not None else None
        calls = tasks.requests.tools.call if tasks and tasks.requests and tasks.requests.tools else None
        return calls is not None and self._task_support.get(tool) in ("optional", "required")

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        """Call a tool; the person is asked whatever the server needs, on whatever era was negotiated.

        Raises `UrlFlowStopped` when a URL flow the call waits on was declined on the `-32042` path or
        cancelled, `CallStopped` when the host stopped it in still-waiting rounds with no flow of its own
        (`rounds`), `UrlStillRequired` when a `-32042` server keeps asking for flows already done,
        `StillWaiting` / `TooManyRounds` when the rounds go on past the pacing's limits, `QuestionRefused`
        when a 2026-07-28 round asks what the kit may not show, `ServerSilent` when the server went quiet,
        `ConnectionLost` when it went away, `UnknownResultType`, and the server's own `MCPError`s.
        """
        session, call = self.session, CallInFlight("tool", name)

        async def send(responses: InputResponses | None, state: str | None) -> CallToolResult | InputRequiredResult:
            try:
                result = await session.call_tool(
                    name,
                    arguments,
                    input_responses=responses,
                    request_state=state,
                    allow_input_required=True,
                    allow_claimed=self._declares_tasks,
                )
            except MCPError as error:
                if (created := legacy_task(error)) is None:
                    raise
                return await self.tasks.follow_legacy(created, call)
            if isinstance(result, CreatedTask):
                return await self.tasks.follow(result.task_id, call, result)
            return result  # type: ignore[return-value]

        return await self._run(call, send)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> GetPromptResult:
        """Get a prompt; a prompt that asks the person goes through the same rounds as a tool."""
        session = self.session

        async def send(responses: InputResponses | None, state: str | None) -> GetPromptResult | InputRequiredResult:
            return await session.get_prompt(
                name, arguments, input_responses=responses, request_state=state, allow_input_required=True
            )

        return await self._run(CallInFlight("prompt", name), send)

    async def read_resource(self, uri: str) -> ReadResourceResult:
        """Read a resource; a resource that asks the person goes through the same rounds as a tool."""
        session = self.session

        async def send(responses: InputResponses | None, state: str | None) -> ReadResourceResult | InputRequiredResult:
            return await session.read_resource(
                uri, input_responses=responses, request_state=state, allow_input_required=True
            )

        return await self._run(CallInFlight("resource", uri), send)

    async def _run(self, call: CallInFlight, send: Send[R]) -> R:
        guarded = self._guarded(send, call)
        self._calls.add(call)
        try:
            with call.scope:
                return await self._attempts(call, guarded)
            if call.stopped_by is None:
                raise CallStopped(call.kind, call.name, call.stop_reason)
            raise UrlFlowStopped(self.pending.get(call.stopped_by), call.stop_reason)
        except StillWaiting as waited:
            self.pending.finish(
                call.flows, FlowStatus.FAILED, f"the server was still waiting after {waited.seconds:.0f} s"
            )
            raise
        finally:
            self._calls.discard(call)
            left = [flow_id for flow_id in call.guessed if self._flow_status(flow_id) is FlowStatus.AWAITING_CONSENT]
            self._elicitor.unattributed.extend(left)
            self.pending.finish(
                [flow_id for flow_id in call.flows if flow_id not in left], FlowStatus.ENDED, "the call finished"
            )
            self.pending.release(call.flows, call)

    async def _attempts(self, call: CallInFlight, send: Send[R]) -> R:
        url_rounds = 0
        while True:
            try:
                first = await self._first_request(call, send)
                return await drive(
                    first,
                    send=send,
                    dispatch=lambda key, request: self._dispatch(call, key, request),
                    call=call,
                    pacing=self.pacing,
                    clock=self._clock,
                    sleep=self._sleep,
                    rounds=self.rounds,
                )
            except Exception as raised:
                if (lost := _lost_connection(raised)) is not None:
                    raise ConnectionLost(_detail(lost)) from lost
                error = _unwrap(raised)
                if isinstance(error, MCPError) and (result_type := unknown_result_type(error)) is not None:
                    raise UnknownResultType(result_type) from None
                if not (
                    isinstance(error, MCPError)
                    and error.code == URL_ELICITATION_REQUIRED
                    and self.protocol_version == URL_REQUIRED_VERSION
                ):
                    if error is not raised and isinstance(error, MCPError):
                        raise error from None
                    raise
                url_rounds += 1
                if url_rounds > self.pacing.max_input_rounds:
                    raise TooManyRounds(self.pacing.max_input_rounds) from None
                await fulfil_url_required(
                    error,
                    call=call,
                    elicitor=self._elicitor,
                    connection=self,
                    max_wait=self.pacing.max_wait,
                    clock=self._clock,
                    sleep=self._sleep,
                )

    async def _first_request(self, call: CallInFlight, send: Send[R]) -> R | InputRequiredResult:
        """The call's request; on a handshake era, sent again under a new id each time the host retries it.

        A 2025-era server holds the request open while a URL flow runs; if its completion signal is lost,
        the person's "I'm done" must reach the server somehow, and re-issuing the call is the one way the
        protocol has: the SDK cancels the request in flight (`notifications/cancelled`), and a durable
        server attaches the new request to the same operation, where it finds the flow completed.

        Only once the person is past consent (`_may_reissue`), and only when the request in flight was
        really cancelled with no answer taken: an answer that arrived first is the call's result. Off with
        `Pacing(reissue_held_calls=False)`.
        """
        if self.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS or not self.pacing.reissue_held_calls:
            return await send(None, None)
        while True:
            held = anyio.CancelScope()
            answers: list[R | InputRequiredResult] = []
            call.hold_request(held, lambda: self._may_reissue(call))
            try:
                with held:
                    answers.append(await send(None, None))
            finally:
                call.hold_request(None)
            if answers:
                return answers[0]
            if not held.cancelled_caught:
                raise RuntimeError("the held request ended with neither an answer nor a cancellation")
            log.info("re-issuing the %s call %r at the host's request", call.kind, call.name)

    def _may_reissue(self, call: CallInFlight) -> bool:
        """Whether re-issuing a held call makes sense: the person consented (a flow of the call is open or
        completed) and is not being asked anything of it (a re-issue would withdraw that question)."""
        statuses = [self._flow_status(flow_id) for flow_id in call.flows]
        return FlowStatus.AWAITING_CONSENT not in statuses and any(
            status in (FlowStatus.OPEN, FlowStatus.COMPLETED) for status in statuses
        )

    def _guarded(self, send: Send[R], call: CallInFlight) -> Send[R]:
        """One round under the silence watch, re-sent once after a tool listing refresh on `-32020`.

        The watch also leaves the round alone while the call holds an open URL flow: a 2025-11-25 server
        holds the call open, silent, while the person works in the browser (bounded: see `_browser_open`).
        """
        client = self._connected()

        def busy() -> bool:
            return self._browser_open(call)

        async def round_trip(responses: InputResponses | None, state: str | None) -> R | InputRequiredResult:
            try:
                return await self._watch.guard(lambda: send(responses, state), busy)
            except MCPError as mismatch:
                if mismatch.code != HEADER_MISMATCH or client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                    raise
                await self._watch.guard(lambda: client.list_tools(cache_mode="refresh"))
                return await self._watch.guard(lambda: send(responses, state), busy)

        return round_trip

    def _browser_open(self, call: CallInFlight) -> bool:
        """Whether a person may be working in the browser for this call: one of its flows, or a flow of
        this connection that could not be tied to a call (it may be this one's), is open, and was opened
        less than `_browser_limit` seconds ago. Past that, a server that took consent and then said nothing
        (no completion, no result) gets the ordinary silence limit, and an unattributed flow keeps no call
        alive any more."""
        unattributed = self._elicitor.unattributed
        unattributed[:] = [flow_id for flow_id in unattributed if self._flow_status(flow_id) in _ACTIVE]
        now, limit = self._clock(), self._browser_limit()
        for flow_id in (*call.flows, *unattributed):
            try:
                flow = self.pending.get(flow_id)
            except KeyError:
                continue
            opened = flow.opened_at
            if flow.status is FlowStatus.OPEN and opened is not None and (limit is None or now - opened < limit):
                return True
        return False

    def _browser_limit(self) -> float | None:
        """Seconds a person counts as busy in the browser after opening a URL (None only with no silence
        limit at all, when the watch cuts nothing anyway)."""
        if self.pacing.max_wait is not None:
            return self.pacing.max_wait
        if self.timeouts.request is None:
            return None
        return BROWSER_LIMIT_FACTOR * self.timeouts.request

    async def _dispatch(self, call: CallInFlight, key: str, request: InputRequest) -> InputResponse | ErrorData:
        """One 2026-07-28 input request: elicitations through the kit, sampling and roots through the SDK."""
        session = self.session
        if not isinstance(request, ElicitRequest):
            context = ClientRequestContext(
                session=session, request_id=key, meta=request.params.meta if request.params else None
            )
            return await session.dispatch_input_request(context, request)
        params = request.params
        if isinstance(params, ElicitRequestURLParams):
            consented = call.consented.get(key)
            if (
                consented is not None
                and consented[0] == params.url
                and self._flow_status(consented[1]) is FlowStatus.OPEN
            ):
                return ElicitResult(action="accept")
            answer, flow = await self._elicitor.url(params, call, input_key=key)
            if flow is not None and flow.status is FlowStatus.OPEN:
                call.consented[key] = (params.url, flow.id)
        else:
            assert isinstance(params, ElicitRequestFormParams)
            answer = await self._elicitor.form(params, call)
        if isinstance(answer, ErrorData):
            raise QuestionRefused(key, params.message, answer.message)
        return answer

    def _flow_status(self, flow_id: str) -> FlowStatus | None:
        try:
            return self.pending.get(flow_id).status
        except KeyError:
            return None

    # -- what the SDK hands over ------------------------------------------------------------------

    async def _on_elicitation(
        self, context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
    ) -> ElicitResult | ErrorData:
        """A 2025-era `elicitation/create`: for the call in flight if there is exactly one, else unattributed.

        The SDK hands over no reference to the request the question belongs to (`ClientRequestContext`
        has the question's own id only), so the one call in flight is a guess: it names the call to the
        person and lets the host's controls reach it, but when that call ends a dialog still on screen is
        left to the person (the flow becomes unattributed) instead of being withdrawn.
        """
        version = self._client.protocol_version if self._client is not None else None
        if isinstance(params, ElicitRequestURLParams) and version is not None and not has_url_mode(version):
            log.warning("refused a URL elicitation: protocol %s has no URL mode", version)
            return ErrorData(code=INVALID_PARAMS, message=f"protocol {version} has no URL-mode elicitation")
        only = next(iter(self._calls)) if len(self._calls) == 1 else None
        return await self._elicitor.answer(params, only)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, ElicitCompleteNotification):
            flow = self.pending.completed(self, message.params.elicitation_id)
            if flow is not None:
                for call in self._calls:
                    if flow.id in call.flows:
                        call.wake()
        if self.sdk.message_handler is not None:
            await self.sdk.message_handler(message)


_ACTIVE = (FlowStatus.AWAITING_CONSENT, FlowStatus.OPEN)


@asynccontextmanager
async def _task_group() -> AsyncIterator[TaskGroup]:
    """The kit's task group, entered as a generator so that an exception it is handed is never raised again.

    The exit stack closes the connection before the group, and in a cancelled task that close ends in a
    cancellation of its own, which the stack hands to the group. anyio's group raises a cancellation it is
    handed (`raise exc_val`), and the raise sets that exception's `__context__` to the one the block raised;
    the stack takes what comes out for a new exception and points the end of its context chain at the one it
    handed in, which is itself. A cancellation that is its own context holds anyio's event loop for good when
    the task ends (`task_done` follows the chain). Through a generator, the same exception coming back out
    of the group means "not suppressed", as under a nested `async with`: the stack sees nothing raised.
    """
    async with anyio.create_task_group() as group:
        yield group


class _Connection:
    """The SDK client, kept open in a task of its own.

    The SDK's client leaves task groups open when it is entered, and an anyio cancel scope must be left in
    the order it was entered: a timeout around entering the client in the caller's task could never be
    left. Entered in a task of its own, the whole set-up (`initialize` or `server/discover`, and asking the
    server's name) can be cancelled when it takes too long, and the client is closed in that same task.
    """

    def __init__(self, client: Client, identify: Callable[[Client], Awaitable[Implementation | None]]) -> None:
        self._client = client
        self._identify = identify
        self._closing = anyio.Event()
        self._closed = anyio.Event()
        self._started = False

    async def hold(self, *, task_status: TaskStatus[Implementation | None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._started = True
        try:
            async with self._client as client:
                task_status.started(await self._identify(client))
                await self._closing.wait()
        finally:
            self._closed.set()

    async def close(self) -> None:
        self._closing.set()
        if self._started:
            await self._closed.wait()


def kit_http_client(
    *, headers: Mapping[str, str] | None = None, bearer_token: str | None = None, auth: httpx2.Auth | None = None
) -> httpx2.AsyncClient:
    """The HTTP client the kit builds for a URL target: no read timeout (the silence watch decides)."""
    sent = dict(headers or {})
    if bearer_token is not None:
        sent["Authorization"] = f"Bearer {bearer_token}"
    return httpx2.AsyncClient(timeout=httpx2.Timeout(HTTP_CONNECT_TIMEOUT, read=None), headers=sent, auth=auth)


def _unwrap(error: BaseException) -> BaseException:
    """In-process transports surface a server's JSON-RPC error inside single-exception groups."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _failures(error: BaseException) -> list[BaseException]:
    """The errors inside (nested) exception groups, cancellations left out: they follow a failure elsewhere."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _failures(inner)]
    return [] if isinstance(error, anyio.get_cancelled_exc_class()) else [error]


_TRANSPORT_ENDED = (
    httpx2.TransportError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
)


def _is_connection_failure(error: BaseException, *, connecting: bool) -> bool:
    """Whether `error` says the connection ended. While connecting, an HTTP endpoint nobody answers at was
    never there, which is not losing it (the caller sees the transport's own error)."""
    if isinstance(error, KitError):
        return False
    if isinstance(error, MCPError):
        return error.code == CONNECTION_CLOSED
    if connecting and isinstance(error, httpx2.ConnectError | httpx2.TimeoutException):
        return False
    return isinstance(error, _TRANSPORT_ENDED)


def _lost_connection(error: BaseException, *, connecting: bool = False) -> BaseException | None:
    """The first failure inside `error` when every one says the connection ended, else None."""
    found = _failures(error)
    if found and all(_is_connection_failure(leaf, connecting=connecting) for leaf in found):
        return found[0]
    return None


def _detail(error: BaseException) -> str:
    if isinstance(error, MCPError):
        return error.error.message
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


@contextmanager
def _losing_connection() -> Iterator[None]:
    try:
        yield
    except Exception as raised:
        if (lost := _lost_connection(raised)) is not None:
            raise ConnectionLost(_detail(lost)) from lost
        raise


def _raise_as_kit_error(failed: BaseException, *, connecting: bool, wanted: str | None = None) -> None:
    """Raise what `failed` means as the kit's own error when it has one; return when it has none.

    A kit error alone inside task groups comes out alone; a server naming the versions it speaks
    (`-32022`) while `wanted` was required is `UnsupportedEra`; a connection that ended is `ConnectionLost`.
    """
    found = _failures(failed)
    if len(found) == 1 and isinstance(found[0], KitError):
        raise found[0] from found[0].__cause__
    for leaf in found:
        if wanted is not None and isinstance(leaf, MCPError) and leaf.code == UNSUPPORTED_PROTOCOL_VERSION:
            try:
                supported = UnsupportedProtocolVersionErrorData.model_validate(leaf.error.data).supported
            except ValidationError:
                continue
            raise UnsupportedEra(wanted, supported) from leaf
    if (lost := _lost_connection(failed, connecting=connecting)) is not None:
        raise ConnectionLost(_detail(lost), connecting=connecting) from lost


def _label(target: Target) -> str:
    """A name for a server that did not name itself: its URL's host, its command, or its object's name."""
    if isinstance(target, Http):
        return urlsplit(target.url).netloc or target.url
    if isinstance(target, Stdio):
        return target.command
    if isinstance(target, Server | MCPServer):
        return target.name
    return "MCP server"


def _endpoint(target: Target) -> str | None:
    """Where the server is, as the host knows it (its own `endpoint` when given): its URL (no credentials,
    query or fragment) or its command line."""
    if isinstance(target, Http | Stdio) and target.endpoint is not None:
        return target.endpoint
    if isinstance(target, Http):
        parts = urlsplit(target.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
        shown_host = f"[{host}]" if ":" in host else host
        return f"{parts.scheme}://{shown_host}{port}{parts.path}"
    if isinstance(target, Stdio):
        return shlex.join([target.command, *target.args])
    if isinstance(target, Server | MCPServer):
        return f"in-process server {target.name!r}"
    return None
