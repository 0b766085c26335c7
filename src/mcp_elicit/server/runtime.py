"""`Elicitation`: installs durable decision points on an MCP server and runs tool and prompt bodies through them.

Guarantees, per tool call or prompt get: the operation is bound to the caller's principal and client.
Identical calls (same principal and client, and the same method, tool or prompt name and arguments digest
or the same idempotency key in `_meta`) share one open operation, whether one retries after the other or
they overlap: the store admits one open operation per call (a unique index), and a racing creator
attaches. Within it a step runs in one call at a time and a question goes to the person once (see
`execution`); every call returns the result the operation recorded. A completed operation hands that
result to an identical call within `Timing.replay_window`. An idempotency key is its caller's own: the same key
from another principal or client is another key, neither refused nor revealed. It stays bound to the
request it first named: another tool or other arguments with it is refused with -32602 naming the key. A
2026-07-28 round state is accepted once and only from the principal it was issued to; nothing is ever
asked that the client did not declare (elicitation per mode, sampling, roots).

Does not guarantee: that a step runs once when its call dies half-way. Its claim lapses after `Timing.lease`
and another call runs it again, with the same idempotency key, which the external system must honour.

Era mechanics stay in the adapters of `eras/`: this module finds the operation, runs the body, and
finishes the operation the same way on every era.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, NoReturn, TypeVar, cast, get_type_hints
from urllib.parse import urlsplit

import anyio
from mcp.server import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.mcpserver.tools import Tool
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    CallToolRequestParams,
    CallToolResult,
    ContentBlock,
    InputRequiredResult,
    TextContent,
)
from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from mcp_elicit.approvals.gate import (
    DISMISSED,
    EXPIRED,
    Approved,
    Gate,
    GatedTool,
    GateRefused,
    GrantOffer,
    Rejected,
    grant_not_kept,
    told_of_grant,
    told_of_use,
    told_the_model,
)
from mcp_elicit.approvals.limits import ApprovalLimited, ApprovalLimits, RequestBucket, retry_in
from mcp_elicit.model import (
    Decision,
    JSONValue,
    Operation,
    OperationStatus,
    Principal,
    UnencodableValue,
    check_encodable,
    new_operation,
    request_digest,
    summarize_call,
)
from mcp_elicit.model.digest import json_path
from mcp_elicit.server.answers import Declined, Expired
from mcp_elicit.server.audit_sealer import AuditSealer, AuditSealing
from mcp_elicit.server.background import Shared, beside
from mcp_elicit.server.config import RequestState, Timing
from mcp_elicit.server.eras import Call, Declared, EraAdapter, RequestContext, Target
from mcp_elicit.server.eras.capabilities import Era, missing_capability
from mcp_elicit.server.eras.legacy import CompletionNotices, LegacyEra
from mcp_elicit.server.eras.mrtr import MrtrEra, RoundSettings
from mcp_elicit.server.eras.tasks_ext import ExtMethods, ExtWire, TasksExtension
from mcp_elicit.server.eras.tasks_legacy import LegacyMethods, LegacyTasksMiddleware, LegacyWire
from mcp_elicit.server.eras.tool_approval import ToolApprovalExtension
from mcp_elicit.server.eras.tool_approval import declared as declared_tool_approval
from mcp_elicit.server.eras.unaskable import UnaskableEra
from mcp_elicit.server.execution import (
    AwaitingApprovers,
    BeginTask,
    CallSettings,
    CannotAsk,
    ClientRefused,
    Execution,
    new_holder,
)
from mcp_elicit.server.fallback import ANSWERS_ARGUMENT, Fallback
from mcp_elicit.server.flow import Flow
from mcp_elicit.server.forms import check_asks
from mcp_elicit.server.identity import UNKNOWN_CLIENT, IdentityPolicy
from mcp_elicit.server.leases import Leases
from mcp_elicit.server.notifications import Deliverer, Notifications
from mcp_elicit.server.resources import RESOURCES_READ, checked_template, recorded_type
from mcp_elicit.server.signals import Signal, StaleSnapshot, Suspended, SwallowedSignal
from mcp_elicit.server.sweeper import Sweeper
from mcp_elicit.server.tasks import (
    TaskAccepted,
    TaskBook,
    TaskMeta,
    TaskPolicy,
    TaskRequest,
    TaskService,
    TaskSettings,
    TaskStart,
)
from mcp_elicit.server.tasks.asker import TaskEra
from mcp_elicit.server.tasks.runner import TaskRunner
from mcp_elicit.server.tasks.state import DENIED_JOURNAL, EXT_ERA, ttl_ms
from mcp_elicit.server.waiting import Wakeups
from mcp_elicit.server.writes import HeldWrites, KeyRefused, OperationEnded
from mcp_elicit.store import (
    OPERATION_DECISIONS_READ,
    Claim,
    Clock,
    IdempotencyKeyConflict,
    OperationConflict,
    OperationExpired,
    Store,
    StoreUnavailable,
    open_store,
    utc_now,
)
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.telemetry import calls as telemetry
from mcp_elicit.telemetry import store as store_telemetry

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

IDEMPOTENCY_META_KEY = "io.github.mcp-elicit/idempotencyKey"
REPLAYED_META_KEY = "io.github.mcp-elicit/replayed"
"""Result `_meta` of a replayed tool result: `{"recordedAt": ISO-8601, "operationId": ...}`."""
TOOLS_CALL = "tools/call"
PROMPTS_GET = "prompts/get"
_KINDS = {TOOLS_CALL: "tool", PROMPTS_GET: "prompt", RESOURCES_READ: "resource"}
_AGAIN = {
    TOOLS_CALL: "call this tool again",
    PROMPTS_GET: "get this prompt again",
    RESOURCES_READ: "read this resource again",
}
UNAVAILABLE_PAUSE = timedelta(milliseconds=500)
"""How long a call whose store was unavailable waits before its one run again."""
MAX_STALE_RUNS = 10
"""Runs of one call whose commit found records changed meanwhile: each such loss is another call's progress."""
_ENDED_UNREPLAYED = (OperationStatus.FAILED, OperationStatus.CANCELLED, OperationStatus.EXPIRED)
_CALL_TOOL_RESULT: TypeAdapter[Any] = TypeAdapter(CallToolResult)
_ARGUMENTS: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


@dataclass(frozen=True, slots=True)
class _Entry:
    """A registered body: the method it answers and its name there are its operations' method and target."""

    method: str
    name: str
    body: Callable[..., Any]
    flow_parameter: str
    result: TypeAdapter[Any]
    fallback: Fallback
    task: TaskPolicy = TaskPolicy.NEVER
    task_start: TaskStart = TaskStart.CALL
    gate: GatedTool | None = None
    convert: Callable[[Any], CallToolResult | InputRequiredResult] | None = None
    """A gated tool's conversion of what its body returns to the tool result it records (what the model is told
    of an approval is part of that result, so a replay or a task's result carries it too)."""

    @property
    def kind(self) -> str:
        return _KINDS[self.method]


@dataclass(frozen=True, slots=True)
class _ServedCall:
    """One call being served, the same for each of its runs: what it runs, for whom, on which era, with what.

    A run's own state (its held writes, its `Execution`) is made afresh per run and stays out of it.
    """

    entry: _Entry
    era: EraAdapter
    principal: Principal
    target: Target
    key: str | None
    arguments: dict[str, Any]
    """The call's arguments, as its body takes them."""
    answers: Any
    """Answers given as an argument (the ARGUMENTS fallback), if any."""
    about: Callable[[], str]
    """What the call is about, as its questions show it (`summarize_call`), rendered when a question is asked."""
    leases: Leases
    begin_task: BeginTask | None = None
    pass_arguments: bool = True
    """Whether the body takes the arguments as parameters; a `run_tool` body reads `flow.arguments` instead."""
    gated: bool = False
    """Whether the tool's gate applies to these arguments: the call runs only once approved, and an ended call
    is not replayed to an identical one without an idempotency key (that one is asked again)."""
    approval_task: bool = False
    """The call runs as the task the tool-approval extension made of it: its approval must still be valid when
    the tool runs, and a denial is recorded as one (the task's disposition)."""
    holder: str = field(default_factory=new_holder)
    """One holder for every run of the call: a run after a stale one still holds the claims that one took."""
    ran_on: list[str] = field(default_factory=list)
    """The operations this call's runs attached to: a run after a stale one returns the end another call gave
    that operation (a failure, a cancellation), never starts it afresh."""


