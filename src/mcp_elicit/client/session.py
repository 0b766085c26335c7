"""`ElicitingClient`: an MCP client whose elicitations reach a person safely, on every protocol era.

    async with ElicitingClient("https://mcp.example/mcp", handler, bearer_token=token) as client:
        result = await client.call_tool("deploy", {"service": "payments"})

It is the SDK's `mcp.Client` behind the kit's transport wrapper (`transport.KitTransport`), and it adds:

- the handler's modes, and only those, declared on every era (`capabilities`);
- every question put to the handler through one path (`elicitor.Elicitor`): undeclared modes refused,
  form answers checked, URLs reviewed and opened only after consent, decline and cancel kept apart;
- its own 2026-07-28 round loop paced for a person (`mrtr_loop`), and the 2025-11-25 `-32042` path
  (`url_required`), both steerable through `pending` (`PendingFlows`: list, retry now, cancel);
- no read timeout cutting a call while a person decides (`watch.SilenceWatch`): the server may stay
  silent `request_timeout` seconds, counted only while nobody is deciding.

Eras: `"auto"` negotiates (2026-07-28 if the server offers it, else the `initialize` handshake),
`"2025-11-25"` pins the handshake (the SDK offers 2025-11-25; the server may settle on 2025-06-18), and
`"2026-07-28"` pins the stateless era. `-32042` is handled on handshake eras only: 2026-07-28 forbids it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client import ClientRequestContext, ClientSession, Transport
from mcp.client._memory import InMemoryTransport  # the SDK's in-process transport, as Client builds it itself
from mcp.client.session import IncomingMessage, ListRootsFnT, MessageHandlerFnT, SamplingFnT
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    HEADER_MISMATCH,
    SERVER_INFO_META_KEY,
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
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_elicit import __version__
from mcp_elicit.client.calls import CallInFlight, Sleep
from mcp_elicit.client.elicitor import Elicitor
from mcp_elicit.client.errors import StillWaiting, UnknownResultType, UrlFlowStopped
from mcp_elicit.client.handler import Asker, ElicitationHandler
from mcp_elicit.client.mrtr_loop import Pacing, drive
from mcp_elicit.client.opener import UrlOpener, system_browser
from mcp_elicit.client.pending import FlowStatus, PendingFlows
from mcp_elicit.client.transport import KitTransport, unknown_result_type
from mcp_elicit.client.url_required import fulfil_url_required
from mcp_elicit.client.watch import SilenceWatch

Era = Literal["auto", "2025-11-25", "2026-07-28"]
SDK_MODE: dict[str, str] = {"auto": "auto", "2025-11-25": "legacy", "2026-07-28": "2026-07-28"}
DEFAULT_REQUEST_TIMEOUT = 1800.0
"""Seconds a server may send nothing on a call while no person is deciding (30 minutes)."""
HTTP_CONNECT_TIMEOUT = 30.0
"""Connect, write and pool timeout of the kit's own HTTP client; it has no read timeout (see `watch`)."""

CLIENT_INFO = Implementation(name="mcp-elicit", version=__version__)

Target = str | Sequence[str] | StdioServerParameters | Server[Any] | MCPServer | Transport
R = TypeVar("R")


