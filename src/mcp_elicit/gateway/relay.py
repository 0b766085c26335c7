"""The gateway's downstream side: a lowlevel `Server` whose handlers relay each request to the upstream as it
came, and whatever the upstream sends back (results, progress, questions, logs, list changes) to the client.

A relayed request keeps its wire params, less the `_meta` keys that belong to the downstream connection (its
envelope, its progress token, its log level where the upstream session has its own); the upstream session
stamps its own. Results come back as the upstream's raw JSON, checked by the SDK against the upstream session's
protocol version, then shaped by the runner for the downstream's version: one validation each way, and
whatever the tool returned (`_meta`, `structuredContent`, `isError`) goes through untouched. A plain relay
touches no store.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from datetime import timedelta
from importlib.metadata import version
from typing import Any, get_args

import anyio
import anyio.abc
from mcp import Client
from mcp.client.subscriptions import ServerEvent
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.streamable_http import EventStore
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ToolsListChanged, event_to_notification
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    LOG_LEVEL_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    CallToolRequestParams,
    ClientCapabilities,
    CompleteRequestParams,
    CreateMessageRequest,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitCompleteNotification,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    GetPromptRequestParams,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    LoggingLevel,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    NotificationParams,
    PaginatedRequestParams,
    PromptListChangedNotification,
    ReadResourceRequestParams,
    Request,
    ResourceListChangedNotification,
    ServerCapabilities,
    ServerNotification,
    SetLevelRequestParams,
    SubscriptionsListenRequestParams,
    Tool,
    ToolListChangedNotification,
    ToolsCapability,
)
from mcp_types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, RootModel, ValidationError
from starlette.applications import Starlette

from mcp_elicit.approvals import GatedTool, GateRefused
from mcp_elicit.gateway.connecting import CONNECT_STATE, Connecting
from mcp_elicit.gateway.credentials import CONNECT_TOOL
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.gateway.gating import Gates, assign_gates
from mcp_elicit.gateway.live import ask_client
from mcp_elicit.gateway.questions import TOOLS_CALL, Ended, Questions, fresh_holder
from mcp_elicit.gateway.remembered import NOTICE_TIMEOUT, REMEMBERED, Remembered
from mcp_elicit.gateway.routing import Handler, Routes
from mcp_elicit.gateway.upstream import (
    ENDED,
    FORGOTTEN,
    NO_BACK_CHANNEL,
    Call,
    Deadline,
    Lane,
    Pool,
    Upstream,
    listed_changes,
    running,
    timed_out,
)
from mcp_elicit.server.config import RequestState, Timing
from mcp_elicit.server.fallback import Fallback
from mcp_elicit.server.flow import DEFAULT_FORM_TTL
from mcp_elicit.server.identity import IdentityPolicy
from mcp_elicit.server.runtime import Elicitation
from mcp_elicit.server.sse_events import RETRY_INTERVAL_MS, MemoryEventStore
from mcp_elicit.store import Store
from mcp_elicit.web.vault import Vault

log = logging.getLogger(__name__)

GATEWAY_NAME = "mcp-elicit-gateway"
STREAM = "stream"
"""The holder of a stdio (or in-memory) connection: a process serves one such connection at a time."""
_CONNECTION_KEYS = frozenset({PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY})
UPSTREAM_STATE = "upstream:"
"""What the `requestState` of a round a 2026-07-28 upstream put out starts with, in the gateway's sealed state:
the gateway's own rounds carry their operation's state instead."""
URL_FLOW_TTL = 3600.0
"""Seconds after a URL question is relayed during which the upstream's notice that it is complete is passed
on (to the client asked): a sign-in or payment is done within the hour, or not through this gateway."""


class _Forwarded(Request[dict[str, Any] | None, str]):
    """A request with its wire params as they came: fields the SDK's typed params do not know go through too."""


class _Raw(RootModel[dict[str, Any]]):
    """A result as the upstream sent it (after the SDK checked it against the session's protocol version)."""


class GatewayServer(Server[Any]):
    """The SDK's lowlevel server, declaring what the upstream declares (what any upstream declares, of several).

    Capabilities derive from the handlers the gateway registers once it knows the upstream's; the one override
    is the list-change flags, which the SDK takes from `NotificationOptions` on the handshake (passed by no
    one on streamable HTTP) and from `subscriptions/listen` alone on 2026-07-28, where it would also claim
    resource subscriptions, which this gateway does not relay. Served over streamable HTTP it keeps its SSE events
    (`mcp_elicit.server.sse_events`): a call waiting on an upstream, or on a person, outlives its client's stream
    dropping.
    """

    def __init__(self, gateway: Gateway) -> None:
        super().__init__(
            GATEWAY_NAME,
            version=version("mcp-elicit"),
            lifespan=lambda _: gateway.serving(),
            # What a 2026-07-28 client is told of a result the upstream gave no freshness for (a handshake
            # upstream's): stale at once, and for the one who asked only.
            cache_hints=dict.fromkeys(get_args(CacheableMethod), CacheHint(ttl_ms=0, scope="private")),
        )
        self._gateway = gateway

    def streamable_http_app(
        self, *, event_store: EventStore | None = None, retry_interval: int | None = None, **options: Any
    ) -> Starlette:
        return super().streamable_http_app(
            event_store=event_store or MemoryEventStore(),
            retry_interval=RETRY_INTERVAL_MS if retry_interval is None else retry_interval,
            **options,
        )

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        if notification_options is None:
            tools, prompts, resources = self._gateway.announces
            notification_options = NotificationOptions(
                prompts_changed=prompts, resources_changed=resources, tools_changed=tools
            )
        return super().create_initialization_options(notification_options, experimental_capabilities, extensions)

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> ServerCapabilities:
        capabilities = super().get_capabilities(
            notification_options, experimental_capabilities, extensions, protocol_version=protocol_version
        )
        if protocol_version in MODERN_PROTOCOL_VERSIONS:
            tools, prompts, resources = self._gateway.announces
            if capabilities.tools is not None:
                capabilities.tools.list_changed = tools
            if capabilities.prompts is not None:
                capabilities.prompts.list_changed = prompts
            if capabilities.resources is not None:
                capabilities.resources.list_changed = resources
        if capabilities.resources is not None:
            capabilities.resources.subscribe = False
        return capabilities