class Elicitation:
    """Durable elicitation for one MCP server: its store, its requestState keys, its public base URL.

    `request_state`: the keys 2026-07-28 rounds are sealed with, and which answers come without a round
    (`RequestState`). `timing`: how long results are replayed, operations and leases last, rounds are held
    and questions stay with a round, and how often overdue records are swept (`Timing`). `identity`: whom a
    call runs for when it carries no verified access token (`IdentityPolicy`). `tasks`: the lifetimes of MCP
    tasks (`TaskSettings`).

    `notifications`: webhooks a served app delivers the store's outbox to ("decision waiting", "decision
    ended", "task needs input"), signed, at least once (see `mcp_elicit.server.notifications`).

    `tool_approval`: serve the experimental tool-approval extension, after a draft (SEP-2848, see
    `server.eras.tool_approval`): a call of a tool whose gate has others approve it, from a client that declared
    the extension, becomes a task that waits for the approval and then runs. Off by default.
    `tool_approval_limits`: how many such tasks one principal may have open, and how fast they may open new ones
    (`ApprovalLimits`, defaults when None); a call over either ends as a tool error saying when to try again.
    `audit`: the keys a served app signs the audit trail's checkpoints with, every `checkpoint_interval` and once
    more as it stops (see `mcp_elicit.server.audit_sealer`); None leaves the trail unsealed until `mcp-elicit
    audit seal` runs.
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        request_state: RequestState,
        public_base_url: str | None = None,
        identity: IdentityPolicy | None = None,
        timing: Timing | None = None,
        tasks: TaskSettings | None = None,
        notifications: Notifications | None = None,
        tool_approval: bool = False,
        tool_approval_limits: ApprovalLimits | None = None,
        audit: AuditSealing | None = None,
        clock: Clock = utc_now,
    ) -> None:
        if not isinstance(tool_approval, bool):
            raise TypeError(f"Elicitation(tool_approval=...) is True or False, not {tool_approval!r}")
        self.tool_approval = tool_approval
        if tool_approval_limits is not None and not isinstance(tool_approval_limits, ApprovalLimits):
            raise TypeError("Elicitation(tool_approval_limits=...) takes ApprovalLimits(open_per_principal=..., ...)")
        self.tool_approval_limits = tool_approval_limits or ApprovalLimits()
        self._approval_requests = RequestBucket(self.tool_approval_limits)
        store_telemetry.install()
        self.request_state = request_state
        ttl = request_state.ttl.total_seconds()
        if request_state.keys is not None:
            self.request_state_security = RequestStateSecurity(keys=list(request_state.keys), ttl=ttl)
        else:
            self.request_state_security = RequestStateSecurity.ephemeral(ttl=ttl)
        self.store = store if store is not None and not isinstance(store, str) else open_store(store, clock=clock)
        self._async_store = AsyncStore(self.store)
        self._base_url = _checked_base_url(public_base_url) if public_base_url else None
        self.identity = identity or IdentityPolicy()
        self.timing = timing if timing is not None else Timing()
        self._clock = clock
        self._server: MCPServer | None = None
        self._notices = CompletionNotices(self._async_store)
        self._wakeups = Wakeups()
        self._leases = Leases(self._async_store, self.timing.lease, clock)
        sweep_interval = self.timing.sweep_interval
        self._sweeper = Sweeper(self._async_store, sweep_interval) if sweep_interval is not None else None
        self._keeping = Shared(self._leases.run)
        self._background = [Shared(self._notices.run), self._keeping, Shared(self._listen)]
        if self._sweeper is not None:
            self._background.append(Shared(self._sweeper.run))
        if notifications is not None and notifications.targets:
            self._background.append(Shared(Deliverer(self._async_store, notifications, clock).run))
        self.audit = audit
        self.audit_sealer: AuditSealer | None = None
        """The sealer the app's lifespan runs (None when it does not seal), and stops once its last lifespan ended:
        `refused` says why it stopped signing."""
        self._lifespans = 0
        if audit is not None and audit.checkpoint_interval is not None:
            self.audit_sealer = AuditSealer(self._async_store, audit.keys, audit.checkpoint_interval)
            self._background.append(Shared(self.audit_sealer.run))
        self._hearing = False
        self._tools: dict[str, tuple[_Entry, Callable[..., Any], bool | None]] = {}
        self.tasks = self._task_service(tasks or TaskSettings())
        self._background.append(Shared(self.tasks.runner.run))

    # -- installing -------------------------------------------------------------------------------

    def server(self, name: str, **kwargs: Any) -> MCPServer:
        """An `MCPServer` whose requestState boundary uses this key ring; tools registered here land on it.

        Its lifespan also runs the watcher that tells legacy clients answered `-32042` when their flow is done,
        the lease keeper, and the sweeper that expires overdue records every `Timing.sweep_interval` (jittered).
        """
        self._server = MCPServer(
            name,
            request_state_security=self.request_state_security,
            lifespan=self.lifespan(kwargs.pop("lifespan", None)),
            extensions=[*kwargs.pop("extensions", ()), self.tasks_extension(), *self._approval_extension()],
            middleware=[*kwargs.pop("middleware", ()), self.tasks_middleware()],
            **kwargs,
        )
        return self._server

    def lifespan(self, inner: Callable[[Any], AbstractAsyncContextManager[Any]] | None = None) -> Callable[[Any], Any]:
        """The lifespan `server()` gives its `MCPServer`, around `inner`; for a server another framework builds.

        Several may run at once (the SDK runs one per connection of its in-memory client): they share the
        background work, and the last one to end has the audit sealer seal once more after that work stopped.
        """

        @asynccontextmanager
        async def lifespan(server: Any) -> AsyncIterator[Any]:
            async with self.store.serving():
                self._lifespans += 1
                try:
                    async with anyio.create_task_group() as group:
                        self._hear_changes()
                        for work in self._background:
                            group.start_soon(work.host)
                        try:
                            if inner is None:
                                yield {}
                            else:
                                async with inner(server) as state:
                                    yield state
                        finally:
                            group.cancel_scope.cancel()
                finally:
                    self._lifespans -= 1
                    if not self._lifespans and self.audit_sealer is not None:
                        await self.audit_sealer.stop()

        return lifespan

    def attach(self, server: MCPServer) -> None:
        """Use a server built elsewhere; it must have been given `request_state_security=` from here."""
        self._server = server

    @property
    def public_base_url(self) -> str | None:
        """The origin browsers reach this server at (`public_base_url=`), which decision pages are served under."""
        return self._base_url

    @property
    def mcp_server(self) -> MCPServer:
        """The `MCPServer` built by `server(...)` or attached, for serving it or calling it in-process."""
        return self._attached()

    @property
    def clock(self) -> Clock:
        """The clock every TTL, lease and deadline of this runtime is read from (tests move it)."""
        return self._clock

    def decision_url(self, elicitation_id: str) -> str:
        """The page of a decision: the server's own origin and the decision's opaque id, nothing else."""
        if self._base_url is None:
            raise RuntimeError("URL decisions need Elicitation(public_base_url=...)")
        try:
            canonical = str(uuid.UUID(elicitation_id))
        except ValueError:
            raise ValueError("a decision URL carries only the decision's id (a UUID)") from None
        if canonical != elicitation_id:
            raise ValueError("a decision URL carries only the decision's id (a UUID)")
        return f"{self._base_url}/elicit/{elicitation_id}"

    def tool(
        self,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        fallback: Fallback = Fallback.ERROR,
        structured_output: bool | None = None,
        asks: Sequence[object] = (),
        task: TaskPolicy = TaskPolicy.NEVER,
        task_start: TaskStart = TaskStart.CALL,
        gate: Gate | None = None,
    ) -> Callable[[F], F]:
        """Register a tool whose body takes a `Flow`; the body is written once for every protocol era.

        `fallback` says what a client that cannot be asked gets (see `Fallback`); `Fallback.WEB` needs
        `Elicitation(public_base_url=...)` and is refused here without it. `asks` lists what the body asks
        for with `flow.ask`: each is checked here, so a secret-looking or unsupported field fails now.
        `task` says whether a call may run as an MCP task (see `TaskPolicy`): its body then runs in the
        background, its questions go out through `tasks/*`, and any instance sharing the store resumes it.
        `task_start=TaskStart.FLOW` runs the call on the request until the body calls `flow.begin_task()`:
        what it asks before is asked on the call (the spec's advice for what a task cannot start without).
        `gate` lets a call run only once a person approved it, as `mcp_elicit.approvals` says; a gate that cannot
        be declared on this tool (an editable argument that is not a plain value, say) raises `GateRefused` here.
        """
        server = self._attached()
        self.check_fallback(fallback)
        check_gate(gate, fallback)

        def register(body: F) -> F:
            check_asks(asks, f"tool {name or body.__name__!r}")
            self._check_approval_window(name or body.__name__, gate)
            entry, run = self._bind(TOOLS_CALL, name, body, fallback, structured_output, task, task_start, gate)
            if task is not TaskPolicy.NEVER:
                self.tasks.policies[entry.name] = task
            server.add_tool(
                run,
                name=entry.name,
                title=title,
                description=description or inspect.getdoc(body),
                structured_output=structured_output,
            )
            return body

        return register

    def prompt(
        self,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        asks: Sequence[object] = (),
    ) -> Callable[[F], F]:
        """Register a prompt whose body takes a `Flow` and returns what an `MCPServer` prompt returns.

        `prompts/get` then has a tool's durability: the operation (method `prompts/get`, target the prompt
        name) is bound to the caller, a retry attaches to it, and a completed one replays its messages.
        Prompt arguments are strings, so there is no `elicit_answers` fallback: a client that cannot be
        asked gets -32021 naming what is missing, on every era. `asks` is checked as for `tool`.
        """
        server = self._attached()

        def register(body: F) -> F:
            check_asks(asks, f"prompt {name or body.__name__!r}")
            entry, run = self._bind(PROMPTS_GET, name, body, Fallback.ERROR)
            prompt = Prompt.from_function(
                run, name=entry.name, title=title, description=description or inspect.getdoc(body)
            )
            server.add_prompt(prompt)
            return body

        return register

    def resource(
        self,
        uri_template: str,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        asks: Sequence[object] = (),
    ) -> Callable[[F], F]:
        """Register a resource template whose body takes a `Flow` (and the template's variables).

        `resources/read` then has a tool's durability: the operation (method `resources/read`, target the
        URI template, digest of its variables) is bound to the caller, a retry attaches to it, and a
        completed one replays its contents. The body returns what an `MCPServer` resource returns (`str`,
        `bytes`, or a value sent as JSON). A client that cannot be asked gets -32021 naming what is
        missing, on every era. `asks` is checked as for `tool`.
        """
        server = self._attached()
        checked_template(uri_template)

        def register(body: F) -> F:
            check_asks(asks, f"resource {uri_template!r}")
            _, run = self._bind(RESOURCES_READ, uri_template, body, Fallback.ERROR)
            server.resource(
                uri_template,
                name=name or body.__name__,
                title=title,
                description=description or inspect.getdoc(body),
                mime_type=mime_type,
            )(run)
            return body

        return register

    def check_fallback(self, fallback: Fallback) -> None:
        """Refuse a fallback this runtime cannot serve: at registration, not at the first call."""
        if fallback is Fallback.WEB and self._base_url is None:
            raise ValueError(
                "Fallback.WEB sends the person to this server's page /elicit/{id} to answer: "
                "it needs Elicitation(public_base_url=...), the address browsers reach this server at"
            )

    def _attached(self) -> MCPServer:
        if self._server is None:
            raise RuntimeError("create the server with Elicitation.server(...) or attach one first")
        return self._server

    def _bind(
        self,
        method: str,
        name: str | None,
        body: Callable[..., Any],
        fallback: Fallback,
        structured: bool | None = None,
        task: TaskPolicy = TaskPolicy.NEVER,
        task_start: TaskStart = TaskStart.CALL,
        gate: Gate | None = None,
    ) -> tuple[_Entry, Callable[..., Any]]:
        """The entry for `body`, and the function `MCPServer` registers: the body's parameters minus the
        Flow, plus the SDK's `Context` (and `elicit_answers` for an ARGUMENTS fallback)."""
        entry_name = name or body.__name__
        hints = get_type_hints(body, include_extras=True)
        signature = inspect.signature(body, eval_str=True)
        flow_names = [p.name for p in signature.parameters.values() if hints.get(p.name) is Flow]
        kind = _KINDS[method]
        if len(flow_names) != 1:
            raise TypeError(f"{kind} {entry_name!r} must take exactly one parameter annotated Flow")
        returned = hints.get("return", Any)
        recorded = recorded_type(returned) if method == RESOURCES_READ else returned
        entry = _Entry(method, entry_name, body, flow_names[0], TypeAdapter(recorded), fallback, task, task_start)
        kept = [p for p in signature.parameters.values() if p.name != entry.flow_parameter]
        added = [inspect.Parameter("mcp_ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
        annotations: dict[str, Any] = {p.name: hints[p.name] for p in kept if p.name in hints}
        if fallback is Fallback.ARGUMENTS:
            answers_type = dict[str, dict[str, Any]] | None
            added.append(
                inspect.Parameter(
                    ANSWERS_ARGUMENT, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=answers_type
                )
            )
            annotations[ANSWERS_ARGUMENT] = answers_type
        annotations["mcp_ctx"] = Context
        annotations["return"] = returned | InputRequiredResult

        converted: list[Callable[[Any], Any]] = []

        async def run(**kwargs: Any) -> Any:
            context: Context = kwargs.pop("mcp_ctx")
            answers = kwargs.pop(ANSWERS_ARGUMENT, None)
            call = Call(context.request_context, context.input_responses, context.request_state)
            try:
                outcome = await self._serve(entry, call, kwargs, answers, may_be_task=method == TOOLS_CALL)
            except _NotApproved as refused:  # the model reads what the person decided, in the gate's own words
                return CallToolResult(content=[TextContent(type="text", text=str(refused))], is_error=True)
            if not isinstance(outcome, Replayed):
                return outcome
            if method != TOOLS_CALL:
                return outcome.value
            if not converted:  # the conversion MCPServer applies to this tool's results, built once
                converted.append(
                    Tool.from_function(run, name=entry_name, structured_output=structured).fn_metadata.convert_result
                )
            return outcome.marked(converted[0](outcome.value))

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*kept, *added], return_annotation=annotations["return"]
        )
        run.__annotations__ = annotations
        run.__name__ = body.__name__
        run.__doc__ = body.__doc__
        if gate is not None:
            # `run` reads `entry` when called: the gated entry replaces it before anyone can call it.
            entry = self._gated_entry(
                entry, gate, Tool.from_function(run, name=entry_name, structured_output=structured)
            )
        if method == TOOLS_CALL:
            self._tools[entry_name] = (entry, run, structured)
        return entry, run

    @staticmethod
    def _gated_entry(entry: _Entry, gate: Gate, tool: Tool) -> _Entry:
        """The entry with its gate bound to the tool's arguments; it records tool results, what the model is told
        of the approval included."""
        gated = gate.bind(entry.name, tool.parameters, argument_validator(tool))
        return replace(entry, gate=gated, result=_CALL_TOOL_RESULT, convert=tool.fn_metadata.convert_result)

    def _hear_changes(self) -> None:
        """Wake waiting calls on every change made in this process that they wait on."""
        if self._hearing:
            return
        self._hearing = True
        loop = asyncio.get_running_loop()
        wakeups = self._wakeups

        def from_any_thread(subject: str) -> None:
            if wakeups.awaited(subject):
                loop.call_soon_threadsafe(wakeups.changed, subject)

        self.store.add_change_listener(from_any_thread)

    async def _listen(self) -> None:
        """Wake waiting calls on the changes other instances announce, while any call here waits."""
        await self.store.listen(self._wakeups.changed, self._wakeups)

    def close(self) -> None:
        self.store.close()

    # -- tasks (see `server/tasks`; the wire is in `eras/tasks_ext` and `eras/tasks_legacy`) ---------------

    def _task_service(self, settings: TaskSettings) -> TaskService:
        book = TaskBook(self._async_store, self._clock)
        runner = TaskRunner(self._async_store, self._leases, self.timing.lease, self._clock, book, self._wakeups)
        runner.body = self._task_body
        wires: list[Any] = [ExtWire(), LegacyWire()]
        store, clock = self._async_store, self._clock
        return TaskService(store, runner, book, settings, wires, clock, self._wakeups, self._tool_result)

    def tasks_extension(self) -> TasksExtension:
        """The MCP extension serving `tasks/*` on both eras; `server()` installs it (pass it to a server built
        elsewhere, with `tasks_middleware()`)."""
        principal_of = self._task_caller
        ext, legacy = ExtMethods(self.tasks, principal_of), LegacyMethods(self.tasks, principal_of)
        return TasksExtension(self.tasks, [*ext.bindings(), *legacy.bindings()])

    def _approval_extension(self) -> list[ToolApprovalExtension]:
        """The tool-approval extension's advertisement, when this server serves it."""
        return [ToolApprovalExtension()] if self.tool_approval else []

    def tasks_middleware(self) -> LegacyTasksMiddleware:
        return LegacyTasksMiddleware(self.tasks)

    def _task_caller(self, context: Any) -> Principal:
        return self.identity.principal_for(context.request)

    async def _accept_task(
        self, entry: _Entry, call: Call, request: TaskRequest, arguments: dict[str, Any]
    ) -> TaskAccepted:
        principal = self.identity.principal_for(call.request.request)
        jsonable = _jsonable(arguments)
        target = _target(entry, jsonable)
        admit = functools.partial(self._admit_approval, principal) if request.approval else None
        try:
            return await self.tasks.accept(
                request, principal, target, _idempotency_key(call.request.meta), jsonable, call.declared, admit
            )
        except ApprovalLimited as limited:
            log.info("tool %s: no approval task for %s: %s", entry.name, principal.principal_id, limited)
            raise _NotApproved(str(limited)) from None
        except StoreUnavailable as down:
            log.warning("tool %s could not become a task: %s", entry.name, down.for_log())
            raise _unavailable(entry, down) from None

    async def _become_task(
        self, entry: _Entry, call: Call, request: TaskRequest, arguments: dict[str, Any]
    ) -> NoReturn:
        """End the call as the task it becomes (`TaskAccepted`, which the era's wire code answers)."""
        raise await self._accept_task(entry, call, request, arguments)

    def _task_beginning(self, entry: _Entry, call: Call, request: TaskRequest, arguments: dict[str, Any]) -> BeginTask:
        """What `flow.begin_task()` does on this call: the call's operation becomes a task, answered as one."""

        async def begin() -> None:
            await self._become_task(entry, call, request, arguments)

        return begin

    def _tool_result(self, tool: str, value: JSONValue) -> CallToolResult:
        entry, run, structured = self._tools[tool]
        convert = Tool.from_function(run, name=tool, structured_output=structured).fn_metadata.convert_result
        return cast(CallToolResult, convert(entry.result.validate_python(value)))

    async def _task_body(self, operation: Operation, principal: Principal, meta: TaskMeta) -> None:
        """Run a task's body to its end; the operation records how it ended, as for any call."""
        book = self.tasks.book
        found = self._tools.get(operation.target)
        by_approval = meta.approval and found is not None and found[0].gate is not None
        if found is None or (found[0].task is TaskPolicy.NEVER and not by_approval):
            message = f"The tool {operation.target!r} is not served as a task here"
            await book.fail(operation, principal, {"code": INTERNAL_ERROR, "message": message})
            return
        entry, run, _ = found
        declared = Declared(form=meta.form, url=meta.url)
        era = TaskEra(operation, declared, book, self.tasks.settings.poll_interval)
        target = Target(entry.method, entry.name, operation.request_digest)
        try:
            arguments = Tool.from_function(run, name=entry.name).fn_metadata.validate_arguments(dict(meta.arguments))
            async with self._kept_leases() as leases:
                served = _ServedCall(
                    entry=entry,
                    era=era,
                    principal=principal,
                    target=target,
                    key=None,
                    arguments=arguments,
                    answers=None,
                    about=functools.partial(summarize_call, entry.name, meta.arguments),
                    leases=leases,
                    # The task exists because the call needed approval: it still does, whatever `when` says now.
                    gated=meta.approval or _gated(entry, arguments),
                    approval_task=meta.approval,
                )
                await telemetry.traced_call(entry.method, entry.name, "task", self._run_as(served), replay=Replayed)
            return
        except OperationEnded:
            return
        except CannotAsk as cannot:
            problem: BaseException = self._cannot_ask_error(cannot, era, entry)
        except (ToolError, ClientRefused, SwallowedSignal, KeyRefused, ValidationError, MCPError) as error:
            problem = error
        except StoreUnavailable:
            raise  # the runner leaves the task to be taken up again once the store is back
        except _AfterAnEffect as effect:
            raise effect.down from None  # as a crash would: taken up again, a step whose result was lost runs again
        except Exception:
            log.exception("task %s: the tool %s failed unexpectedly", operation.operation_id, entry.name)
            problem = MCPError(code=INTERNAL_ERROR, message=f"The tool {entry.name!r} failed unexpectedly")
        current = await self._async_store.get_operation(operation.operation_id, principal)
        if current.status is not OperationStatus.OPEN:
            return
        if isinstance(problem, MCPError):
            await book.fail(current, principal, {"code": problem.error.code, "message": problem.error.message})
            return
        await _finish(self._async_store, current, principal, OperationStatus.FAILED, None, str(problem))()

    # -- running a call -----------------------------------------------------------------------------

    def install(self, server: Server[Any]) -> None:
        """Seal requestState on a lowlevel `Server` with this key ring (an `MCPServer` does it itself)."""
        server.middleware.append(RequestStateBoundary(self.request_state_security, default_audience=server.name))

    async def run_tool(
        self,
        context: RequestContext,
        params: CallToolRequestParams,
        body: Callable[[Flow], Awaitable[CallToolResult]],
        *,
        fallback: Fallback = Fallback.ERROR,
        gate: GatedTool | None = None,
    ) -> CallToolResult | InputRequiredResult:
        """Run one `tools/call` of a lowlevel `Server` or FastMCP through a `Flow`; the body returns its result.

        `gate` (a `Gate` bound to the tool with `Gate.bind`) lets the call run only once approved; the body then
        reads the arguments it runs with from `flow.arguments`, which an edit changes.
        """
        arguments = dict(params.arguments or {})
        answers = arguments.pop(ANSWERS_ARGUMENT, None) if fallback is Fallback.ARGUMENTS else None
        entry = _Entry(
            TOOLS_CALL, params.name, lambda flow: body(flow), "flow", _CALL_TOOL_RESULT, fallback, gate=gate,
            convert=None if gate is None else _as_recorded,
        )  # fmt: skip
        call = Call(context, params.input_responses, params.request_state)
        try:
            result = await self._serve(entry, call, arguments, answers, pass_arguments=False)
        except ToolError as error:
            return CallToolResult(content=[TextContent(type="text", text=str(error))], is_error=True)
        if isinstance(result, Replayed):
            return result.marked(result.value)
        return cast(CallToolResult | InputRequiredResult, result)

    async def _serve(
        self,
        entry: _Entry,
        call: Call,
        arguments: dict[str, Any],
        answers: Any,
        *,
        pass_arguments: bool = True,
        may_be_task: bool = False,
    ) -> Any:
        """Run the entry and say what went wrong the way its method and era expect."""
        era = self._era(call)
        try:
            served = self._started(entry, call, era, arguments, answers, pass_arguments, may_be_task)
            return await telemetry.traced_call(entry.method, entry.name, call.era.value, served, replay=Replayed)
        except CannotAsk as cannot:
            raise self._cannot_ask_error(cannot, era, entry) from None
        except AwaitingApprovers as waiting:
            log.info("%s %s: %s; the call ends, the approval stays open", entry.kind, entry.name, waiting.waiting)
            if entry.method == TOOLS_CALL:
                raise _NotApproved(waiting.said(entry.kind)) from None
            raise MCPError(code=INVALID_REQUEST, message=waiting.said(entry.kind)) from None
        except KeyRefused as refused:
            log.info("%s %s refused: %s", entry.kind, entry.name, refused.conflict)
            raise MCPError(code=INVALID_PARAMS, message=str(refused.conflict)) from None
        except ClientRefused as refused:
            if entry.method == TOOLS_CALL:
                raise ToolError(str(refused)) from None
            raise MCPError(code=INVALID_REQUEST, message=str(refused)) from None
        except SwallowedSignal as swallowed:
            log.error("%s %s: %s", entry.kind, entry.name, swallowed)
            if entry.method == TOOLS_CALL:
                raise ToolError(str(swallowed)) from None
            raise MCPError(code=INTERNAL_ERROR, message=str(swallowed)) from None
        except StoreUnavailable as down:
            log.warning("%s %s failed: %s", entry.kind, entry.name, down.for_log())
            raise _unavailable(entry, down) from None
        except _AfterAnEffect as effect:
            log.warning("%s %s failed after a step ran: %s", entry.kind, entry.name, effect.down.for_log())
            raise _unavailable(entry, effect.down, step_unrecorded=True) from None

    async def _started(
        self,
        entry: _Entry,
        call: Call,
        era: EraAdapter,
        arguments: dict[str, Any],
        answers: Any,
        pass_arguments: bool,
        may_be_task: bool,
    ) -> Any:
        """All the runtime does for one call, from its first check on: whatever ends it, in the call's span and
        before its one log line (`telemetry.traced_call`), a refusal before the body runs included."""
        self.check_fallback(entry.fallback)
        begin_task: BeginTask | None = None
        if may_be_task and self._waits_out_of_band(entry, call, arguments):
            await self._become_task(entry, call, self._approval_task(entry), arguments)
        if may_be_task and (request := self.tasks.decide(entry.name, call)) is not None:
            if entry.task_start is TaskStart.CALL:
                await self._become_task(entry, call, request, arguments)
            begin_task = self._task_beginning(entry, call, request, arguments)
        async with self._kept_leases() as leases:
            return await self._run(
                entry, call, era, leases, arguments, answers, pass_arguments=pass_arguments, begin_task=begin_task
            )

    def _check_approval_window(self, tool: str, gate: Gate | None) -> None:
        """A tool-approval task must outlive its approval (the draft's retention rule), and no task outlives
        `TaskSettings.max_ttl`: a gate that waits as long or longer is refused here rather than left to let its
        task expire, still `working`, before the approval could be given."""
        if not self.tool_approval or gate is None or gate.backend is None:
            return
        longest = self.tasks.settings.max_ttl
        if gate.ttl >= longest:
            raise GateRefused(
                f"tool {tool!r}: Gate(ttl={gate.ttl}) is not shorter than the longest task TTL "
                f"(TaskSettings(max_ttl={longest})), so its approval task would expire before its approval; "
                "shorten the gate's TTL or raise max_ttl"
            )

    async def _admit_approval(self, principal: Principal) -> None:
        """The draft's limits on approval requests, asked as a new approval task is created: the principal's open
        approval tasks (counted in the store, the new one with them) and their rate (this instance's bucket)."""
        limits = self.tool_approval_limits
        now = self._clock()
        tools = [name for name, (entry, _, _) in self._tools.items() if entry.gate and entry.gate.gate.backend]
        open_now = await self._async_store.count_open_operations(
            principal.principal_id, method=TOOLS_CALL, targets=tools, now=now
        )
        if open_now > limits.open_per_principal:
            raise ApprovalLimited(
                f"Too many of your calls are waiting for approval already ({limits.open_per_principal} at most)",
                "Try again once one of them has been decided or has expired.",
            )
        wait = self._approval_requests.take(principal.principal_id, now)
        if wait is not None:
            raise ApprovalLimited(
                f"Too many approval requests in a short time (at most {limits.burst} at once, then "
                f"{limits.requests_per_minute:g} a minute)",
                retry_in(wait),
            )

    def _waits_out_of_band(self, entry: _Entry, call: Call, arguments: dict[str, Any]) -> bool:
        """Whether this call becomes a tool-approval task: the server serves the extension, the request declared
        it, and the call needs an approval that others (people, a policy, an agent) can still give."""
        if not self.tool_approval or entry.gate is None or entry.gate.gate.backend is None:
            return False
        return declared_tool_approval(call) and _gated(entry, arguments)

    def _approval_task(self, entry: _Entry) -> TaskRequest:
        """The task of a call waiting on its approval: it lives the approval's TTL, then the default task lifetime
        for the run and its result (never past the server's longest)."""
        assert entry.gate is not None
        lasts = entry.gate.gate.ttl + self.tasks.settings.default_ttl
        return TaskRequest(EXT_ERA, ttl_ms=ttl_ms(lasts), approval=True)

    @asynccontextmanager
    async def _kept_leases(self) -> AsyncIterator[Leases]:
        """The server's lease keeper, which its lifespan runs; a call served without that lifespan (a lowlevel
        `Server`) brings a keeper of its own."""
        if self._keeping.running:
            yield self._leases
            return
        own = Leases(self._async_store, self.timing.lease, self._clock)
        async with beside(own.run):
            yield own

    def _era(self, call: Call) -> EraAdapter:
        era = call.era
        if era is Era.MRTR:
            timing, state = self.timing, self.request_state
            settings = RoundSettings(
                timing.long_poll, state.ttl, state.answers_without_state, self._clock, timing.reask_after
            )
            return MrtrEra(call, settings)
        if era is Era.LEGACY:
            return LegacyEra(call, self._notices, self.timing.reask_after)
        return UnaskableEra()

    async def _run(
        self,
        entry: _Entry,
        call: Call,
        era: EraAdapter,
        leases: Leases,
        arguments: dict[str, Any],
        answers: Any,
        *,
        pass_arguments: bool = True,
        begin_task: BeginTask | None = None,
    ) -> Any:
        jsonable = _jsonable(arguments)
        served = _ServedCall(
            entry=entry,
            era=era,
            principal=self.identity.principal_for(call.request.request),
            target=_target(entry, jsonable),
            key=_idempotency_key(call.request.meta),
            arguments=arguments,
            answers=answers,
            about=functools.partial(summarize_call, entry.name, jsonable),
            leases=leases,
            begin_task=begin_task,
            pass_arguments=pass_arguments,
            gated=_gated(entry, arguments),
        )
        return await self._run_as(served)

    async def _run_as(self, served: _ServedCall) -> Any:
        entry = served.entry
        unavailable_again = True
        for _ in range(MAX_STALE_RUNS):
            try:
                return await self._run_once(served)
            except StaleSnapshot as stale:
                log.info(
                    "%s %s ran on records that changed meanwhile (%s); running it again", entry.kind, entry.name, stale
                )
            except _AfterAnEffect as effect:
                # A step's function ran and its result is not recorded: record it before anything runs again.
                down = effect.down
                if not unavailable_again or down.remedy is not None:
                    raise
                unavailable_again = False
                await anyio.sleep(UNAVAILABLE_PAUSE.total_seconds())
                if not await effect.writes.keep_results():
                    raise
                log.info("%s %s met an unavailable store (%s); its step results kept, running it again", entry.kind,
                         entry.name, down)  # fmt: skip
            except StoreUnavailable as down:
                # A lost connection (the database restarted, a failover) fails the unit that met it, and only that
                # unit: nothing of it committed. Run the call again once, on fresh connections, before saying so.
                if not unavailable_again or down.remedy is not None:
                    raise
                unavailable_again = False
                log.info("%s %s met an unavailable store (%s); running it again", entry.kind, entry.name, down)
                await anyio.sleep(UNAVAILABLE_PAUSE.total_seconds())
        raise MCPError(code=INTERNAL_ERROR, message="The records of this call kept changing while it ran; try again")

    async def _run_once(self, served: _ServedCall) -> Any:
        entry, principal, answers = served.entry, served.principal, served.answers
        store = self._async_store
        writes = HeldWrites(store)
        try:
            resumed = await served.era.resume(store, principal, served.target, writes)
        except OperationEnded as ended:
            return _ended(ended.operation, entry)
        fresh = False
        if resumed is None:
            try:
                found = await self._attach(served, writes)
            except OperationEnded as ended:
                return _ended(ended.operation, entry)
            if isinstance(found, Replayed):
                await writes.commit()
                return found
            operation, fresh = found.operation, found.fresh
            listed = []
            if not fresh:
                listed = await store.list_decisions(
                    principal,
                    operation_id=operation.operation_id,
                    limit=OPERATION_DECISIONS_READ,
                )
        else:
            operation, listed = resumed.operation, resumed.decisions
        served.ran_on.append(operation.operation_id)
        telemetry.in_operation(operation)
        decisions = {d.key: d for d in reversed(listed)}
        run = Execution(
            store=store,
            operation=operation,
            principal=principal,
            decisions=decisions,
            settings=CallSettings(
                clock=self._clock,
                decision_url=self.decision_url if self._base_url else None,
                fallback=entry.fallback,
                wakeups=self._wakeups,
                lease=self.timing.lease,
                approver_wait=self.timing.approver_wait,
                begin_task=served.begin_task,
            ),
            writes=writes,
            leases=served.leases,
            argument_answers=answers if isinstance(answers, dict) else None,
            about=served.about,
            fresh=fresh,
            holder=served.holder,
        )
        run.asker = served.era.asker()
        try:
            return await self._conclude(served, run, writes)
        except StoreUnavailable as down:
            if run.unjournaled is not None:  # that step's function ran: it runs again only once its result is kept
                raise _AfterAnEffect(down, writes) from down
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):  # an error of the call's own after a step: its result still counts
                await writes.keep_results()
            raise
        finally:
            await run.end()

    async def _conclude(self, served: _ServedCall, run: Execution, writes: HeldWrites) -> Any:
        """Run the body and end the call as its outcome says: a result, a suspended turn, a failed operation."""
        entry, operation, principal = served.entry, run.operation, run.principal

        async def end_as(to: OperationStatus, recorded: JSONValue, reason: str = "") -> Operation | None:
            """Commit what is held with the operation's end, fenced on the run lease; an end another call made
            first is returned instead."""
            finish = _finish(self._async_store, operation, principal, to, recorded, reason, fence=run.fence)
            winner = await writes.commit_with(finish)
            run.ended()
            return winner

        told: Sequence[str] = ()
        try:
            run.arguments, told = await self._approved(served, run)
            result = await entry.body(
                **{entry.flow_parameter: Flow(run)}, **(run.arguments if served.pass_arguments else {})
            )
            if entry.convert is not None:
                converted = entry.convert(result)
                result = _told(converted, told) if isinstance(converted, CallToolResult) else converted
        except Suspended as suspended:
            run.release_lease()  # with the round's commit: the retry, or an identical call, takes it at once
            try:
                return await served.era.suspended(suspended, run)
            except OperationEnded as ended:
                return _ended(ended.operation, entry)
        except OperationEnded as ended:
            return _ended(ended.operation, entry)
        except ToolError as error:
            await _swallowed(run, writes)
            await end_as(OperationStatus.FAILED, None, str(error))
            if told and not isinstance(error, _NotApproved):  # what the person changed is why it failed, perhaps
                raise ToolError(" ".join([*told, str(error)])) from error
            raise
        except (StaleSnapshot, KeyRefused):
            raise
        except BaseException as failure:
            cancelled = isinstance(failure, anyio.get_cancelled_exc_class())
            run.release_lease()
            with anyio.CancelScope(shield=True):
                try:
                    await writes.commit()
                except StaleSnapshot as stale:
                    if not cancelled:
                        raise
                    log.info("a cancelled %s %s left writes that lost meanwhile: %s", entry.kind, entry.name, stale)
            if not isinstance(failure, Signal) and not cancelled:
                await _swallowed(run, writes)
            raise
        await _swallowed(run, writes)
        try:
            recorded = cast(JSONValue, entry.result.dump_python(result, mode="json"))
            check_encodable(recorded)
        except (PydanticSerializationError, UnencodableValue) as unstorable:
            # Not the caller's fault and not the store's: the operation fails, its steps' results recorded with it.
            reason = f"the {entry.kind}'s result cannot be recorded: {unstorable}"
            await end_as(OperationStatus.FAILED, None, reason)
            log.error("%s %s: %s", entry.kind, entry.name, reason)
            message = f"The {entry.kind} {entry.name!r} returned a result that cannot be recorded: {unstorable}"
            if entry.method == TOOLS_CALL:
                raise ToolError(message) from None
            raise MCPError(code=INTERNAL_ERROR, message=message) from None
        if run.saw_expiry:
            winner = await end_as(OperationStatus.FAILED, recorded, "a question expired")
        else:
            winner = await end_as(OperationStatus.COMPLETED, recorded)
        if winner is not None and winner.status is OperationStatus.COMPLETED and winner.result != recorded:
            log.info("operation %s was completed by an overlapping call; returning its result", winner.operation_id)
            return entry.result.validate_python(winner.result)
        return result

    async def _approved(self, served: _ServedCall, run: Execution) -> tuple[dict[str, Any], Sequence[str]]:
        """The arguments the body runs with, and what the model is told of their approval besides the result: the
        call's own when no gate applies; the call's own, and which grant let it through, when a standing grant of the
        person's covers the call (its use audited with the call's first commit); as the person approved them when
        one does, and a `ToolError` saying what became of the call when they did not approve it (it then ends
        unrun)."""
        gated = served.entry.gate
        # Gated per operation, not per call: once its approval was asked, every call of it waits on the answer,
        # whatever `when` says now (a `when` that reads the clock or a database must not let a twin run unasked).
        if gated is None or not (served.gated or run.approval is not None):
            return served.arguments, ()
        grants = gated.gate.grants
        # A client no verified token names is every such app at once: nothing is granted to it, or let through.
        known = served.principal.client_id != UNKNOWN_CLIENT
        offer = grants.offer(served.arguments, gated.tool) if grants is not None and known else None
        if offer is not None and run.approval is None:
            grant = await run.let_through(gated.tool, offer)
            if grant is not None:
                return served.arguments, [told_of_use(grant, offer.grants)]
        answer = await run.approve(gated, _jsonable(served.arguments), offer)
        by_approvers = gated.gate.approvers is not None
        if isinstance(answer, Approved):
            edited = {edit.name for edit in answer.edits}
            # An argument the person left alone runs with the call's own value, not one rebuilt from its JSON
            # (a SecretStr, a datetime with its zone, a model's private state survive that way).
            kept = {name: value for name, value in served.arguments.items() if name not in edited}
            runs_with = {**answer.arguments, **kept}
            if gated.gate.backend is not None:
                await self._reevaluated(served, run, runs_with, frozenset(edited))
            told = told_the_model(answer, approvers=by_approvers)
            return runs_with, [*told, *_standing(run, gated, offer, answer)]
        if isinstance(answer, Rejected | Declined):
            rejected = answer if isinstance(answer, Rejected) else Rejected()
            raise _denied(served, run, " ".join(told_the_model(rejected, approvers=by_approvers)))
        raise _denied(served, run, EXPIRED if isinstance(answer, Expired) else DISMISSED)

    async def _reevaluated(
        self, served: _ServedCall, run: Execution, runs_with: dict[str, Any], edited: frozenset[str]
    ) -> None:
        """Evaluate again once the approval carried, just before the tool runs (the draft's re-evaluation): the
        approval is this very call's (tool, arguments, requester), the approvers changed only editable arguments,
        a tool-approval task's approval has not lapsed meanwhile (a task resumed late, after its instance died),
        and the backend still allows the call as it will run: `runs_with`, the arguments the body gets, approvers'
        edits (`edited`) applied. Any of these failing ends the call unrun, saying so."""
        approval = run.approval
        gate = served.entry.gate
        assert approval is not None
        assert gate is not None
        assert gate.gate.backend is not None
        operation = run.operation
        called = _jsonable(served.arguments)
        running = _jsonable(runs_with)
        same_call = (
            approval.origin_request_digest == operation.request_digest == served.target.request_digest
            and approval.origin_request_digest == _target(served.entry, called).request_digest
            and approval.operation_id == operation.operation_id
            and approval.principal == served.principal
        )
        changed = {name for name in called.keys() | running.keys() if called.get(name) != running.get(name)}
        if not same_call or not changed <= edited <= set(gate.fields):
            log.warning("approval %s is not for the call %s runs; not running it", approval.elicitation_id,
                        operation.operation_id)  # fmt: skip
            raise _denied(served, run, NOT_THIS_CALL)
        if served.approval_task and run.now() >= approval.expires_at:
            raise _denied(served, run, LAPSED)
        digest = _target(served.entry, running).request_digest
        request = run.approval_request(approval, (running, digest, frozenset(changed)))
        if request is not None and not await gate.gate.backend.reevaluate(request):
            log.info("approval %s: its backend no longer allows the call on re-evaluation", approval.elicitation_id)
            raise _denied(served, run, REEVALUATED)

    async def _attach(self, served: _ServedCall, writes: HeldWrites) -> _Found | Replayed:
        """The call's open operation, its recorded result within the replay window, or a new operation.

        A new one is held, not written: the commit that makes it durable goes through the store's
        `begin_operation`, whose unique index lets one of several overlapping creators in. The others'
        commits fail as stale, and their next run attaches to the winner.
        """
        principal, target, key = served.principal, served.target, served.key
        store = self._async_store
        now = self._clock()
        found = await store.find_operations(
            principal,
            method=target.method,
            target=target.name,
            request_digest=None if key else target.request_digest,
            idempotency_key=key,
        )
        if key is None:
            found = [operation for operation in found if operation.idempotency_key is None]
        # A gated call without a key is a new request for approval once its operation ended: never replayed.
        replay_since = None if served.gated and key is None else now - self.timing.replay_window
        for operation in found[:1]:
            if key is not None and operation.request_digest != target.request_digest:
                raise KeyRefused(IdempotencyKeyConflict(key, f"the same {_KINDS[target.method]} with other arguments"))
            if operation.status is OperationStatus.OPEN and now < operation.expires_at:
                return _Found(operation, fresh=False)
            if operation.operation_id in served.ran_on and operation.status in _ENDED_UNREPLAYED:
                raise OperationEnded(operation)
            if (
                operation.status is OperationStatus.COMPLETED
                and replay_since is not None
                and operation.updated_at >= replay_since
            ):
                telemetry.in_operation(operation)
                log.info("replaying the recorded result of operation %s", operation.operation_id)
                return Replayed(served.entry.result.validate_python(operation.result), operation)
        candidate = new_operation(
            principal,
            method=target.method,
            target=target.name,
            request_digest=target.request_digest,
            now=now,
            ttl=self.timing.operation_ttl,
            idempotency_key=key,
        )

        async def begin() -> None:
            if not (await store.begin_operation(candidate, replay_since=replay_since)).created:
                raise StaleSnapshot(f"an identical {target.method} call started operation for {target.name} first")

        writes.hold(begin)
        return _Found(candidate, fresh=True)

    def _cannot_ask_error(self, cannot: CannotAsk, era: EraAdapter, entry: _Entry) -> Exception:
        """What the caller sees: the ARGUMENTS or WEB fallback's instructions, else what capability is missing.

        The fallbacks answer with a tool error on every era, since the call is meant to be made again. Else
        the era adapter says how a missing capability is reported. Sampling and roots have no fallback.
        """
        questions = [u for u in cannot.unaskable if u.decision is not None and u.form is not None]
        if cannot.fallback is Fallback.ARGUMENTS and questions and len(questions) == len(cannot.unaskable):
            return ToolError(_answers_instructions(questions))
        decisions = [u.decision for u in cannot.unaskable if u.decision is not None]
        if cannot.fallback is Fallback.WEB and decisions and len(decisions) == len(cannot.unaskable):
            return ToolError(_web_instructions(decisions, self.decision_url))
        if entry.method == RESOURCES_READ:  # -32021 on every era, as for prompts, in a resource's words
            return missing_capability(cannot.needs, "resource")
        return era.missing_capability(cannot.needs, tool=entry.method == TOOLS_CALL)


