"""`Elicitation`: installs durable decision points on an MCP server and runs tool and prompt bodies through them.

Guarantees, per tool call or prompt get: the operation is bound to the caller's principal and client; a
retry of the same call (same principal, client, method, tool or prompt name, arguments digest, or the
same idempotency key in `_meta`) attaches to the open operation instead of starting over; a completed
operation hands its recorded result to an identical call within `replay_window`; a 2026-07-28 round
state is accepted once and only from the principal it was issued to; nothing is ever asked that the
client did not declare (elicitation per mode, sampling, roots).

Does not guarantee: that two identical calls racing each other share one operation. Each then runs its
own operation; journaled steps stay single within each, and their idempotency keys differ.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar, cast, get_type_hints
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskGroup
from mcp.server import Server, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    ElicitationCapability,
    FormElicitationCapability,
    InputRequiredResult,
    InputResponses,
    MissingRequiredClientCapabilityErrorData,
    RootsCapability,
    SamplingCapability,
    TextContent,
    UrlElicitationCapability,
)
from pydantic import TypeAdapter

from mcp_elicit.model import (
    Decision,
    JSONValue,
    Operation,
    OperationStatus,
    Principal,
    new_operation,
    request_digest,
)
from mcp_elicit.server.eras import Declared, Era, Need, era_of
from mcp_elicit.server.fallback import ANSWERS_ARGUMENT, Fallback
from mcp_elicit.server.flow import A, Asker, CannotAsk, ClientQuery, ClientRefused, Flow, in_turn
from mcp_elicit.server.identity import IdentityPolicy
from mcp_elicit.server.legacy import CompletionNotices, LegacyAsker
from mcp_elicit.server.mrtr import DEFAULT_LONG_POLL, MrtrAsker, Suspend, input_required
from mcp_elicit.server.state import RoundState, refused
from mcp_elicit.server.waiting import Wakeups
from mcp_elicit.server.writes import HeldWrites, StaleSnapshot
from mcp_elicit.store import Clock, Consumption, OperationConflict, OperationExpired, Store, open_store, utc_now
from mcp_elicit.store.offload import AsyncStore
from mcp_elicit.store.postgres import PostgresStore

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

IDEMPOTENCY_META_KEY = "io.github.mcp-elicit/idempotencyKey"
TOOLS_CALL = "tools/call"
PROMPTS_GET = "prompts/get"
DEFAULT_REPLAY_WINDOW = timedelta(minutes=2)
DEFAULT_OPERATION_TTL = timedelta(hours=24)
MAX_STALE_RUNS = 3
CLOCK_SKEW = timedelta(seconds=60)
_CALL_TOOL_RESULT: TypeAdapter[Any] = TypeAdapter(CallToolResult)
_ARGUMENTS: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


class _CannotAskAnything:
    """The asker for peers of unknown or pre-elicitation versions: it can never ask."""

    def can(self, need: Need) -> bool:
        return False

    async def ask(self, flow: Flow, decision: Decision, form: Any) -> Decision:
        raise AssertionError("never called: can is always False")

    async def query(self, flow: Flow, key: str, query: ClientQuery, answer: type[A]) -> A:
        raise AssertionError("never called: can is always False")

    async def gather(self, items: Sequence[Awaitable[Any]]) -> list[Any]:
        return await in_turn(items)


@dataclass(frozen=True, slots=True)
class Call:
    """What one `tools/call` or `prompts/get` brings, through an `MCPServer` entry or a lowlevel handler."""

    request: ServerRequestContext[Any, Any]
    input_responses: InputResponses | None
    request_state: str | None

    @property
    def era(self) -> Era:
        return era_of(self.request.protocol_version)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A registered body: the method it answers and its name there are its operations' method and target."""

    method: str
    name: str
    body: Callable[..., Any]
    flow_parameter: str
    result: TypeAdapter[Any]
    fallback: Fallback

    @property
    def kind(self) -> str:
        return "tool" if self.method == TOOLS_CALL else "prompt"


