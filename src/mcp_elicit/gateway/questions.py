"""Durable questions of a relayed `tools/call`: what the gateway does when the upstream asks during a call.

Why this shape: a call that asks nothing must stay a plain relay (no store, no operation), and nobody knows
whether a call will ask until the upstream does. So every `tools/call` is sent upstream as an `UpstreamCall`,
owned by the gateway (its task group, not the downstream request's scope), whose events are the upstream's
questions and its end. While no question comes the downstream request just waits for the end and returns the
result. The first question switches the call into `Elicitation.run_tool`: its body attaches to the upstream
call, kept in memory under the operation's id, walks its events in order and asks each question with the
`Flow`, on whichever era the client speaks (live `elicitation/create` on 2025, an `InputRequiredResult` round on
2026-07-28), hands the answer to the upstream request waiting for it, and returns the upstream's result. A
2026-07-28 retry goes straight to `run_tool`: its body finds the same upstream call and walks it from the start,
the questions asked before coming back with their recorded answers. Identical calls share one operation (the
runtime's single flight) and so one upstream call; the upstream call a twin started before it asked is cancelled.

A question is keyed by its position in the call and a digest of what was asked (message and schema, or message
and URL): a re-run upstream (after a gateway restart, the upstream call lost with the process) that asks the
same thing gets the recorded answer, and one that asks something else is a new question.

The events besides a handshake upstream's question (`Question`): a 2026-07-28 upstream's `InputRequiredResult`
for a client that cannot take one (`Round`: its elicitation requests are asked the same way, its sampling and
roots requests sent to the client on its live call, and the upstream is called again with the responses and its
`requestState`), and a 2025-11-25 upstream's `-32042` for a client that
has no such error (`Required`: its URL flows become a round, and the call goes upstream again once the person
consented and the upstream said they are complete). A URL question's answer is the person's consent (the
upstream runs the flow); its decision is completed when the upstream says so.

A gated call (`call_gated`) runs its forward the same way once approved, as steps that run at most once: a
question of the upstream ends the forward's step, and handing it the answer is the next step. An upstream's `-32042`
there ends the step too, as a known outcome (the call did not run): its URL flows are asked on either era, and
forwarding the call again is a new step.

What does not survive a restart: the upstream call itself. A retry whose upstream call is gone starts it again
(the upstream's tool body runs again) and answers what it asks from the recorded decisions while they match.
An upstream call whose question nobody answers gives up after the question's TTL: the upstream is told `cancel`
and its request is cancelled, so that it does not hold its session forever; a question whose decision is closed
elsewhere meanwhile (an operator, the inbox) is answered to the upstream within a long poll.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    URL_ELICITATION_REQUIRED,
    CallToolRequestParams,
    CallToolResult,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    InputRequiredResult,
    ListRootsResult,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_elicit.approvals import GatedTool
from mcp_elicit.gateway.live import CLIENT_METHODS, ask_client, client_request
from mcp_elicit.gateway.remembered import NOTICE_TIMEOUT, Remembered
from mcp_elicit.gateway.upstream import Call, Lane, refused_by_upstream
from mcp_elicit.model import DecisionStatus, Principal
from mcp_elicit.model.form_schema import UnsupportedSchema
from mcp_elicit.server.answers import Accepted, Consented, Declined
from mcp_elicit.server.execution import OutcomeUnknown
from mcp_elicit.server.fallback import Fallback
from mcp_elicit.server.flow import DEFAULT_FORM_TTL, DEFAULT_URL_TTL, Flow
from mcp_elicit.server.runtime import Elicitation
from mcp_elicit.store import StoreError
from mcp_elicit.store.aio import AsyncStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

log = logging.getLogger(__name__)

TOOLS_CALL = "tools/call"
_ROUND_FIELDS = frozenset({"requestState", "inputResponses"})
Send = Callable[[Call, str, Mapping[str, Any]], Awaitable[tuple[Lane, dict[str, Any]]]]


@dataclass(eq=False)
class Question:
    """The upstream asked: the request's params, the lane it came on, and the answer once given (first wins)."""

    params: ElicitRequestParams
    lane: Lane
    answer: ElicitResult | ErrorData | None = None
    key: str | None = None
    """The key of its decision, once the call's operation asked it."""
    _given: anyio.Event = field(default_factory=anyio.Event)

    def give(self, answer: ElicitResult | ErrorData) -> None:
        if self.answer is None:
            self.answer = answer
            self._given.set()

    async def answered(self) -> ElicitResult | ErrorData:
        await self._given.wait()
        assert self.answer is not None
        return self.answer


@dataclass(frozen=True, slots=True)
class Ended:
    """The upstream answered the call: its raw result, or the error it (or the relay) ended it with."""

    result: dict[str, Any] | None
    error: MCPError | None = None
    lane: Lane | None = None