async def _swallowed(run: Execution, writes: HeldWrites) -> None:
    """A body that caught a signal and went on must not end as if nothing happened.

    What it holds is still committed where it can be (an answer it recorded, claims it let go), so the
    error loses nothing that was valid and leaves no claim to lapse.
    """
    if run.pending is None:
        return
    with anyio.CancelScope(shield=True):
        try:
            await writes.commit()
        except Signal as lost:
            log.info("writes held by a body that swallowed a signal were not kept: %s", lost)
    raise SwallowedSignal(run.pending)


def _unavailable(entry: _Entry, down: StoreUnavailable, *, step_unrecorded: bool = False) -> Exception:
    """What a caller gets when the store could not do its part, in the store's words for the condition.

    Every transition commits whole or not at all, so a retry attaches to what the operation recorded and goes
    on from there; it is suggested only where it can succeed, when no operator has to act first. A step whose
    function ran and whose result could not be recorded is the exception, and the caller is told. The cause
    (which may name a host or a path) stays in the log.
    """
    if step_unrecorded:
        message = (
            f"{down.plainly}; a step of this call ran and its result could not be recorded, so calling again "
            f"runs that step again: {_AGAIN[entry.method]} once the step's effect is checked."
        )
    elif down.remedy is None:
        message = f"{down.plainly}; nothing was lost: {_AGAIN[entry.method]}."
    else:
        message = f"{down.plainly}; this call changed nothing, and trying again fails the same way until {down.remedy}."
    if entry.method == TOOLS_CALL:
        return ToolError(message)
    return MCPError(code=INTERNAL_ERROR, message=message, data={"retryable": down.remedy is None})