class Elicitation:
    """Durable elicitation for one MCP server: its store, its requestState keys, its public base URL.

    `answers_without_state` (on by default): on 2026-07-28 a client may send `inputResponses` without any
    round's `requestState`, keyed like the questions, as a stateless server would expect (the spec asks
    servers to use what they recognize). Such an answer counts for a form question the request asks,
    validated like any answer, applied once, audited as given without a round. Turn it off to have
    every answer come through the round that asked for it.
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        keys: Sequence[bytes | str] | None = None,
        single_process: bool = False,
        state_ttl: float = 600.0,
        public_base_url: str | None = None,
        identity: IdentityPolicy | None = None,
        replay_window: timedelta = DEFAULT_REPLAY_WINDOW,
        operation_ttl: timedelta = DEFAULT_OPERATION_TTL,
        long_poll: timedelta = DEFAULT_LONG_POLL,
        answers_without_state: bool = True,
        clock: Clock = utc_now,
    ) -> None:
        if keys is None and not single_process:
            raise ValueError(
                "pass keys=[...] (the requestState key ring every instance shares), or single_process=True "
                "to use a key that dies with this process"
            )
        if keys is not None:
            self.request_state_security = RequestStateSecurity(keys=list(keys), ttl=state_ttl)
        else:
            self.request_state_security = RequestStateSecurity.ephemeral(ttl=state_ttl)
        self._state_ttl = timedelta(seconds=state_ttl)
        self.store = store if store is not None and not isinstance(store, str) else open_store(store, clock=clock)
        self._async_store = AsyncStore(self.store)
        self._base_url = _checked_base_url(public_base_url) if public_base_url else None
        self.identity = identity or IdentityPolicy()
        self.replay_window = replay_window
        self.operation_ttl = operation_ttl
        self.long_poll = long_poll
        self.answers_without_state = answers_without_state
        self._clock = clock
        self._server: MCPServer | None = None
        self._notices = CompletionNotices(self._async_store)
        self._wakeups = Wakeups()
        self._listening = False

    # -- installing -------------------------------------------------------------------------------

    def server(self, name: str, **kwargs: Any) -> MCPServer:
        """An `MCPServer` whose requestState boundary uses this key ring; tools registered here land on it.

        Its lifespan also runs the watcher that tells legacy clients answered `-32042` when their flow is done.
        """
        self._server = MCPServer(
            name,
            request_state_security=self.request_state_security,
            lifespan=self._lifespan(kwargs.pop("lifespan", None)),
            **kwargs,
        )
        return self._server

    def _lifespan(self, inner: Callable[[Any], AbstractAsyncContextManager[Any]] | None) -> Callable[[Any], Any]:
        notices = self._notices

        @asynccontextmanager
        async def lifespan(server: Any) -> AsyncIterator[Any]:
            async with anyio.create_task_group() as group:
                group.start_soon(notices.run)
                self._listen_for_changes(group)
                try:
                    if inner is None:
                        yield {}
                    else:
                        async with inner(server) as state:
                            yield state
                finally:
                    group.cancel_scope.cancel()

        return lifespan

    def attach(self, server: MCPServer) -> None:
        """Use a server built elsewhere; it must have been given `request_state_security=` from here."""
        self._server = server

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
    ) -> Callable[[F], F]:
        """Register a tool whose body takes a `Flow`; the body is written once for every protocol era.

        `fallback` says what a client that cannot be asked gets (see `Fallback`); `Fallback.WEB` needs
        `Elicitation(public_base_url=...)` and is refused here without it.
        """
        server = self._attached()
        self._check_fallback(fallback)

        def register(body: F) -> F:
            entry, run = self._bind(TOOLS_CALL, name, body, fallback)
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
    ) -> Callable[[F], F]:
        """Register a prompt whose body takes a `Flow` and returns what an `MCPServer` prompt returns.

        `prompts/get` then has a tool's durability: the operation (method `prompts/get`, target the prompt
        name) is bound to the caller, a retry attaches to it, and a completed one replays its messages.
        Prompt arguments are strings, so there is no `elicit_answers` fallback: a client that cannot be
        asked gets -32021 naming what is missing, on every era.
        """
        server = self._attached()

        def register(body: F) -> F:
            entry, run = self._bind(PROMPTS_GET, name, body, Fallback.ERROR)
            prompt = Prompt.from_function(
                run, name=entry.name, title=title, description=description or inspect.getdoc(body)
            )
            server.add_prompt(prompt)
            return body

        return register

    def _check_fallback(self, fallback: Fallback) -> None:
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
        self, method: str, name: str | None, body: Callable[..., Any], fallback: Fallback
    ) -> tuple[_Entry, Callable[..., Any]]:
        """The entry for `body`, and the function `MCPServer` registers: the body's parameters minus the
        Flow, plus the SDK's `Context` (and `elicit_answers` for an ARGUMENTS fallback)."""
        entry_name = name or body.__name__
        hints = get_type_hints(body, include_extras=True)
        signature = inspect.signature(body, eval_str=True)
        flow_names = [p.name for p in signature.parameters.values() if hints.get(p.name) is Flow]
        kind = "tool" if method == TOOLS_CALL else "prompt"
        if len(flow_names) != 1:
            raise TypeError(f"{kind} {entry_name!r} must take exactly one parameter annotated Flow")
        returned = hints.get("return", Any)
        entry = _Entry(method, entry_name, body, flow_names[0], TypeAdapter(returned), fallback)
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

        async def run(**kwargs: Any) -> Any:
            context: Context = kwargs.pop("mcp_ctx")
            answers = kwargs.pop(ANSWERS_ARGUMENT, None)
            call = Call(context.request_context, context.input_responses, context.request_state)
            return await self._serve(entry, call, kwargs, answers)

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*kept, *added], return_annotation=annotations["return"]
        )
        run.__annotations__ = annotations
        run.__name__ = body.__name__
        run.__doc__ = body.__doc__
        return entry, run

    def _listen_for_changes(self, group: TaskGroup) -> None:
        """Wake URL waiters on every move of their decision: from this process, and from other instances."""
        if self._listening:
            return
        self._listening = True
        loop = asyncio.get_running_loop()
        wakeups = self._wakeups

        def from_any_thread(elicitation_id: str) -> None:
            loop.call_soon_threadsafe(wakeups.changed, elicitation_id)

        self.store.add_change_listener(from_any_thread)
        if isinstance(self.store, PostgresStore):
            group.start_soon(self.store.listen, wakeups.changed)

    def close(self) -> None:
        self.store.close()

    # -- running a call -----------------------------------------------------------------------------

    def install(self, server: Server[Any]) -> None:
        """Seal requestState on a lowlevel `Server` with this key ring (an `MCPServer` does it itself)."""
        server.middleware.append(RequestStateBoundary(self.request_state_security, default_audience=server.name))

    async def run_tool(
        self,
        context: ServerRequestContext[Any, Any],
        params: CallToolRequestParams,
        body: Callable[[Flow], Awaitable[CallToolResult]],
        *,
        fallback: Fallback = Fallback.ERROR,
    ) -> CallToolResult | InputRequiredResult:
        """Run one `tools/call` of a lowlevel `Server` through a `Flow`; the body returns the tool's result."""
        self._check_fallback(fallback)
        arguments = dict(params.arguments or {})
        answers = arguments.pop(ANSWERS_ARGUMENT, None) if fallback is Fallback.ARGUMENTS else None
        entry = _Entry(TOOLS_CALL, params.name, lambda flow: body(flow), "flow", _CALL_TOOL_RESULT, fallback)
        call = Call(context, params.input_responses, params.request_state)
        try:
            result = await self._serve(entry, call, arguments, answers, pass_arguments=False)
        except ToolError as error:
            return CallToolResult(content=[TextContent(type="text", text=str(error))], is_error=True)
        return cast(CallToolResult | InputRequiredResult, result)

    async def _serve(
        self, entry: _Entry, call: Call, arguments: dict[str, Any], answers: Any, *, pass_arguments: bool = True
    ) -> Any:
        """Run the entry and say what went wrong the way its method and era expect."""
        try:
            return await self._run(entry, call, arguments, answers, pass_arguments=pass_arguments)
        except CannotAsk as cannot:
            raise _cannot_ask_error(cannot, call.era, entry, self.decision_url) from None
        except ClientRefused as refused:
            if entry.method == TOOLS_CALL:
                raise ToolError(str(refused)) from None
            raise MCPError(code=INVALID_REQUEST, message=str(refused)) from None

    async def _run(
        self, entry: _Entry, context: Call, arguments: dict[str, Any], answers: Any, *, pass_arguments: bool = True
    ) -> Any:
        principal = self.identity.principal_for(context.request.request)
        digest = request_digest(entry.method, {"name": entry.name, "arguments": _jsonable(arguments)})
        state: RoundState | None = None
        if context.era is Era.MRTR and context.request_state is not None:
            state = RoundState.decode(context.request_state)
        for _ in range(MAX_STALE_RUNS):
            try:
                return await self._run_once(
                    entry, context, arguments, answers, principal, digest, state, pass_arguments
                )
            except StaleSnapshot as stale:
                log.info(
                    "%s %s ran on records that changed meanwhile (%s); running it again", entry.kind, entry.name, stale
                )
        raise MCPError(code=INTERNAL_ERROR, message="The records of this call kept changing while it ran; try again")

    async def _run_once(
        self,
        entry: _Entry,
        context: Call,
        arguments: dict[str, Any],
        answers: Any,
        principal: Principal,
        digest: str,
        state: RoundState | None,
        pass_arguments: bool,
    ) -> Any:
        store = self._async_store
        writes = HeldWrites(store)
        asked: dict[str, str] = {}
        operation: Operation | None = None
        fresh = False
        if state is not None:
            writes.hold(partial(self._spend_round, state))
            operation = await self._resumed(principal, state, entry, digest)
            asked = state.asked
        if operation is None:
            attached = await self._attach(principal, entry, digest, _idempotency_key(context.request.meta), writes)
            if isinstance(attached, _Recorded):
                await writes.commit()
                return attached.value
            fresh = isinstance(attached, _Fresh)
            operation = attached.operation if isinstance(attached, _Fresh) else attached
        if fresh:
            decisions: dict[str, Decision] = {}
        else:
            listed = await store(store.sync.list_decisions, principal, operation_id=operation.operation_id, limit=1000)
            decisions = {d.key: d for d in reversed(listed)}
        flow = Flow(
            store=store,
            operation=operation,
            principal=principal,
            asker=self._asker(context.era, context, asked),
            decisions=decisions,
            clock=self._clock,
            decision_url=self.decision_url if self._base_url else None,
            fallback=entry.fallback,
            argument_answers=answers if isinstance(answers, dict) else None,
            wakeups=self._wakeups,
            writes=writes,
            fresh=fresh,
        )
        try:
            result = await entry.body(**{entry.flow_parameter: flow}, **(arguments if pass_arguments else {}))
        except Suspend as suspend:
            await writes.commit()
            wire, _ = input_required(suspend, operation.operation_id)
            return wire
        except ToolError as error:
            self._finish(writes, operation, principal, OperationStatus.FAILED, None, str(error))
            await writes.commit()
            raise
        except StaleSnapshot:
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):
                await writes.commit()
            raise
        recorded = cast(JSONValue, entry.result.dump_python(result, mode="json"))
        if flow.saw_expiry:
            self._finish(writes, operation, principal, OperationStatus.FAILED, recorded, "a question expired")
        else:
            self._finish(writes, operation, principal, OperationStatus.COMPLETED, recorded)
        await writes.commit()
        return result

    def _spend_round(self, state: RoundState) -> None:
        """The round's nonce, spent in the transaction that records what the round brought: a replay fails it."""
        expires_at = self._clock() + self._state_ttl + CLOCK_SKEW
        if self.store.consume_token(state.ledger_id, expires_at=expires_at) is Consumption.ALREADY_USED:
            log.warning("requestState round replayed for operation %s", state.operation_id)
            raise refused()

    def _asker(self, era: Era, context: Call, asked: dict[str, str]) -> Asker:
        protocol_version = context.request.protocol_version
        declared = Declared.of(context.request.session.client_capabilities, protocol_version)
        if era is Era.MRTR:
            without_state = self.answers_without_state and context.request_state is None
            return MrtrAsker(
                declared, context.input_responses, asked, self.long_poll, answers_without_state=without_state
            )
        if era is Era.LEGACY:
            return LegacyAsker(context.request.session, context.request.request_id, declared, notices=self._notices)
        return _CannotAskAnything()

    async def _resumed(self, principal: Principal, state: RoundState, entry: _Entry, digest: str) -> Operation | None:
        store = self._async_store
        try:
            operation = await store(store.sync.get_operation, state.operation_id, principal)
        except Exception:
            raise refused() from None
        if (operation.method, operation.target, operation.request_digest) != (entry.method, entry.name, digest):
            raise refused()
        return operation if operation.status is OperationStatus.OPEN else None

    async def _attach(
        self, principal: Principal, entry: _Entry, digest: str, key: str | None, writes: HeldWrites
    ) -> Operation | _Fresh | _Recorded:
        store = self._async_store
        now = self._clock()
        found = await store(
            store.sync.find_operations,
            principal,
            method=entry.method,
            target=entry.name,
            request_digest=None if key else digest,
            idempotency_key=key,
        )
        for operation in found[:1]:
            if operation.status is OperationStatus.OPEN and now < operation.expires_at:
                return operation
            if operation.status is OperationStatus.COMPLETED and now - operation.updated_at <= self.replay_window:
                log.info("replaying the recorded result of operation %s", operation.operation_id)
                return _Recorded(entry.result.validate_python(operation.result))
        fresh = new_operation(
            principal,
            method=entry.method,
            target=entry.name,
            request_digest=digest,
            now=now,
            ttl=self.operation_ttl,
            idempotency_key=key,
        )
        sync = self.store
        writes.hold(lambda: sync.create_operation(fresh))
        return _Fresh(fresh)

    def _finish(
        self,
        writes: HeldWrites,
        operation: Operation,
        principal: Principal,
        to: OperationStatus,
        result: JSONValue,
        reason: str = "",
    ) -> None:
        if operation.status is not OperationStatus.OPEN:
            return
        sync = self.store

        def finish() -> None:
            try:
                sync.finish_operation(operation, to, caller=principal, result=result, reason=reason)
            except (OperationConflict, OperationExpired) as lost:
                log.info("operation %s was finished elsewhere: %s", operation.operation_id, lost)

        writes.hold(finish)