@dataclass(eq=False)
class Round:
    """A 2026-07-28 upstream answered with an `InputRequiredResult`, for a client that cannot take one: its input
    requests, by key as the upstream sent them, and the responses once given (the upstream is called again with
    them and its `requestState`)."""

    requests: dict[str, Any]
    responses: dict[str, Any] | None = None
    _given: anyio.Event = field(default_factory=anyio.Event)

    def give(self, responses: dict[str, Any]) -> None:
        if self.responses is None:
            self.responses = responses
            self._given.set()

    async def answered(self) -> dict[str, Any]:
        await self._given.wait()
        assert self.responses is not None
        return self.responses


@dataclass(eq=False)
class Required:
    """A 2025-11-25 upstream refused the call with `-32042` until the person completes these URL flows, for a client
    that cannot receive that error (2026-07-28), or during a gated forward; each flow's completion notice, once the
    upstream sends it, and whether the person consented to them all (the upstream is then called again)."""

    flows: list[ElicitRequestURLParams]
    done: dict[str, anyio.Event]
    consented: bool | None = None
    _given: anyio.Event = field(default_factory=anyio.Event)

    def give(self, consented: bool) -> None:
        if self.consented is None:
            self.consented = consented
            self._given.set()

    async def answered(self) -> bool:
        await self._given.wait()
        assert self.consented is not None
        return self.consented


Event = Question | Round | Required | Ended