def _ended(operation: Operation, entry: _Entry) -> Any:
    """What a call gets when an overlapping call ended the operation it waited in."""
    if operation.status is OperationStatus.COMPLETED:
        return Replayed(entry.result.validate_python(operation.result), operation)
    message = (
        f"An identical call of this {entry.kind} ended its operation as {operation.status} while this call waited; "
        "call again to start afresh"
    )
    if entry.method == TOOLS_CALL:
        raise ToolError(message)
    raise MCPError(code=INVALID_REQUEST, message=message)


def _finish(
    store: AsyncStore,
    operation: Operation,
    principal: Principal,
    to: OperationStatus,
    result: JSONValue,
    reason: str = "",
    *,
    fence: Claim | None = None,
) -> Callable[[], Awaitable[Operation | None]]:
    """The write that ends the operation; if an overlapping call ended it first, its end is returned instead.
    With `fence`, the run lease the call took: only while it still holds it (see `Execution`)."""

    async def finish() -> Operation | None:
        if operation.status is not OperationStatus.OPEN:
            return None
        try:
            return await store.finish_operation(
                operation, to, caller=principal, result=result, reason=reason, fence=fence
            )
        except (OperationConflict, OperationExpired) as lost:
            log.info("operation %s was finished elsewhere: %s", operation.operation_id, lost)
            return lost.current

    return finish