class Gateway:
    """Upstream servers relayed to any MCP client, on either protocol era: one as it is, or several (or one
    with a prefix) each under its prefix (`mcp_elicit.gateway.routing`).

    `server` is what to serve (stdio, streamable HTTP, or in process for tests); it connects to the upstreams
    when it starts (its lifespan), unless `running()` already did. `store` is where the gateway keeps durable
    state: the upstream's questions during a `tools/call` become decisions there (`mcp_elicit.gateway.questions`),
    sealed into 2026-07-28 rounds with `request_state`'s keys, lasting as `timing` says, and bound to the principal
    `identity` says a call runs for, open `question_ttl` (a form's; a URL question's is `DEFAULT_URL_TTL`); a call
    that asks nothing never touches it. Without a store, questions are
    relayed live only, to a client that can be asked on its call.

    `elicitation` is the runtime to keep them with instead of one made from those (a signed-in deployment's, with
    its public URL for the decision pages: `mcp_elicit.gateway.deployment`); `fallback` says what a client that
    cannot be asked gets. With an identity (`identity`, or the given runtime's), every request is bound to its
    principal on the way upstream too: a lane carries one principal's calls at a time, and a handshake session
    one principal's for its whole life (`Pool`).

    An upstream with a credential (`mcp_elicit.gateway.credentials`) needs such a runtime and `vault`, where each
    person's secret is kept once they connected it on the pages (`mcp_elicit.gateway.connecting`); it is reached
    as each person connects it, so it serves tools only (what it serves besides cannot be known at start).
    """

    def __init__(
        self,
        upstreams: Upstream | Sequence[Upstream],
        *,
        store: Store | None = None,
        request_state: RequestState | None = None,
        timing: Timing | None = None,
        identity: IdentityPolicy | None = None,
        question_ttl: timedelta = DEFAULT_FORM_TTL,
        gates: Sequence[GateTable] = (),
        elicitation: Elicitation | None = None,
        fallback: Fallback = Fallback.ERROR,
        vault: Vault | None = None,
    ) -> None:
        given = (upstreams,) if isinstance(upstreams, Upstream) else tuple(upstreams)
        if not given:
            raise ValueError("a gateway needs an upstream")
        credentialed = [index for index, upstream in enumerate(given) if upstream.credential is not None]
        if credentialed and (elicitation is None or elicitation.public_base_url is None):
            raise ValueError(
                f"upstream[{credentialed[0]}].credential: each person connects it on the gateway's pages, which need "
                "its sign-in (mcp-elicit gateway --transport streamable-http, with --public-url; in Python, "
                "build_gateway_deployment)"
            )
        if credentialed and vault is None:
            raise ValueError(
                f"upstream[{credentialed[0]}].credential: each person's credential is kept in the vault: give the "
                "gateway one (MCP_ELICIT_VAULT_KEYS)"
            )
        if elicitation is not None and (store, request_state, timing, identity) != (None, None, None, None):
            raise ValueError(
                "a gateway given its elicitation takes the store, request state, timing and identity from it"
            )
        if elicitation is not None:
            store, identity = elicitation.store, elicitation.identity
        if fallback is not Fallback.ERROR and store is None:
            raise ValueError(f"the {fallback} fallback needs a store: without one, questions are relayed live only")
        if gates and store is None:
            raise ValueError("approval gates need a store: their approvals are decisions")
        self.identity = identity
        """Whose each request is, upstream as well as in the store; `None`: lanes are not bound to principals."""
        prefixes = {upstream.name: upstream.prefix for upstream in given}
        self._gates = {name: Gates(tables, name, prefixes[name]) for name, tables in assign_gates(gates, given).items()}
        """Each upstream's gates, by its name; an upstream without gates has none here."""
        self.store = store
        self.connecting: Connecting | None = None
        """The people's credentials of upstreams that need one (none: no upstream does)."""
        if credentialed:
            assert elicitation is not None
            assert vault is not None
            self.connecting = Connecting(elicitation, vault, lambda: self.event(ToolsListChanged()))
        connecting = self.connecting
        self.pools = tuple(
            Pool(upstream, self, None if connecting is None else connecting.secrets(upstream.name))
            if upstream.credential is not None
            else Pool(upstream, self)
            for upstream in given
        )
        self.routes = Routes(self.pools, self._forward) if len(given) > 1 or given[0].prefix is not None else None
        """`None` for one upstream relayed as it is."""
        self.server = GatewayServer(self)
        self.questions: Questions | None = None
        """Where the upstream's questions on a `tools/call` become durable decisions (with a store only)."""
        if store is not None:
            if elicitation is None:
                state = request_state or RequestState(single_process=True)
                elicitation = Elicitation(store, request_state=state, timing=timing, identity=identity)
            elicitation.check_fallback(fallback)
            elicitation.install(self.server)
            self.questions = Questions(elicitation, self.send, ttl=question_ttl, fallback=fallback)
            for index, table in enumerate(gates):
                try:
                    elicitation.check_fallback(Fallback(table.fallback))
                except ValueError as error:
                    raise ValueError(f"gate[{index}].fallback: {error}") from None
        self.announces = (False, False, False)
        """Which lists (tools, prompts, resources) the gateway announces changes of: those the upstream said it
        does; behind several upstreams, every list served."""
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        self._connections: dict[Hashable, ServerSession] = {}
        """Each handshake connection's latest request session (the SDK makes one per request; any of them
        reaches the connection)."""
        self._urls: Remembered[tuple[Lane, str], ServerSession] = Remembered(URL_FLOW_TTL)
        self._level: LoggingLevel | None = None
        self._running = False
        self._tasks: anyio.abc.TaskGroup | None = None
        self._binding: dict[str, anyio.Lock] = {}

    @property
    def pool(self) -> Pool:
        """The pool of a gateway of one upstream (a gateway of several has `pools`)."""
        if len(self.pools) > 1:
            raise RuntimeError("this gateway relays several upstreams: see its pools")
        return self.pools[0]

    @property
    def upstream(self) -> Upstream:
        """The upstream of a gateway of one."""
        return self.pool.upstream

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Gateway]:
        """Connected to every upstream, serving what they serve; `UpstreamUnavailable` naming each that cannot
        be reached."""
        if self._running:
            raise RuntimeError("this gateway is running already")
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(running(self.pools))
            if self.questions is not None:
                await stack.enter_async_context(self.questions.running())
            said: list[tuple[ServerCapabilities, str | None]] = []
            for pool in self.pools:
                client = pool.first.client if pool.upstream.credential is None else None
                if client is not None:
                    said.append((client.server_capabilities, client.instructions))
                else:  # reached as each person connects it: its tools, which change as they do
                    said.append((ServerCapabilities(tools=ToolsCapability(list_changed=True)), None))
            self._serve_like(said)
            tasks = await stack.enter_async_context(anyio.create_task_group())
            self._tasks = tasks
            for pool in self.pools:
                if pool.upstream.credential is None:
                    await self._bind(pool)
            self._running = True
            try:
                yield self
            finally:
                self._running = False
                self._tasks = None
                tasks.cancel_scope.cancel()
                self._listen.close()

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[Gateway]:
        """The server's lifespan: the gateway running, started here unless it runs already."""
        if self._running:
            yield self
            return
        async with self.running():
            yield self

    def _serve_like(self, said: Sequence[tuple[ServerCapabilities, str | None]]) -> None:
        """Handlers for the request families the upstreams serve (any of them), so that capabilities say the
        same; `said` is what each upstream declared, and its instructions."""
        declared = [capabilities for capabilities, _ in said]
        capabilities = declared[0] if len(declared) == 1 else _union(declared)
        self.announces = listed_changes(capabilities)
        if self.routes is not None:
            # An upstream's restart may change its lists, and a listing while it was away left it out.
            self.announces = (
                capabilities.tools is not None,
                capabilities.prompts is not None,
                capabilities.resources is not None,
            )
        relaying = self._relaying
        if self.routes is None:
            self.server.instructions = said[0][1]
        else:
            self.routes.serve_like(declared)
            self.server.instructions = self.routes.instructions([instructions for _, instructions in said])
            relaying = self.routes.relaying
        add = self.server.add_request_handler
        if capabilities.tools is not None:
            add("tools/list", PaginatedRequestParams, relaying("tools/list"))
            add("tools/call", CallToolRequestParams, relaying("tools/call", asks=True, named="name"))
        if capabilities.prompts is not None:
            add("prompts/list", PaginatedRequestParams, relaying("prompts/list"))
            add("prompts/get", GetPromptRequestParams, relaying("prompts/get", asks=True, named="name"))
        if capabilities.resources is not None:
            add("resources/list", PaginatedRequestParams, relaying("resources/list"))
            add("resources/templates/list", PaginatedRequestParams, relaying("resources/templates/list"))
            add("resources/read", ReadResourceRequestParams, relaying("resources/read", asks=True, named="uri"))
        if capabilities.completions is not None:
            add("completion/complete", CompleteRequestParams, relaying("completion/complete"))
        if capabilities.logging is not None:
            add("logging/setLevel", SetLevelRequestParams, self._set_level)
        if any(self.announces):
            add("subscriptions/listen", SubscriptionsListenRequestParams, self._listen)
        self.server.add_notification_handler("notifications/initialized", NotificationParams, self._initialized)

    def _relaying(self, method: str, *, asks: bool = False, named: str | None = None) -> Handler:
        async def relay(ctx: ServerRequestContext[Any, Any], params: BaseModel) -> dict[str, Any]:
            raw = ctx.params or {}
            what = method if named is None else f"{method} {raw.get(named)!r}"
            return await self._forward(ctx, method, raw, what, asks=asks)

        return relay

    async def _forward(
        self,
        ctx: ServerRequestContext[Any, Any],
        method: str,
        raw: Mapping[str, Any],
        what: str,
        *,
        asks: bool,
        pool: Pool | None = None,
    ) -> dict[str, Any]:
        pool = pool or self.pools[0]
        holder = _holder(ctx) if asks else None
        if holder is not None:
            self._remember(holder, ctx.session)
        principal = None if self.identity is None else self.identity.principal_for(ctx.request).principal_id
        call = Call(ctx, what, holder, Deadline(pool.upstream.timeout), pool=pool, principal=principal)
        if method == TOOLS_CALL and self.questions is not None:
            return await self._calling(ctx, raw, call)
        if method == "tools/list" and pool.upstream.credential is not None:
            return await self._listing(ctx, raw, call)
        lane, result = await self.send(call, method, raw)
        return self._returned(ctx, lane, what, result)

    async def _listing(self, ctx: ServerRequestContext[Any, Any], raw: Mapping[str, Any], call: Call) -> dict[str, Any]:
        """The tools of an upstream with a credential, for the caller: its `connect` tool first, then, once they
        connected it, the upstream's own as their session lists them (one of the same name is hidden behind it)."""
        assert self.connecting is not None
        assert call.pool is not None
        assert call.principal is not None
        connect = self.connecting.tool(call.pool)
        first = raw.get("cursor") is None
        alone: dict[str, Any] = {"tools": [connect]}
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            alone["resultType"] = "complete"
        if not await self.connecting.connected(call.pool, call.principal):
            return alone
        try:
            lane, result = await self.send(call, "tools/list", raw)
        except MCPError as error:  # their session is down (their credential refused, say): they may connect again
            log.warning("%s of upstream %r failed: %s", call.what, call.pool.upstream.name, error.error.message)
            return alone
        listed = result.get("tools") or []
        tools = [tool for tool in listed if not (isinstance(tool, dict) and tool.get("name") == CONNECT_TOOL)]
        if len(tools) < len(listed):
            log.info("upstream %s lists a tool %r, hidden behind the gateway's own", lane.label, CONNECT_TOOL)
        return self._returned(ctx, lane, call.what, {**result, "tools": [connect, *tools] if first else tools})

    async def send(self, call: Call, method: str, raw: Mapping[str, Any]) -> tuple[Lane, dict[str, Any]]:
        """`call` sent upstream as it came, on a lane of its pool it may ride, and the upstream's raw result; an
        error of the upstream's or of the relay (`MCPError`, naming the upstream and the call) otherwise. Progress
        renews the call's clock and goes to the downstream request the call belongs to now (`call.ctx`)."""
        what = call.what
        pool = call.pool or self.pools[0]
        raw = _upstreams_state(raw)

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            # Asked for on every request, as a sign of life that renews the timeout; passed on to a client that
            # asked for it (to any other, reporting it does nothing).
            call.deadline.renew()
            try:
                await call.ctx.session.report_progress(progress, total, message)
            except Exception as error:  # a downstream request that ended meanwhile (a 2026-07-28 round) hears none
                log.debug("progress of %s not passed on: %s", what, type(error).__name__)

        async with pool.carrying(call) as (lane, connection):
            resent = False
            while True:
                params = _outgoing(raw, modern=lane.modern, level=self._opted_in(call) if lane.modern else None)
                request = _Forwarded(method=method, params=params)
                try:
                    with call.deadline.watching() as watch:
                        call.sent = True
                        sent = connection.client.session.send_request(request, _Raw, progress_callback=progress)
                        result = (await sent).root
                except MCPError as error:
                    refusal = connection.denied(error)
                    if refusal is not None:
                        call.sent = False  # refused before it ran: a gated forward knows it did not run
                        raise lane.denied(refusal, what) from None
                    if connection.unseen(error):
                        # Refused unseen, by an upstream that no longer knows the session: sent once more on a new
                        # one, unless the call is a step of its own that runs at most once (a gated forward),
                        # which then ends knowing that it did not run.
                        lane.lost(connection, FORGOTTEN)
                        if not call.once and not resent:
                            connection = await lane.ready(call.deadline, what)
                            resent = True
                            continue
                        call.sent = False
                        raise MCPError(
                            INTERNAL_ERROR,
                            f"upstream {lane.label} no longer knows the gateway's session (it answered HTTP 404); "
                            f"{what} did not run there and was not sent again",
                            {"upstream": pool.upstream.name},
                        ) from None
                    if connection.ended is None:
                        raise  # the upstream's own answer (whatever its code), or the transport's for this request
                    lane.lost(connection, ENDED)
                    said = "ended its session" if connection.ended == FORGOTTEN else "closed the connection"
                    raise MCPError(
                        INTERNAL_ERROR,
                        f"upstream {lane.label} {said} while {what} was in flight; the gateway connects to it again",
                        {"upstream": pool.upstream.name},
                    ) from None
                except ValidationError as invalid:
                    log.warning("upstream %s returned an invalid result for %s: %s", lane.label, what, invalid)
                    raise MCPError(
                        INTERNAL_ERROR,
                        f"upstream {lane.label} returned an invalid result for {what}",
                        {"upstream": pool.upstream.name},
                    ) from None
                if watch.cancelled_caught:
                    raise timed_out(lane, what, pool.upstream.timeout)
                return lane, result

    async def _calling(self, ctx: ServerRequestContext[Any, Any], raw: Mapping[str, Any], call: Call) -> dict[str, Any]:
        """A `tools/call` whose questions the gateway keeps durable (see `mcp_elicit.gateway.questions`); `raw` is
        what goes upstream (the tool's name as the upstream has it), `ctx.params` what the client sent."""
        assert self.questions is not None
        pool = call.pool or self.pools[0]
        params = CallToolRequestParams.model_validate(ctx.params or {})
        if pool.upstream.credential is not None:
            connected = await self._connect_first(ctx, params, raw, call)
            if isinstance(connected, dict):
                return connected
            params, raw = connected
        gates = self._gates.get(pool.upstream.name)
        gated: GatedTool | None = None
        if gates and pool.upstream.credential is not None and not gates.listed:
            # An upstream reached as each person connects it: its gates are bound to the tools the caller's session
            # lists, before the call is looked at, so that no gated call goes through unbound.
            lister = Call(ctx, "tools/list", None, Deadline(pool.upstream.timeout), pool=pool, principal=call.principal)
            async with pool.carrying(lister) as (lane, _):
                await self._bind(pool, lane)
        if gates:
            name = str(raw.get("name"))
            try:
                gated = gates.gate_of(name)
            except GateRefused as refused:
                log.warning("%s refused: %s", call.what, refused)
                return _tool_error(ctx, str(refused))
            if gated is not None and not gated.gate.applies(dict(raw.get("arguments") or {}), name):
                gated = None
        state = params.request_state
        if gated is None and state is not None and state.startswith(UPSTREAM_STATE):
            # The retry of a round a 2026-07-28 upstream put out: `send` gives its state back as the upstream gave it.
            lane, result = await self.send(call, TOOLS_CALL, raw)
            return self._returned(ctx, lane, call.what, result)
        if not pool.modern:
            call.holder = fresh_holder()  # what a handshake upstream asks on the lane is this call's, and no other's
        if gates and gated is not None:
            fallback = gates.fallback_of(str(raw.get("name")))
            gated_outcome = await self.questions.call_gated(ctx, params, raw, call, gated, fallback)
            return gated_outcome.model_dump(mode="json", by_alias=True, exclude_none=True)
        outcome = await self.questions.call_tool(ctx, params, raw, call)
        if isinstance(outcome, Ended):
            assert outcome.lane is not None
            assert outcome.result is not None
            return self._returned(ctx, outcome.lane, call.what, outcome.result)
        return outcome.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def _connect_first(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams, raw: Mapping[str, Any], call: Call
    ) -> dict[str, Any] | tuple[CallToolRequestParams, Mapping[str, Any]]:
        """A call of an upstream with a credential: the call as it goes on, once its caller connected the upstream
        (without the fields of the connect round it retries); else what to answer (a connect round, why it is not
        connected, the result of the upstream's `connect` tool, which is the gateway's)."""
        assert self.connecting is not None
        assert call.pool is not None
        assert call.principal is not None
        state = params.request_state
        if state is not None and state.startswith(UPSTREAM_STATE):
            return params, raw  # the retry of a round the upstream put out: on the caller's session, connected
        own = raw.get("name") == CONNECT_TOOL
        retried = state is not None and state.startswith(CONNECT_STATE)
        if not (own or retried) and await self.connecting.connected(call.pool, call.principal):
            return params, raw
        assert self.questions is not None
        await self.questions.served()  # the runtime's wake-ups: the page's completion reaches the call at once
        outcome = await self.connecting.connect(ctx, call.pool, call.principal, params)
        answered = outcome.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(outcome, InputRequiredResult):
            return answered
        if outcome.is_error or own:
            return answered
        if retried:
            params = params.model_copy(update={"request_state": None, "input_responses": None})
            raw = {key: value for key, value in raw.items() if key not in ("requestState", "inputResponses")}
        return params, raw

    def _returned(
        self, ctx: ServerRequestContext[Any, Any], lane: Lane, what: str, result: dict[str, Any]
    ) -> dict[str, Any]:
        if result.get("resultType") == "input_required" and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(
                INTERNAL_ERROR,
                f"upstream {lane.label} answered {what} by asking for input the 2026-07-28 way (InputRequiredResult), "
                f"which a {ctx.protocol_version} client cannot receive; a gateway without a store does not bridge that",
                {"upstream": lane.pool.upstream.name},
            )
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and "resultType" not in result:
            result = {**result, "resultType": "complete"}  # a handshake upstream's result, which has none
        if self.questions is not None and result.get("resultType") == "input_required":
            # Sealed by the gateway's boundary, and marked as the upstream's (a round without state too, so that its
            # retry is told from one of the gateway's own rounds).
            state = result.get("requestState")
            result = {**result, "requestState": UPSTREAM_STATE + (state if isinstance(state, str) else "")}
        meta = result.get("_meta")
        if isinstance(meta, dict) and SERVER_INFO_META_KEY in meta:
            # The gateway's own identity is stamped on 2026-07-28 results, as its discovery says.
            kept = {key: value for key, value in meta.items() if key != SERVER_INFO_META_KEY}
            result = {**result, "_meta": kept} if kept else {k: v for k, v in result.items() if k != "_meta"}
        return result

    async def _set_level(self, ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams) -> dict[str, Any]:
        """Every handshake session with an upstream that serves logging gets the level (and sessions opened later,
        on connecting)."""
        self._level = params.level
        refused: MCPError | None = None
        for lane in [lane for pool in self.pools for lane in pool.lanes]:
            client = lane.client
            if client is not None and not lane.modern and client.server_capabilities.logging is not None:
                try:
                    await self._send_level(lane, client, params.level)
                except MCPError as error:
                    refused = refused or error
        if refused is not None:
            raise refused
        return {}

    async def _send_level(self, lane: Lane, client: Client, level: LoggingLevel) -> None:
        request = _Forwarded(method="logging/setLevel", params={"level": level})
        timeout = lane.pool.upstream.timeout
        with Deadline(timeout).watching() as watch:
            await client.session.send_request(request, _Raw)
        if watch.cancelled_caught:
            raise timed_out(lane, "logging/setLevel", timeout)

    async def _initialized(self, ctx: ServerRequestContext[Any, Any], params: NotificationParams) -> None:
        holder = _holder(ctx)
        if holder != NO_BACK_CHANNEL:
            self._remember(holder, ctx.session)

    def _remember(self, holder: Hashable, session: ServerSession) -> None:
        """A handshake connection, for the notices no request carries (list changes)."""
        if session.protocol_version in MODERN_PROTOCOL_VERSIONS or holder == NO_BACK_CHANNEL:
            return
        self._connections.pop(holder, None)
        self._connections[holder] = session
        while len(self._connections) > REMEMBERED:
            del self._connections[next(iter(self._connections))]

    # -- what the upstream sends on a lane (the `Relay` of `mcp_elicit.gateway.upstream`) ---------------------

    async def connected(self, lane: Lane, client: Client) -> None:
        if self._running and lane.pool.tells_changes(lane):
            self._bind_soon([lane.pool])  # a restarted upstream may list its tools differently
        if self._level is not None and client.server_capabilities.logging is not None and not lane.modern:
            try:
                await self._send_level(lane, client, self._level)
            except MCPError as error:
                log.warning("upstream %s refused the log level %s: %s", lane.label, self._level, error)
        if self.routes is not None and self._running and lane.pool.tells_changes(lane):
            for event, announced in zip(_EVENTS.values(), self.announces, strict=True):
                if announced:
                    await self.event(event)

    async def elicit(self, lane: Lane, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        """The upstream's question, asked of the client whose calls the lane carries.

        A handshake upstream's `elicitation/create` says nothing of the call it belongs to. With one call of
        that client in flight on the lane it is that call's, and is asked on it; with several it could be any
        of them, so it is asked on none (on the connection's own channel), and every one of their clocks stops
        while the person answers.
        """
        calls = lane.asking()
        if not calls:
            log.warning("upstream %s asked a question with no call in flight; refused", lane.label)
            return ErrorData(code=INVALID_REQUEST, message="no call of the gateway's clients is in flight to ask on")
        first = calls[0]
        with ExitStack() as paused:
            for call in calls:
                paused.enter_context(call.deadline.paused())
            if first.asked is not None:
                return await first.asked(lane, params)
            whose = " or ".join(dict.fromkeys(call.what for call in calls))
            return await self._ask_live(lane, first.ctx, whose, params)

    async def ask_client(
        self, lane: Lane, request: CreateMessageRequest | ListRootsRequest
    ) -> CreateMessageResult | CreateMessageResultWithTools | ListRootsResult | ErrorData:
        """A handshake upstream's request of the client's own (its model, its roots), sent to the client whose call
        the lane carries, on that call, as a question is (`elicit`); not recorded (`mcp_elicit.gateway.live`)."""
        calls = lane.asking()
        if not calls:
            log.warning("upstream %s sent %s with no call in flight; refused", lane.label, request.method)
            return ErrorData(code=INVALID_REQUEST, message="no call of the gateway's clients is in flight to ask on")
        with ExitStack() as paused:
            for call in calls:
                paused.enter_context(call.deadline.paused())
            return await ask_client(calls[0].ctx, request, " or ".join(dict.fromkeys(call.what for call in calls)))

    async def _ask_live(
        self, lane: Lane, ctx: ServerRequestContext[Any, Any], whose: str, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        """The upstream's question asked of the client of `ctx` on that request, and the client's answer (or why
        it cannot be asked), for the upstream."""
        session = ctx.session
        if not session.can_send_request:
            return ErrorData(
                code=INVALID_REQUEST,
                message=f"the gateway cannot ask the client of {whose} on the live call: its connection "
                f"(protocol {ctx.protocol_version}) carries no requests from server to client, and this "
                "gateway does not relay questions another way",
            )
        refusal = _unaskable(session.client_capabilities, params)
        if refusal is not None:
            return ErrorData(code=INVALID_REQUEST, message=f"the gateway cannot ask the client of {whose}: {refusal}")
        if isinstance(params, ElicitRequestURLParams) and params.elicitation_id is not None:
            self._urls.watch((lane, params.elicitation_id), session)
        related = ServerMessageMetadata(related_request_id=ctx.request_id)  # arrives, whatever streams are open
        try:
            return await session.send_request(ElicitRequest(params=params), ElicitResult, metadata=related)
        except MCPError as error:
            return error.error
        except ValidationError:
            return ErrorData(code=INTERNAL_ERROR, message="the client's answer is not an elicitation result")

    async def logged(self, lane: Lane, params: LoggingMessageNotificationParams) -> None:
        """A log message, to the one client it can belong to; dropped when that cannot be told.

        It belongs to the client whose calls the lane carries (on that one call, if there is one); between
        calls, to the one client of a stdio gateway (over HTTP, whose it is cannot be told). A request that
        draws no question (a list) rides any lane and claims no log message: one that comes during it may be
        late, from the call before.
        """
        notice = LoggingMessageNotification(params=params)
        calls = lane.asking()
        if lane.modern:
            # A 2026-07-28 upstream logs only on requests that opted in at that level: no other call is its author.
            calls = [call for call in calls if params.level in _levels(self._opted_in(call))]
        if len(calls) == 1:
            call = calls[0]
            if params.level in allowed_log_levels(call.ctx.protocol_version, call.ctx.meta):
                await _tell(call.ctx.session, notice, related_request_id=call.ctx.request_id)
            return
        session: ServerSession | None = None
        holders = {call.holder for call in calls}
        if calls and len(holders) == 1 and NO_BACK_CHANNEL not in holders:
            session = calls[0].ctx.session  # several calls of one connection: told on the connection
        elif not calls and list(self._connections) == [STREAM]:
            session = self._connections[STREAM]
        if session is None:
            log.debug("upstream %s logged with no one client to tell; dropped", lane.label)
            return
        await _tell(session, notice)

    def _opted_in(self, call: Call) -> LoggingLevel | None:
        """The log level a call sends to a 2026-07-28 upstream, which logs on a request only at the level it names:
        a 2026-07-28 client's own; for a 2025 client's call that can be logged to, the level it set with
        `logging/setLevel` (every level until it does, as on the handshake)."""
        if call.holder is None:
            return None
        if call.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            level = (call.ctx.meta or {}).get(LOG_LEVEL_META_KEY)
            return next((known for known in get_args(LoggingLevel) if known == level), None)
        return self._level or "debug"

    async def notified(self, lane: Lane, notification: ServerNotification) -> None:
        if isinstance(
            notification, ToolListChangedNotification | PromptListChangedNotification | ResourceListChangedNotification
        ):
            await self._changed(lane, notification)
        elif isinstance(notification, ElicitCompleteNotification):
            # To the client that was asked, often after its call ended; a notice for a question the gateway did
            # not relay (or relayed too long ago) is dropped.
            elicitation_id = notification.params.elicitation_id
            session = self._urls.answered((lane, elicitation_id))
            if session is not None:
                await _tell(session, notification)
            elif self.questions is None or not await self.questions.completed(lane, elicitation_id):
                log.debug("upstream %s said a URL question the gateway did not relay is complete", lane.label)

    async def _bind(self, pool: Pool, lane: Lane | None = None) -> None:
        """Bind the upstream's gates to its tools as it lists them now on `lane` (by default the first, or for an
        upstream with a credential any session of it up), at start, on a change, on reconnecting; what does not fit
        is logged, and such a gate refuses its tool's calls. A listing that fails leaves the gates as they were
        bound."""
        gates = self._gates.get(pool.upstream.name)
        if lane is None:
            lane = next((each for each in pool.lanes if each.status == "up" and pool.tells_changes(each)), None)
        if not gates or lane is None:
            return
        async with self._binding.setdefault(pool.upstream.name, anyio.Lock()):  # in order: the latest list last
            try:
                await self._bind_listed(pool, gates, lane)
            except Exception:  # a gate that cannot be bound stays armed; the gateway runs on
                log.exception("upstream %s: its gates could not be bound", lane.label)

    async def _bind_listed(self, pool: Pool, gates: Gates, lane: Lane) -> None:
        client = lane.client
        if client is None:
            return
        tools: list[Tool] = []
        cursor: str | None = None
        with Deadline(pool.upstream.timeout).watching() as watch:
            try:
                while True:
                    listed = await client.list_tools(cursor=cursor)
                    tools.extend(listed.tools)
                    cursor = listed.next_cursor
                    if not cursor:
                        break
            except (MCPError, ValidationError) as error:
                log.warning("upstream %s: its tools could not be listed to bind its gates: %s", lane.label, error)
                return
        if watch.cancelled_caught:
            log.warning("upstream %s: its tools could not be listed in time to bind its gates", lane.label)
            return
        gates.bind(tools)

    def _bind_soon(self, pools: Sequence[Pool]) -> None:
        """Bind again in the background: the upstream's notice arrives on its own session, which must not wait for
        the listing it would then answer."""
        if self._tasks is None:
            return
        for pool in pools:
            if pool.upstream.name in self._gates:
                self._tasks.start_soon(self._bind, pool)

    async def event(self, event: ServerEvent) -> None:
        if isinstance(event, ToolsListChanged):
            self._bind_soon(self.pools)
        await self._bus.publish(event)
        notice = event_to_notification(event, {})
        for holder, session in list(self._connections.items()):
            if not await _tell(session, notice):
                self._connections.pop(holder, None)  # ended, or stalled past the notice timeout: forgotten

    async def _changed(self, lane: Lane, notification: ServerNotification) -> None:
        if not lane.pool.tells_changes(lane):
            return  # every session of the upstream hears it; one notice is enough
        event = _EVENTS[type(notification)]
        await self.event(event)


def _union(declared: Sequence[ServerCapabilities]) -> ServerCapabilities:
    """What any of the upstreams serves: each family from the first that serves it, list changes announced if
    any of them announces them."""
    union: dict[str, Any] = {}
    for capabilities in declared:
        for family, value in capabilities:
            if value is None:
                continue
            if family not in union:
                union[family] = value.model_copy() if isinstance(value, BaseModel) else value
            elif getattr(value, "list_changed", False):
                union[family].list_changed = True
    return ServerCapabilities(**union)


def _tool_error(ctx: ServerRequestContext[Any, Any], message: str) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": message}], "isError": True}
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        result["resultType"] = "complete"
    return result


def _holder(ctx: ServerRequestContext[Any, Any]) -> Hashable:
    """The downstream connection a call's questions go to (see `mcp_elicit.gateway.upstream`)."""
    if not ctx.session.can_send_request:
        return NO_BACK_CHANNEL
    headers = getattr(ctx.request, "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    return ("http", session_id) if session_id else STREAM


def _outgoing(raw: Mapping[str, Any], *, modern: bool, level: LoggingLevel | None = None) -> dict[str, Any] | None:
    """The params to send upstream: the downstream connection's own `_meta` keys left out, and on a 2026-07-28
    session the log level the call opts in to (`level`)."""
    params = dict(raw)
    meta = params.get("_meta")
    kept = {
        key: value
        for key, value in (meta.items() if isinstance(meta, Mapping) else ())
        if key not in _CONNECTION_KEYS and key not in ("progressToken", LOG_LEVEL_META_KEY)
    }
    if modern and level is not None:
        kept[LOG_LEVEL_META_KEY] = level
    if kept:
        params["_meta"] = kept
    else:
        params.pop("_meta", None)
    return params or None


def _upstreams_state(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """`raw` with the `requestState` of a round the upstream put out as the upstream gave it (`_returned` marks it
    inside the gateway's own), for any request that carries one (`prompts/get` and `resources/read` too)."""
    state = raw.get("requestState")
    if not isinstance(state, str) or not state.startswith(UPSTREAM_STATE):
        return raw
    kept = {name: value for name, value in raw.items() if name != "requestState"}
    if state != UPSTREAM_STATE:
        kept["requestState"] = state.removeprefix(UPSTREAM_STATE)
    return kept


def _levels(level: LoggingLevel | None) -> frozenset[LoggingLevel]:
    """The levels a 2026-07-28 upstream may log at on a request that opted in to `level`."""
    return allowed_log_levels(LATEST_MODERN_VERSION, {LOG_LEVEL_META_KEY: level} if level is not None else None)


def _unaskable(capabilities: ClientCapabilities | None, params: ElicitRequestParams) -> str | None:
    """Why the client cannot be asked this (a mode it did not declare), or None."""
    declared = capabilities.elicitation if capabilities is not None else None
    if declared is None:
        return "it declared no elicitation capability"
    if isinstance(params, ElicitRequestFormParams):
        if declared.form is None and declared.url is not None:
            return "it declared URL-mode elicitation only, and this is a form"
        return None
    if declared.url is None:
        return "it did not declare URL-mode elicitation"
    return None


async def _tell(session: ServerSession, notice: ServerNotification, *, related_request_id: Any = None) -> bool:
    """Whether `notice` was passed on: a connection gone meanwhile, or one whose stream stalled past
    `NOTICE_TIMEOUT`, does not hold up the lane that heard it."""
    with anyio.move_on_after(NOTICE_TIMEOUT):
        try:
            await session.send_notification(notice, related_request_id=related_request_id)
        except Exception as error:  # the notice is for those still there
            log.debug("could not pass %s on: %s", notice.method, error)
            return False
        return True
    log.debug("could not pass %s on within %g s", notice.method, NOTICE_TIMEOUT)
    return False


_EVENTS: dict[type[BaseModel], ServerEvent] = {
    ToolListChangedNotification: ToolsListChanged(),
    PromptListChangedNotification: PromptsListChanged(),
    ResourceListChangedNotification: ResourcesListChanged(),
}