class UpstreamCall:
    """One `tools/call` in flight upstream, and what happened on it so far, in order."""

    def __init__(
        self,
        call: Call,
        *,
        form_ttl: float,
        url_ttl: float,
        bridges: bool,
        expect: Callable[[str, str], anyio.Event] | None = None,
        watch: Callable[[UpstreamCall, Question], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self.call = call
        self.operation: tuple[str, Principal] | None = None
        """The operation that keeps the call (its id, whose it is), once one does."""
        self._watch = watch
        """What answers a question whose decision was closed elsewhere (an operator, the inbox) meanwhile."""
        self._expect = expect
        """For a client that cannot receive `-32042` (2026-07-28): the notice of completion of an upstream's URL flow
        by its id, awaited before the call is sent again."""
        self.bridges = bridges
        """Whether an `InputRequiredResult` of the upstream is a round the gateway answers (the client cannot take
        one) rather than the call's end, passed on as it came."""
        self.events: list[Event] = []
        self.claimed = False
        """An operation keeps it: an identical call's retry attaches to it rather than cancelling it."""
        self._form_ttl = form_ttl
        self._url_ttl = url_ttl
        """How long the upstream request waits for the answer to a form (or a round), or a URL question: as long as
        its decision stays open."""
        self._grew = anyio.Event()
        self.walked = anyio.Event()
        """A run of the operation read the call's end: nothing needs it in memory any more."""
        self._scope = anyio.CancelScope()
        self._why = ""

    async def run(self, send: Send, raw: Mapping[str, Any]) -> None:
        ended: Ended | None = None
        with self._scope:
            try:
                sent = raw
                while True:
                    try:
                        lane, result = await send(self.call, TOOLS_CALL, sent)
                    except MCPError as error:
                        if self._expect is None or error.code != URL_ELICITATION_REQUIRED:
                            raise
                        if not await self._required(error):
                            raise
                        continue  # the flows it required are done (or waited for): the call goes again
                    if not (self.bridges and result.get("resultType") == "input_required"):
                        break
                    responses = await self._round(result)
                    sent = {**raw, "inputResponses": responses}
                    if result.get("requestState") is not None:
                        sent["requestState"] = result["requestState"]
                ended = Ended(result, lane=lane)
            except MCPError as error:
                ended = Ended(None, error)
        if ended is None:
            ended = Ended(None, MCPError(INTERNAL_ERROR, f"{self.call.what} was cancelled upstream: {self._why}"))
        for event in self.events:
            if isinstance(event, Question):
                event.give(ElicitResult(action="cancel"))  # a question still waiting is over with its call
        self._post(ended)

    def cancel(self, why: str) -> None:
        """The upstream request is cancelled (the SDK tells the upstream); its end is an error saying `why`."""
        self._why = why
        self._scope.cancel()

    async def asked(self, lane: Lane, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        """What the upstream gets for its question: the answer the call's operation gives, or, once the question
        waited its TTL unanswered, `cancel` (and the upstream request is cancelled)."""
        question = Question(params, lane)
        self._post(question)
        waits = self._form_ttl if isinstance(params, ElicitRequestFormParams) else self._url_ttl
        with anyio.move_on_after(waits):
            async with anyio.create_task_group() as watching:
                if self._watch is not None:
                    watching.start_soon(self._watch, self, question)
                answer = await question.answered()
                watching.cancel_scope.cancel()
            return answer
        log.info("%s: nobody answered the upstream's question in time; the upstream call is cancelled", self.call.what)
        question.give(ElicitResult(action="cancel"))
        self.cancel(f"nobody answered its question within {waits:g} s")
        return ElicitResult(action="cancel")

    async def _required(self, error: MCPError) -> bool:
        """Whether the person consented to every URL flow a `-32042` of the upstream names (the call is then sent
        again); an error that names none is the upstream's answer."""
        assert self._expect is not None
        flows = _url_flows(error)
        if not flows:
            return False
        ids = [flow.elicitation_id for flow in flows if flow.elicitation_id is not None]
        upstream = self.call.pool.upstream.name if self.call.pool is not None else ""
        required = Required(flows, {elicitation_id: self._expect(upstream, elicitation_id) for elicitation_id in ids})
        self._post(required)
        with anyio.move_on_after(self._url_ttl):
            return await required.answered()
        self.cancel(f"nobody consented to the URL flows it required within {self._url_ttl:g} s")
        await anyio.sleep_forever()  # the cancellation just asked for ends this
        raise AssertionError("unreachable")

    async def _round(self, result: Mapping[str, Any]) -> dict[str, Any]:
        requests = result.get("inputRequests")
        round_ = Round(dict(requests) if isinstance(requests, Mapping) else {})
        self._post(round_)
        waits = self._form_ttl
        with anyio.move_on_after(waits):
            return await round_.answered()
        self.cancel(f"nobody answered its round within {waits:g} s")
        await anyio.sleep_forever()  # the cancellation just asked for ends this
        raise AssertionError("unreachable")

    async def event(self, position: int) -> Event:
        """The call's event at `position` (0: the first), once it happened."""
        while len(self.events) <= position:
            grew = self._grew
            await grew.wait()
        return self.events[position]

    def _post(self, event: Event) -> None:
        self.events.append(event)
        grew, self._grew = self._grew, anyio.Event()
        grew.set()


class Questions:
    """The gateway's durable `tools/call`: plain relay until the upstream asks, then `Elicitation.run_tool`."""

    def __init__(
        self,
        elicitation: Elicitation,
        send: Send,
        *,
        ttl: timedelta = DEFAULT_FORM_TTL,
        fallback: Fallback = Fallback.ERROR,
    ):
        self.elicitation = elicitation
        self.fallback = fallback
        """What a client that cannot be asked gets: an error saying so, or the link to the question's web page."""
        self.ttl = ttl
        """How long a relayed question stays open: its decision's TTL, and how long its upstream call waits."""
        self._send = send
        self.url_ttl = DEFAULT_URL_TTL
        """How long a relayed URL question stays open, and how long its completion notice is waited for."""
        self._calls: dict[str, UpstreamCall] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        self._store = AsyncStore(elicitation.store)
        self._flows: Remembered[tuple[Lane, str], _Flow] = Remembered(self.url_ttl.total_seconds())
        self._serving: anyio.Event | None = None
        self._expected: Remembered[tuple[str, str], anyio.Event] = Remembered(self.url_ttl.total_seconds())
        """Completion notices awaited for the URL flows of an upstream's `-32042`, by the upstream's name and its
        elicitation id (its lane is unknown: the error came as the call's answer)."""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Questions]:
        """Upstream calls run in this task group, so that one outlives the downstream request that started it."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield self
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def call_tool(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: CallToolRequestParams,
        raw: Mapping[str, Any],
        call: Call,
    ) -> CallToolResult | InputRequiredResult | Ended:
        """The call's outcome: the upstream's end when it asked nothing, else what `run_tool` made of it."""
        # A 2026-07-28 upstream's rounds reach a 2026-07-28 client as they are, and the gateway puts out none of its
        # own: what the call carries for a round (even without its state) is the upstream's.
        theirs = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and call.pool is not None and call.pool.modern
        if not theirs and (params.request_state is not None or params.input_responses):
            # The retry of one of the gateway's own rounds: what it carries for that round is not the upstream's.
            raw = {name: value for name, value in raw.items() if name not in _ROUND_FIELDS}
            return await self._durable(ctx, params, raw, call, None)
        started = self._start(call, raw)
        try:
            first = await started.event(0)
        except BaseException:
            started.cancel("its client gave up")  # cancelled, or went away: so does the upstream
            raise
        if isinstance(first, Ended):
            if first.error is not None:
                raise first.error
            return first
        return await self._durable(ctx, params, raw, call, started)

    async def _watch(self, upstream: UpstreamCall, question: Question) -> None:
        """Answer `question` for the upstream once its decision closed without an answer of the person's through this
        gateway (an operator's `decisions cancel`, a decline in the inbox, its expiry): looked at every long poll
        while it waits, so that an upstream request does not wait for a retry that will not come."""
        every = self.elicitation.timing.long_poll.total_seconds()
        while True:
            await anyio.sleep(every)
            if question.key is None or upstream.operation is None:
                continue
            operation_id, principal = upstream.operation
            try:
                found = await self._store.list_decisions(principal, operation_id=operation_id)
            except StoreError as error:
                log.info("%s: its question's decision could not be looked at: %s", upstream.call.what, error)
                continue
            asked = [d for d in found if d.key == question.key or d.key.startswith(f"{question.key}#")]
            if not asked or not all(d.status in _CLOSED for d in asked):
                continue
            last = max(asked, key=lambda decision: decision.created_at)
            log.info("%s: its question's decision is %s; the upstream is told", upstream.call.what, last.status)
            question.give(ElicitResult(action="decline" if last.status is DecisionStatus.DECLINED else "cancel"))
            return

    def _expect(self, upstream: str, elicitation_id: str) -> anyio.Event:
        done = anyio.Event()
        self._expected.watch((upstream, elicitation_id), done)
        return done

    def _expecting(self, upstream: str, flows: list[ElicitRequestURLParams]) -> dict[str, anyio.Event]:
        """The completion notices of a gated forward's `-32042` flows, by id: awaited since the forward's step saw
        the error (a 2026-07-28 client's retry, whose notice may have come between), else from now (a restart)."""
        ids = [flow.elicitation_id for flow in flows if flow.elicitation_id is not None]
        return {each: self._expected.get((upstream, each)) or self._expect(upstream, each) for each in ids}

    async def served(self) -> None:
        """The runtime's background work (wake-ups on store changes, leases, the sweeper), started by the first call
        that asks: until one does, the gateway does not touch its store at all."""
        if self._serving is None:
            assert self._tasks is not None, "the gateway is not running"
            self._serving = anyio.Event()
            self._tasks.start_soon(self._background, self._serving)
        await self._serving.wait()

    async def _background(self, started: anyio.Event) -> None:
        async with self.elicitation.lifespan()(None):
            started.set()
            await anyio.sleep_forever()

    def _start(self, call: Call, raw: Mapping[str, Any], *, gated: bool = False) -> UpstreamCall:
        """The upstream call, started in the gateway's task group. A gated forward's passes the upstream's rounds
        and errors on as its end: its body answers them, in steps of its own (`forward_approved`)."""
        assert self._tasks is not None, "the gateway is not running"
        modern = call.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and not gated
        started = UpstreamCall(
            call,
            form_ttl=self.ttl.total_seconds(),
            url_ttl=self.url_ttl.total_seconds(),
            bridges=not modern and not gated,
            expect=self._expect if modern else None,
            watch=self._watch,
        )
        call.asked = started.asked
        self._tasks.start_soon(self._run, started, raw)
        return started

    async def _run(self, started: UpstreamCall, raw: Mapping[str, Any]) -> None:
        """The upstream call, then, once the form TTL passed without a retry walking it to its end (an abandoned
        round, a client gone), forgotten: nothing of it stays in memory past its questions' life."""
        await started.run(self._send, raw)
        if not started.claimed:
            return
        with anyio.move_on_after(self.ttl.total_seconds()):
            await started.walked.wait()
        for operation_id, kept in list(self._calls.items()):
            if kept is started:
                del self._calls[operation_id]

    async def _durable(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: CallToolRequestParams,
        raw: Mapping[str, Any],
        call: Call,
        pending: UpstreamCall | None,
    ) -> CallToolResult | InputRequiredResult:
        async def body(flow: Flow) -> CallToolResult:
            upstream = self._attached(flow.operation_id, flow.principal, call, raw, pending)
            upstream.call.ctx = ctx  # progress and log messages go to the request the call is on now
            index = asked = 0
            consented: dict[str, _Flow] = {}
            """URL questions of the upstream's last round that the person consented to, by request key."""
            while True:
                event = await upstream.event(index)
                index += 1
                if consented:
                    await self._done_unless_asked(consented, event.requests if isinstance(event, Round) else {})
                    consented = {}
                if isinstance(event, Ended):
                    if self._calls.get(flow.operation_id) is upstream:
                        del self._calls[flow.operation_id]
                    upstream.walked.set()
                    if event.error is not None:
                        raise event.error
                    assert event.result is not None
                    return CallToolResult.model_validate(event.result)
                if isinstance(event, Required):
                    refused = await self._consent_to(flow, ctx, event, asked, call.what)
                    asked += len(event.flows)
                    if refused is not None:
                        return refused
                    continue
                if isinstance(event, Question):
                    event.key = question_key(asked, _wire(event.params))
                    answer, _ = await self._answer(flow, ctx, event.params, asked, event.lane)
                    event.give(answer)
                    asked += 1
                    continue
                try:
                    responses, consented, asked = await self._respond(flow, ctx, event.requests, asked, call.what)
                except MCPError as refused:
                    upstream.cancel(refused.error.message)
                    raise
                event.give(responses)

        try:
            await self.served()
            result = await self.elicitation.run_tool(ctx, params, body, fallback=self.fallback)
        finally:
            if pending is not None and not pending.claimed:
                pending.cancel("an identical call's upstream call answers it")
        return result

    def _attached(
        self,
        operation_id: str,
        principal: Principal,
        call: Call,
        raw: Mapping[str, Any],
        pending: UpstreamCall | None,
    ) -> UpstreamCall:
        """The upstream call of the operation: the one in memory, else the one this request started, else a new one
        (the first attempt's was lost with a restart, or ended in an error)."""
        kept = self._calls.get(operation_id)
        if kept is not None:
            return kept
        if pending is not None and not pending.claimed:
            chosen = pending
        else:
            log.info("%s: its upstream call is gone (the gateway restarted); calling the upstream again", call.what)
            chosen = self._start(call, raw)
        chosen.claimed = True
        chosen.operation = (operation_id, principal)
        self._calls[operation_id] = chosen
        return chosen

    async def call_gated(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: CallToolRequestParams,
        raw: Mapping[str, Any],
        call: Call,
        gated: GatedTool,
        fallback: Fallback = Fallback.ERROR,
    ) -> CallToolResult | InputRequiredResult:
        """A call its gate applies to: asked for approval through the runtime (every era), then forwarded with the
        arguments approved (`_forward_approved`). An error the upstream answers with fails the operation as a tool
        error naming it (the call ran upstream and was refused there): an identical call after that is a new
        request for approval."""

        async def body(flow: Flow) -> CallToolResult:
            return await self._forward_approved(flow, ctx, call, raw, params.name)

        await self.served()
        return await self.elicitation.run_tool(ctx, params, body, gate=gated, fallback=fallback)

    async def _forward_approved(
        self, flow: Flow, ctx: ServerRequestContext[Any, Any], call: Call, raw: Mapping[str, Any], name: str
    ) -> CallToolResult:
        """A gated call, once approved: forwarded with the arguments approved, and what the upstream asks on it
        asked through the flow as decisions of the call's operation, whichever era either side speaks.

        Every message that makes the upstream act is a step that runs at most once, and a step's start is marked
        only once it holds a session with the upstream (`Flow.step(holding=...)`): the forward (`forward 'name' to
        upstream 'u'`); for each round a 2026-07-28 upstream answers with, its questions asked, then the call sent
        again with the same arguments, the responses and the upstream's `requestState` (`..., round N`); for each
        question a handshake upstream asks on the call (`elicitation/create`), the answer handed to its request
        waiting for it (`..., answer N`); for each `-32042` of the upstream (the call did not run: a known outcome,
        kept as the step's), its URL flows asked, then the call forwarded again as it was approved (`..., again N`).
        The round's state and the questions are in the journal, so a retry of a 2026-07-28 client re-runs this body
        and finds them there.

        Why the upstream call of the questions machinery: a handshake upstream's question comes while its request
        waits, and a 2026-07-28 client can only be asked in a round, which ends the client's request. So the
        upstream request runs in the gateway's task group (an `UpstreamCall`, the same as an ungated call's), the
        forward's step ends at its first question (journaled as the question), and the retry's answer step finds
        the request in memory under the operation's id. What that cannot survive: a gateway restart (or a retry
        that reaches another instance) while the question is open. The upstream request is gone, and whether it
        did anything before asking is not known, so nothing is sent again: the call fails with `OutcomeUnknown`.
        """
        assert call.pool is not None
        pool = call.pool
        step = f"forward {name!r} to upstream {pool.upstream.name!r}"
        sent = {**{key: value for key, value in raw.items() if key not in _ROUND_FIELDS}, "arguments": flow.arguments}
        operation = (flow.operation_id, flow.principal)

        async def forward(named: str, request: Mapping[str, Any] = sent) -> dict[str, Any]:
            return await flow.step(
                named,
                self._forwarded,
                call,
                request,
                operation,
                returns=dict[str, Any],
                at_most_once=True,
                holding=pool.carrying(call),
            )

        outcome = await forward(step)
        asked = answers = rounds = forwards = 0
        consented: dict[str, _Flow] = {}
        while True:
            if "required" in outcome:
                flows = [ElicitRequestURLParams.model_validate(each) for each in outcome["required"]]
                required = Required(flows, self._expecting(pool.upstream.name, flows))
                refused = await self._consent_to(flow, ctx, required, asked, call.what)
                asked += len(flows)
                if refused is not None:
                    return refused
                forwards += 1
                outcome = await forward(f"{step}, again {forwards}")
                continue
            if "asked" in outcome:
                kept = self._calls.get(flow.operation_id)
                index = int(outcome["event"])
                question = kept.events[index] if kept is not None and index < len(kept.events) else None
                params = ElicitRequest.model_validate({"method": "elicitation/create", "params": outcome["asked"]})
                key = question_key(asked, outcome["asked"])
                if isinstance(question, Question):
                    question.key = key
                answer: ElicitResult | ErrorData | None = None
                if kept is not None:
                    lane = question.lane if isinstance(question, Question) else None
                    answer, _ = await self._answer(flow, ctx, params.params, asked, lane)
                # else its request is gone (a restart): the answer step's journal entry, if any, is what came of it,
                # and without one nothing can take the answer (`OutcomeUnknown`), so the person is not asked again.
                asked += 1
                answers += 1
                outcome = await flow.step(
                    f"{step}, answer {answers}",
                    self._answered,
                    ctx,
                    step,
                    index,
                    answer,
                    operation,
                    returns=dict[str, Any],
                    at_most_once=True,
                )
                continue
            if "error" in outcome:
                error = ErrorData.model_validate(outcome["error"])
                said = f"upstream {pool.upstream.name!r} answered {name!r} with error {error.code}: {error.message}"
                said = error.message if outcome.get("sent") is False else said
                raise ToolError(said)
            result = dict(outcome["result"])
            round_ = result.get("inputRequests") if result.get("resultType") == "input_required" else None
            if consented:
                await self._done_unless_asked(consented, round_ if isinstance(round_, Mapping) else {})
            if round_ is None:
                result.pop("resultType", None)
                return CallToolResult.model_validate(result)
            rounds += 1
            requests = round_ if isinstance(round_, Mapping) else {}
            responses, consented, asked = await self._respond(flow, ctx, requests, asked, call.what)
            again = {**sent, "inputResponses": responses}
            if result.get("requestState") is not None:
                again["requestState"] = result["requestState"]
            outcome = await forward(f"{step}, round {rounds}", again)

    async def _forwarded(self, call: Call, sent: Mapping[str, Any], operation: tuple[str, Principal]) -> dict[str, Any]:
        """The step that sends a gated call upstream: what came of it (`_outcome`)."""
        call.sent = False  # this request's own: an earlier round's left long ago
        call.once = True
        started = self._start(call, sent, gated=True)
        try:
            return await self._outcome(started, 0, operation)
        except BaseException:
            if not started.claimed:
                started.cancel("its client gave up")  # cancelled, or went away: so does the upstream
            raise

    async def _answered(
        self,
        ctx: ServerRequestContext[Any, Any],
        step: str,
        index: int,
        answer: ElicitResult | ErrorData | None,
        operation: tuple[str, Principal],
    ) -> dict[str, Any]:
        """The step that hands the answer to a handshake upstream's question of a gated call to its request waiting
        in memory: what came of it next (`_outcome`); `OutcomeUnknown` if the request is gone (then there is no
        answer: nobody was asked)."""
        kept = self._calls.get(operation[0])
        question = kept.events[index] if kept is not None and index < len(kept.events) else None
        if kept is None or not isinstance(question, Question) or answer is None:
            raise OutcomeUnknown(step, operation[0])
        kept.call.ctx = ctx  # progress and log messages go to the request the call is on now
        question.give(answer)
        return await self._outcome(kept, index + 1, operation)

    async def _outcome(self, upstream: UpstreamCall, index: int, operation: tuple[str, Principal]) -> dict[str, Any]:
        """What the gated call's upstream request did next: `{"asked": params, "event": index}` for a question (the
        request waits in memory for its answer), `{"result": ...}` as the upstream gave it (a round included),
        `{"required": flows}` for a `-32042` naming URL flows as the request's first event (the call did not run;
        their completion notices are awaited from now), or `{"error": ...}` for an error known to be the upstream's
        answer or to have been made before the request left (then with `"sent": False`: the gateway's own error,
        which says so); any other error is raised (whether the upstream ran the call is not known)."""
        event = await upstream.event(index)
        if isinstance(event, Question):
            upstream.claimed = True
            upstream.operation = operation
            self._calls[operation[0]] = upstream
            return {"asked": _wire(event.params), "event": index}
        assert isinstance(event, Ended), "a gated forward neither bridges rounds nor waits for URL flows"
        if self._calls.get(operation[0]) is upstream:
            del self._calls[operation[0]]
        upstream.walked.set()
        if event.error is None:
            assert event.result is not None
            return {"result": event.result}
        flows = _url_flows(event.error)
        if flows and index:
            # A `-32042` says the call did not run only as the request's first event: after a question was answered,
            # the upstream may have acted on it, so the call fails (passing the `-32042` on would have it retried).
            assert upstream.call.pool is not None
            name = upstream.call.pool.upstream.name
            raise MCPError(
                INTERNAL_ERROR,
                f"upstream {name!r} ended {upstream.call.what} with error {URL_ELICITATION_REQUIRED} after a question "
                "of its own was answered: it may have acted on the answer, so it is not sent again",
                {"upstream": name},
            )
        if flows:
            assert upstream.call.pool is not None
            for each in flows:
                if each.elicitation_id is not None:
                    self._expect(upstream.call.pool.upstream.name, each.elicitation_id)
            return {"required": [_wire(each) for each in flows]}
        if not upstream.call.sent or refused_by_upstream(event.error):
            error = event.error.error.model_dump(mode="json", exclude_none=True)
            return {"error": error} if upstream.call.sent else {"error": error, "sent": False}
        raise event.error

    async def _done_unless_asked(self, consented: Mapping[str, _Flow], still: Mapping[str, Any]) -> None:
        """A 2026-07-28 upstream asks again for a URL flow it has not seen complete: one the person consented to
        that its next answer no longer asks for is done."""
        for key, done in consented.items():
            if key not in still:
                await self._complete(done)

    async def _respond(
        self,
        flow: Flow,
        ctx: ServerRequestContext[Any, Any],
        requests: Mapping[str, Any],
        position: int,
        what: str,
    ) -> tuple[dict[str, Any], dict[str, _Flow], int]:
        """The responses to a 2026-07-28 upstream's round, by its request keys: its questions asked through the flow
        from `position` on, its sampling and roots requests sent to the client on its live call; the URL questions
        the person consented to, by request key; and the position of the next question. `MCPError` for a request
        that cannot be answered."""
        responses: dict[str, Any] = {}
        consented: dict[str, _Flow] = {}
        for key, request in requests.items():
            if isinstance(request, Mapping) and request.get("method") in CLIENT_METHODS:
                given = await _asked_of_client(ctx, request, what)
                if isinstance(given, ErrorData):
                    raise MCPError(given.code, f"{what}: {given.message}", given.data)
                responses[key] = given.model_dump(mode="json", by_alias=True, exclude_none=True)
                continue
            params = _elicitation(request, what)
            answer, flowing = await self._answer(flow, ctx, params, position, None)
            position += 1
            if isinstance(answer, ErrorData):
                raise MCPError(INVALID_PARAMS, f"{what}: {answer.message}")
            responses[key] = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
            if flowing is not None:
                consented[key] = flowing
        return responses, consented, position

    async def _consent_to(
        self, flow: Flow, ctx: ServerRequestContext[Any, Any], required: Required, position: int, what: str
    ) -> CallToolResult | None:
        """Ask the person for the URL flows an upstream's `-32042` requires, then wait (at most the runtime's long
        poll) for the upstream's notices that they are done, recorded as each decision's completion; the call goes
        upstream again then, and an upstream that still requires them says so again. A flow the person declined
        ends the call as a tool error, since nothing else reaches a client that cannot receive `-32042`."""
        consented: list[tuple[str, _Flow | None]] = []
        for offset, params in enumerate(required.flows):
            answer, flowing = await self._answer(flow, ctx, params, position + offset, None)
            if not isinstance(answer, ElicitResult) or answer.action != "accept":
                required.give(False)
                said = f"{what} needs {params.url} to be completed first, and the person did not agree to open it"
                return CallToolResult(content=[TextContent(type="text", text=said)], is_error=True)
            if params.elicitation_id is not None:
                consented.append((params.elicitation_id, flowing))
        with anyio.move_on_after(self.elicitation.timing.long_poll.total_seconds()):
            for elicitation_id, _ in consented:
                await required.done[elicitation_id].wait()
        for elicitation_id, flowing in consented:
            if flowing is not None and required.done[elicitation_id].is_set():
                await self._complete(flowing)
        required.give(True)
        return None

    async def _answer(
        self,
        flow: Flow,
        ctx: ServerRequestContext[Any, Any],
        params: ElicitRequestParams,
        position: int,
        lane: Lane | None,
    ) -> tuple[ElicitResult | ErrorData, _Flow | None]:
        """The answer for the upstream to its question at `position`, asked through the flow; for a URL question
        the person consented to, its flow too (whose end the upstream says, if anyone does)."""
        key = question_key(position, _wire(params))
        if isinstance(params, ElicitRequestFormParams):
            try:
                answer = await flow.ask_schema(params.message, params.requested_schema, key=key, ttl=self.ttl)
            except UnsupportedSchema as unsupported:
                return ErrorData(code=INVALID_PARAMS, message=f"the gateway cannot ask this form: {unsupported}"), None
            if isinstance(answer, Accepted):
                return ElicitResult.model_validate({"action": "accept", "content": answer.data}), None
            return ElicitResult(action="decline" if isinstance(answer, Declined) else "cancel"), None
        answered = await flow.relay_url(params.message, params.url, key=key, ttl=self.url_ttl)
        if not isinstance(answered, Consented):
            return ElicitResult(action="decline" if isinstance(answered, Declined) else "cancel"), None
        told = ctx.session if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS else None
        flowing = _Flow(answered.elicitation_id, flow.principal, told)
        if lane is not None and params.elicitation_id is not None:
            self._flows.watch((lane, params.elicitation_id), flowing)
        return ElicitResult(action="accept"), flowing

    async def completed(self, lane: Lane, elicitation_id: str) -> bool:
        """The upstream said its URL flow `elicitation_id` is complete: whether it was one of a durable question,
        whose decision is then recorded complete and whose client, if it was asked on a live call, told so under
        the decision's id (the one it was asked with)."""
        found = self._flows.answered((lane, elicitation_id))
        if found is not None:
            await self._complete(found)
            return True
        awaited = self._expected.get((lane.pool.upstream.name, elicitation_id))
        if awaited is None:
            return False
        awaited.set()
        return True

    async def _complete(self, found: _Flow) -> None:
        try:
            decision = await self._store.get_decision(found.decision, found.principal)
            if decision.status is DecisionStatus.EXTERNAL_PENDING:
                await self._store.transition(
                    decision,
                    DecisionStatus.EXTERNAL_COMPLETED,
                    caller=found.principal,
                    reason="the relayed server said the flow is complete",
                )
        except StoreError as error:
            log.warning("decision %s: its completion was not recorded: %s", found.decision, error)
        if found.session is not None:
            with anyio.move_on_after(NOTICE_TIMEOUT):
                try:
                    await found.session.send_elicit_complete(found.decision)
                except Exception as error:  # the client went away; the decision says it all the same
                    log.debug("completion of %s not told: %s", found.decision, type(error).__name__)


@dataclass(frozen=True, slots=True)
class _Flow:
    """A URL question the person consented to: its decision, whose it is, and the live session asked, if any."""

    decision: str
    principal: Principal
    session: ServerSession | None


async def _asked_of_client(
    ctx: ServerRequestContext[Any, Any], request: Mapping[str, Any], what: str
) -> CreateMessageResult | CreateMessageResultWithTools | ListRootsResult | ErrorData:
    """A sampling or roots request of a 2026-07-28 upstream's round, sent to the 2025 client on its live call."""
    try:
        sent = client_request(request)
    except ValueError as malformed:
        raise MCPError(INVALID_PARAMS, f"{what}: {malformed}") from None
    return await ask_client(ctx, sent, what)


def _elicitation(request: object, what: str) -> ElicitRequestParams:
    """An input request of a 2026-07-28 upstream's round as the question it asks (the requests of the client's own,
    sampling and roots, are sent to it as they are: `mcp_elicit.gateway.live`)."""
    method = request.get("method") if isinstance(request, Mapping) else None
    if method != "elicitation/create":
        raise MCPError(
            INVALID_PARAMS,
            f"{what}: the upstream asked for {method or 'something that is not a request'} in its round, which this "
            f"gateway does not relay (it relays elicitation/create, {', '.join(CLIENT_METHODS)})",
        )
    try:
        return ElicitRequest.model_validate(request).params
    except ValidationError:
        raise MCPError(INVALID_PARAMS, f"{what}: the upstream's round asks a malformed elicitation/create") from None


def _url_flows(error: MCPError) -> list[ElicitRequestURLParams]:
    """The URL flows a `-32042` names (none for another error, or one that names none readably)."""
    if error.code != URL_ELICITATION_REQUIRED:
        return []
    try:
        return list(UrlElicitationRequiredError.from_error(error.error).elicitations)
    except (ValidationError, KeyError, TypeError):
        return []


_CLOSED = frozenset({DecisionStatus.DECLINED, DecisionStatus.CANCELLED, DecisionStatus.EXPIRED})


def _wire(params: ElicitRequestParams) -> dict[str, Any]:
    return params.model_dump(mode="json", by_alias=True, exclude_none=True)


def question_key(position: int, asked: Mapping[str, Any]) -> str:
    """The decision key of the upstream's question at `position`: a changed question is a new decision."""
    shown = {name: asked.get(name) for name in ("mode", "message", "requestedSchema", "url")}
    digest = hashlib.sha256(json.dumps(shown, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"q{position + 1}.{digest[:16]}"


def fresh_holder() -> Hashable:
    """A lane holder of one call alone: whatever the upstream asks on its lane is that call's."""
    return object()