class _AfterAnEffect(Exception):
    """The store became unavailable after a step's function ran and before its result was journaled."""

    def __init__(self, down: StoreUnavailable, writes: HeldWrites) -> None:
        self.down = down
        self.writes = writes
        super().__init__(str(down))


@dataclass(frozen=True, slots=True)
class _Found:
    operation: Operation
    fresh: bool
    """Created for this call: it has no decisions yet, so there is nothing to read back."""


@dataclass(frozen=True, slots=True)
class Replayed:
    """A completed operation's recorded result handed to an identical call, which is told so in `_meta`."""

    value: Any
    operation: Operation

    def marked(self, result: CallToolResult) -> CallToolResult:
        recorded = {"recordedAt": self.operation.updated_at.isoformat(), "operationId": self.operation.operation_id}
        return result.model_copy(update={"meta": {**(result.meta or {}), REPLAYED_META_KEY: recorded}})


def _answers_instructions(questions: Sequence[Any]) -> str:
    if len(questions) == 1:
        [only] = questions
        return (
            f"This tool needs an answer to: {only.decision.message}\n"
            f"The client cannot show the question, so resend the same call with the argument "
            f'{ANSWERS_ARGUMENT}={{"{only.key}": {{...}}}} where the answer follows this JSON schema: '
            f"{json.dumps(only.form.schema, sort_keys=True)}"
        )
    listed = "\n".join(
        f"- {u.key}: {u.decision.message} (JSON schema: {json.dumps(u.form.schema, sort_keys=True)})" for u in questions
    )
    keys = ", ".join(f'"{u.key}": {{...}}' for u in questions)
    return (
        f"This tool needs answers to:\n{listed}\n"
        f"The client cannot show the questions, so resend the same call with the argument "
        f"{ANSWERS_ARGUMENT}={{{keys}}} where each answer follows its JSON schema."
    )