class ElicitingClient:
    """An MCP client for one server; enter it with `async with`, then call tools and prompts.

    `target`: an `http(s)://` MCP endpoint (streamable HTTP), a stdio command (`["cmd", "arg", ...]` or
    `StdioServerParameters`), an in-process `Server` / `MCPServer`, or any SDK `Transport`.
    HTTP only: `bearer_token` (sent as `Authorization: Bearer ...`), `auth` (an `httpx2.Auth`, e.g. the
    SDK's OAuth provider), `headers`, or a ready `http_client` (then its timeouts are the caller's choice).
    `opener` is the only thing that ever touches a URL-mode URL, after consent (default: system browser).
    `pending` may be shared by several clients, so one host view lists the flows of all its servers.
    `clock` and `sleep` drive the silence watch and the pacing; tests replace them.
    """

    def __init__(
        self,
        target: Target,
        handler: ElicitationHandler,
        *,
        era: Era = "auto",
        bearer_token: str | None = None,
        auth: httpx2.Auth | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx2.AsyncClient | None = None,
        opener: UrlOpener = system_browser,
        pending: PendingFlows | None = None,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        pacing: Pacing | None = None,
        sampling_callback: SamplingFnT | None = None,
        list_roots_callback: ListRootsFnT | None = None,
        message_handler: MessageHandlerFnT | None = None,
        client_info: Implementation | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        if era not in SDK_MODE:
            raise ValueError(f"era must be one of {sorted(SDK_MODE)}, not {era!r}")
        if isinstance(target, str) and urlsplit(target).scheme not in ("http", "https"):
            raise ValueError(f"a URL target must be http:// or https://, not {target!r}")
        http_options = bearer_token is not None or auth is not None or headers is not None
        if (http_options or http_client is not None) and not isinstance(target, str):
            raise ValueError("bearer_token, auth, headers and http_client apply to an http(s) URL target only")
        if http_options and http_client is not None:
            raise ValueError("pass bearer_token, auth and headers, or a configured http_client, not both")
        if bearer_token is not None and auth is not None:
            raise ValueError("pass bearer_token or auth, not both")
        self.target = target
        self.handler = handler
        self.era = era
        self.pending = pending if pending is not None else PendingFlows()
        self.pacing = pacing if pacing is not None else Pacing()
        self._headers = dict(headers or {})
        self._bearer_token = bearer_token
        self._auth = auth
        self._http_client = http_client
        self._sampling_callback = sampling_callback
        self._list_roots_callback = list_roots_callback
        self._message_handler = message_handler
        self._client_info = client_info
        self._clock = clock
        self._sleep = sleep
        self._watch = SilenceWatch(request_timeout, clock)
        self._elicitor = Elicitor(
            handler,
            self.pending,
            opener,
            connection=self,
            asker=self._asker_for,
            protocol_version=lambda: self._client.protocol_version if self._client is not None else None,
            person_deciding=self._watch.person_deciding,
        )
        self._client: Client | None = None
        self._stack: AsyncExitStack | None = None
        self._server_info: Implementation | None = None
        self._calls: set[CallInFlight] = set()

    # -- connecting -------------------------------------------------------------------------------

    async def __aenter__(self) -> ElicitingClient:
        if self._stack is not None:
            raise RuntimeError("this ElicitingClient is already open")
        stack = AsyncExitStack()
        try:
            watcher = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(watcher.cancel_scope.cancel)
            watcher.start_soon(self._watch.run)
            transport = KitTransport(await self._transport(stack), self.handler.modes, on_inbound=self._watch.heard)
            client = Client(
                transport,
                mode=SDK_MODE[self.era],
                elicitation_callback=self._on_elicitation,
                message_handler=self._on_message,
                sampling_callback=self._sampling_callback,
                list_roots_callback=self._list_roots_callback,
                client_info=self._client_info or CLIENT_INFO,
            )
            await stack.enter_async_context(client)
            self._client = client
            self._server_info = await self._identify(client)
        except BaseException:
            self._client = None
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.__aexit__(exc_type, exc, tb)
        finally:
            self._client = None
            self.pending.finish(self.pending.of_connection(self), FlowStatus.ENDED, "the client closed")

    async def _transport(self, stack: AsyncExitStack) -> AbstractAsyncContextManager[Any]:
        target = self.target
        if isinstance(target, str):
            http = self._http_client
            if http is None:
                http = await stack.enter_async_context(
                    kit_http_client(headers=self._headers, bearer_token=self._bearer_token, auth=self._auth)
                )
            return streamable_http_client(target, http_client=http)
        if isinstance(target, StdioServerParameters):
            return stdio_client(target)
        if isinstance(target, Server | MCPServer):
            return InMemoryTransport(target)
        if isinstance(target, Sequence):
            if not target or not all(isinstance(part, str) for part in target):
                raise ValueError("a stdio command is a non-empty list of strings")
            return stdio_client(StdioServerParameters(command=target[0], args=list(target[1:])))
        return target

    async def _identify(self, client: Client) -> Implementation | None:
        """The server's name for the person: from `initialize`, or `server/discover` (asked once if pinned)."""
        if client.server_info is not None:
            return client.server_info
        version = client.protocol_version
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
        )

    # -- calls ------------------------------------------------------------------------------------

    async def list_tools(self) -> ListToolsResult:
        client = self._connected()
        return await self._watch.guard(lambda: client.list_tools(cache_mode="refresh"))

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        """Call a tool; the person is asked whatever the server needs, on whatever era was negotiated.

        Raises `UrlFlowStopped` when a URL flow the call waits on was declined on the `-32042` path or
        cancelled, `StillWaiting` / `TooManyRounds` when the 2026-07-28 rounds go on past the pacing's limits,
        `ServerSilent` when the server went quiet, `UnknownResultType`, and the server's own `MCPError`s.
        """
        session = self.session

        async def send(responses: InputResponses | None, state: str | None) -> CallToolResult | InputRequiredResult:
            return await session.call_tool(
                name, arguments, input_responses=responses, request_state=state, allow_input_required=True
            )

        return await self._run(CallInFlight("tool", name), send)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> GetPromptResult:
        """Get a prompt; a prompt that asks the person goes through the same rounds as a tool."""
        session = self.session

        async def send(responses: InputResponses | None, state: str | None) -> GetPromptResult | InputRequiredResult:
            return await session.get_prompt(
                name, arguments, input_responses=responses, request_state=state, allow_input_required=True
            )

        return await self._run(CallInFlight("prompt", name), send)

    async def _run(
        self,
        call: CallInFlight,
        send: Callable[[InputResponses | None, str | None], Awaitable[R | InputRequiredResult]],
    ) -> R:
        guarded = self._guarded(send)
        self._calls.add(call)
        try:
            with call.scope:
                return await self._attempts(call, guarded)
            assert call.stopped_by is not None
            raise UrlFlowStopped(self.pending.get(call.stopped_by))
        except StillWaiting as waited:
            self.pending.finish(
                call.flows, FlowStatus.FAILED, f"the server was still waiting after {waited.seconds:.0f} s"
            )
            raise
        finally:
            self._calls.discard(call)
            self.pending.finish(call.flows, FlowStatus.ENDED, "the call finished")

    async def _attempts(
        self,
        call: CallInFlight,
        send: Callable[[InputResponses | None, str | None], Awaitable[R | InputRequiredResult]],
    ) -> R:
        while True:
            try:
                first = await send(None, None)
                return await drive(
                    first,
                    send=send,
                    dispatch=lambda key, request: self._dispatch(call, key, request),
                    call=call,
                    pacing=self.pacing,
                    clock=self._clock,
                    sleep=self._sleep,
                )
            except Exception as raised:
                error = _unwrap(raised)
                if isinstance(error, MCPError) and (result_type := unknown_result_type(error)) is not None:
                    raise UnknownResultType(result_type) from None
                if not (
                    isinstance(error, MCPError)
                    and error.code == URL_ELICITATION_REQUIRED
                    and self.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
                ):
                    if error is not raised and isinstance(error, MCPError):
                        raise error from None
                    raise
                await fulfil_url_required(
                    error,
                    call=call,
                    elicitor=self._elicitor,
                    connection=self,
                    deadline=self.pacing.deadline,
                    clock=self._clock,
                    sleep=self._sleep,
                )

    def _guarded(
        self, send: Callable[[InputResponses | None, str | None], Awaitable[R]]
    ) -> Callable[[InputResponses | None, str | None], Awaitable[R]]:
        """One round under the silence watch, re-sent once after a tool listing refresh on `-32020`."""
        client = self._connected()

        async def round_trip(responses: InputResponses | None, state: str | None) -> R:
            try:
                return await self._watch.guard(lambda: send(responses, state))
            except MCPError as mismatch:
                if mismatch.code != HEADER_MISMATCH or client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                    raise
                await self._watch.guard(lambda: client.list_tools(cache_mode="refresh"))
                return await self._watch.guard(lambda: send(responses, state))

        return round_trip

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
            if consented is not None and consented[0] == params.url and self._flow_open(consented[1]):
                return ElicitResult(action="accept")
            answer, flow = await self._elicitor.url(params, call, input_key=key)
            if flow is not None and flow.status is FlowStatus.OPEN:
                call.consented[key] = (params.url, flow.id)
            return answer
        assert isinstance(params, ElicitRequestFormParams)
        return await self._elicitor.form(params, call)

    def _flow_open(self, flow_id: str) -> bool:
        try:
            return self.pending.get(flow_id).status is FlowStatus.OPEN
        except KeyError:
            return False

    # -- what the SDK hands over ------------------------------------------------------------------

    async def _on_elicitation(
        self, context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
    ) -> ElicitResult | ErrorData:
        """A 2025-era `elicitation/create`: for the call in flight if there is exactly one, else unattributed."""
        only = next(iter(self._calls)) if len(self._calls) == 1 else None
        return await self._elicitor.answer(params, only)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, ElicitCompleteNotification):
            flow = self.pending.completed(self, message.params.elicitation_id)
            if flow is not None:
                for call in self._calls:
                    if flow.id in call.flows:
                        call.wake()
        if self._message_handler is not None:
            await self._message_handler(message)


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


def _label(target: Target) -> str:
    """A name for a server that did not name itself: its URL's host, its command, or its object's name."""
    if isinstance(target, str):
        return urlsplit(target).netloc or target
    if isinstance(target, StdioServerParameters):
        return target.command
    if isinstance(target, Server | MCPServer):
        return target.name
    if isinstance(target, Sequence) and target:
        return str(target[0])
    return "MCP server"