@dataclass(frozen=True, slots=True)
class _Fresh:
    """An operation created for this call: it has no decisions yet, so there is nothing to read back."""

    operation: Operation


@dataclass(frozen=True, slots=True)
class _Recorded:
    value: Any


_DESCRIBED = {
    Need.FORM: "form elicitation",
    Need.URL: "url elicitation",
    Need.SAMPLING: "sampling",
    Need.ROOTS: "roots",
}


def _cannot_ask_error(cannot: CannotAsk, era: Era, entry: _Entry, decision_url: Callable[[str], str]) -> Exception:
    """What the caller sees: the ARGUMENTS or WEB fallback's instructions, else what capability is missing.

    The fallbacks answer with a tool error on every era, since the call is meant to be made again. Else
    -32021 with `data.requiredCapabilities` on 2026-07-28 and for prompts (which have no error result);
    a tool error the model can read for tools on the legacy eras. Sampling and roots have no fallback.
    """
    questions = [u for u in cannot.unaskable if u.decision is not None and u.form is not None]
    if cannot.fallback is Fallback.ARGUMENTS and questions and len(questions) == len(cannot.unaskable):
        return ToolError(_answers_instructions(questions))
    decisions = [u.decision for u in cannot.unaskable if u.decision is not None]
    if cannot.fallback is Fallback.WEB and decisions and len(decisions) == len(cannot.unaskable):
        return ToolError(_web_instructions(decisions, decision_url))
    needs = [need for need in Need if need in cannot.needs]
    described = " and ".join(_DESCRIBED[need] for need in needs)
    if era is Era.MRTR or entry.method != TOOLS_CALL:
        elicitation = None
        if Need.FORM in needs or Need.URL in needs:
            elicitation = ElicitationCapability(
                form=FormElicitationCapability() if Need.FORM in needs else None,
                url=UrlElicitationCapability() if Need.URL in needs else None,
            )
        required = ClientCapabilities(
            elicitation=elicitation,
            sampling=SamplingCapability() if Need.SAMPLING in needs else None,
            roots=RootsCapability() if Need.ROOTS in needs else None,
        )
        data = MissingRequiredClientCapabilityErrorData(required_capabilities=required).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        plural = "capabilities" if len(needs) > 1 else "capability"
        return MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"This {entry.kind} needs the client's {described} {plural}",
            data=data,
        )
    return ToolError(
        f"This tool needs to ask something ({described}), but this client cannot receive "
        f"{described} requests on this connection. Use a client that supports them."
    )


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
    return key if isinstance(key, str) and 0 < len(key) <= 200 else None


def _jsonable(arguments: dict[str, Any]) -> Any:
    return _ARGUMENTS.dump_python(arguments, mode="json")


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