def _web_instructions(decisions: Sequence[Decision], decision_url: Callable[[str], str]) -> str:
    def where(decision: Decision) -> str:
        until = decision.expires_at.strftime("%Y-%m-%d %H:%M UTC")
        return f"answer at {decision_url(decision.elicitation_id)} (open until {until})"

    if len(decisions) == 1:
        [only] = decisions
        return (
            f"This tool needs an answer that this client cannot ask for: {only.message}\n"
            f"Please {where(only)}, signed in as the user this call runs for, "
            f"then call this tool again with the same arguments."
        )
    listed = "\n".join(f"- {d.message}\n  {where(d)}" for d in decisions)
    return (
        f"This tool needs answers that this client cannot ask for:\n{listed}\n"
        f"Answer them signed in as the user this call runs for, then call this tool again with the same arguments."
    )


def _idempotency_key(meta: Any) -> str | None:
    key = meta.get(IDEMPOTENCY_META_KEY) if isinstance(meta, dict) else None
    if not isinstance(key, str) or not 0 < len(key) <= 200:
        return None
    try:
        check_encodable(key)
    except UnencodableValue as bad:
        raise MCPError(code=INVALID_PARAMS, message=f"the idempotency key cannot be encoded: {bad.reason}") from None
    return key


class _NotApproved(ToolError):
    """The call ends unrun: the person rejected it, dismissed the approval, nobody answered in time, or the
    approvers have not decided yet."""


NOT_THIS_CALL = "The approval found is for another call (tool, arguments or requester differ); nothing ran."
LAPSED = "The approval lapsed before the call could run; nothing ran. Calling the tool again asks again."
REEVALUATED = (
    "The call was approved, but evaluated again just before running it is no longer allowed; nothing ran. "
    "Calling the tool again asks for a new approval."
)


def _denied(served: _ServedCall, run: Execution, said: str) -> _NotApproved:
    """The call ends unrun, saying `said`; a tool-approval task records, with its end, that its tool never ran."""
    if served.approval_task:
        run.hold_journal(DENIED_JOURNAL, said)
    return _NotApproved(said)


def check_gate(gate: Gate | None, fallback: Fallback) -> None:
    """A gate is answered by a person: never by `elicit_answers`, which the model itself fills in."""
    if gate is not None and fallback is Fallback.ARGUMENTS:
        raise GateRefused(
            "a gated tool cannot take Fallback.ARGUMENTS: the model would approve its own call through "
            "elicit_answers; use Fallback.WEB (the person approves on the decision page) or Fallback.ERROR"
        )


def argument_validator(tool: Tool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """How a gate checks the arguments a person edited: as the SDK validates the tool's input, `elicit_answers`
    (never an argument of the body) left out."""
    metadata = tool.fn_metadata

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        checked = metadata.validate_arguments(arguments)
        return {name: value for name, value in checked.items() if name != ANSWERS_ARGUMENT}

    return validate


def _as_recorded(result: CallToolResult) -> CallToolResult:
    return result


def _standing(run: Execution, gated: GatedTool, offer: GrantOffer | None, answer: Approved) -> list[str]:
    """Keep the standing grant the person gave with their approval, if the gate still offers it; what the model is
    told of it. An edit that changed the call's scope keeps none: the person chose it for the scope they were shown."""
    if answer.grant is None or offer is None or answer.grant not in offer.grants.kinds:
        return []
    if offer.grants.scope is not None:
        approved = offer.grants.offer(answer.arguments, gated.tool)
        if approved is None or approved.scope != offer.scope:
            return [grant_not_kept(answer.grant, offer.scope, None if approved is None else approved.scope)]
    grant = run.keep_grant(gated.tool, answer.grant, offer.grants.ttl(answer.grant), offer.scope)
    return [told_of_grant(grant)]


def _gated(entry: _Entry, arguments: dict[str, Any]) -> bool:
    return entry.gate is not None and entry.gate.gate.applies(arguments, entry.name)


def _told(result: CallToolResult, told: Sequence[str]) -> CallToolResult:
    """The tool's result with what the model is told of the call's approval (an edit, the person's note) first."""
    if not told:
        return result
    said: list[ContentBlock] = [TextContent(type="text", text=line) for line in told]
    return result.model_copy(update={"content": [*said, *result.content]})


def _jsonable(arguments: dict[str, Any]) -> Any:
    return _ARGUMENTS.dump_python(arguments, mode="json")


def _target(entry: _Entry, arguments: JSONValue) -> Target:
    """What the call asks, as a retry finds it: -32602 naming an argument that has no digest (a lone surrogate)."""
    try:
        digest = request_digest(entry.method, {"name": entry.name, "arguments": arguments})
    except UnencodableValue as bad:
        if bad.path[:1] != ("arguments",) or len(bad.path) < 2:
            message = f"the {entry.kind}'s name cannot be encoded: {bad.reason}"
            raise MCPError(code=INVALID_PARAMS, message=message) from None
        name, inside = bad.path[1], bad.path[2:]
        what = "variable" if entry.method == RESOURCES_READ else "argument"
        where = f" (at {json_path(bad.path[1:])})" if inside else ""
        message = f"{what} {name!r} of {entry.kind} {entry.name!r} cannot be encoded{where}: {bad.reason}"
        raise MCPError(code=INVALID_PARAMS, message=message) from None
    return Target(entry.method, entry.name, digest)


def _checked_base_url(url: str) -> str:
    parts = urlsplit(url)
    loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"public_base_url must be an http(s) URL, got {url!r}")
    if parts.scheme == "http" and not loopback:
        raise ValueError(f"public_base_url must use HTTPS outside loopback, got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("public_base_url carries no query, fragment or credentials")
    return url.rstrip("/")
