"""Single flight, case by case: what a reviewer found wrong in the runtime and the store, each shown failing.

Tool bodies run in-process behind the real SDK client (`Client(server, mode=era)`), one client per call,
so two calls overlap the way two connections would; the store is a real SQLite file or the machine's
PostgreSQL. Calls are ordered by events set from inside the bodies and steps, not by sleeping, except
where the defect is about time itself (a lease running out). The SDK's client, not
`mcp_elicit.testing.Harness`: the persons here are callbacks that hold a dialog open until an event, act on
the store mid-dialog, or send what a defect needs (a raw idempotency key, a bare round), none of which a
scripted answer by key can be.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, cast

import anyio
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.session import ElicitationFnT as Callback
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    RequestParamsMeta,
    TextContent,
)
from pydantic import BaseModel

from mcp_elicit.model import (
    DecisionStatus,
    Operation,
    OperationStatus,
    Operator,
    Principal,
    request_digest,
)
from mcp_elicit.server import IDEMPOTENCY_META_KEY, Accepted, Elicitation, Flow, RequestState, ResumePolicy, Timing
from mcp_elicit.server.eras.legacy import CompletionNotices
from mcp_elicit.store import open_store
from tests.helpers.person import accept
from tests.helpers.server import Approval

# On both engines: row locks and racing creators: what PostgreSQL decides, SQLite serialises.
pytestmark = [pytest.mark.anyio, pytest.mark.engines("sqlite", "postgres")]

ERAS = ["2025-11-25", "2026-07-28"]
LOCAL = Principal("local-user", "stdio")
OPERATOR = Operator("test")
Params = ElicitRequestFormParams | ElicitRequestURLParams
Runtime = Callable[..., Elicitation]
SWALLOWED = "caught mcp-elicit's control-flow signal StaleSnapshot"


class Go(BaseModel):
    go: bool


@pytest.fixture
def runtime(store_url: str) -> Iterator[Runtime]:
    """A fresh `Elicitation` on the test's store, with its server, built with the test's settings."""
    made: list[Elicitation] = []

    def make(**settings: Any) -> Elicitation:
        elicitation = Elicitation(
            open_store(store_url),
            request_state=RequestState(single_process=True),
            public_base_url="http://127.0.0.1:8765",
            **settings,
        )
        elicitation.server("regressions")
        made.append(elicitation)
        return elicitation

    yield make
    for elicitation in made:
        elicitation.close()


def sdk_mode(era: str) -> str:
    return "legacy" if era == "2025-11-25" else era


async def call(
    elicitation: Elicitation,
    era: str,
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    person: Callback | None = None,
) -> CallToolResult:
    async with Client(elicitation.mcp_server, mode=sdk_mode(era), elicitation_callback=person) as client:
        assert era == "2026-07-28" or client.protocol_version == era
        return await client.call_tool(tool, arguments or {})


def said(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return f"tool error: {first.text}" if result.is_error else first.text


def only_operation(elicitation: Elicitation, tool: str, arguments: dict[str, Any] | None = None) -> Operation:
    """The operation of the in-process calls of `tool` with `arguments`, as the runtime digests them."""
    digest = request_digest("tools/call", {"name": tool, "arguments": arguments or {}})
    [operation] = elicitation.store.find_operations(LOCAL, method="tools/call", target=tool, request_digest=digest)
    return operation


def unwrap(error: BaseException) -> BaseException:
    """The in-process client surfaces a server's JSON-RPC error inside task-group exception groups."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


# -- 1. what a step raises reaches the body as it was raised ---------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_an_exception_from_a_step_reaches_the_body_unwrapped(runtime: Runtime, era: str) -> None:
    """The step runs inside the task group that renews its claim; what it raises must come out of
    `flow.step` as itself, not as an `ExceptionGroup` the body's `except ValueError` never matches."""
    elicitation = runtime()

    def refuse_in_a_thread() -> int:
        raise ValueError("no such account")

    async def refuse() -> int:
        raise ValueError("no such region")

    @elicitation.tool()
    async def lookup(flow: Flow) -> str:
        caught = []
        for name, function in (("account", refuse_in_a_thread), ("region", refuse)):
            try:
                await flow.step(name, function)
            except ValueError as error:
                caught.append(str(error))
        return "caught: " + ", ".join(caught)

    assert said(await call(elicitation, era, "lookup")) == "caught: no such account, no such region"
    assert only_operation(elicitation, "lookup").status is OperationStatus.COMPLETED


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_error_from_a_step_is_the_tool_error_result_and_fails_the_operation(
    runtime: Runtime, era: str
) -> None:
    elicitation = runtime()
    ran = Counter[str]()

    def charge() -> int:
        ran["charge"] += 1
        raise ToolError("the card was declined")

    @elicitation.tool()
    async def pay(flow: Flow) -> str:
        await flow.step("charge", charge)
        return "paid"

    result = await call(elicitation, era, "pay")
    assert result.is_error
    assert "the card was declined" in said(result)
    operation = only_operation(elicitation, "pay")
    assert operation.status is OperationStatus.FAILED
    assert ran == {"charge": 1}


# -- 2. a call that attached waits for the steps the creating call has yet to run ------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_an_attached_call_never_runs_a_step_while_the_creator_is_busy_between_steps(
    runtime: Runtime, era: str
) -> None:
    """The creating call runs `one`, then works outside any step while an identical call attaches. The creator
    holds the operation's run lease until its turn ends (and `one`'s result is durable with its next commit),
    so the attached call waits instead of running `one` or `two`, and both return the creator's result."""
    elicitation = runtime()
    ran = Counter[str]()
    bodies = 0
    one_done, second_waits = anyio.Event(), anyio.Event()

    async def one() -> int:
        ran["one"] += 1
        return 1

    async def two() -> int:
        ran["two"] += 1
        return 2

    @elicitation.tool()
    async def job(flow: Flow, x: int) -> str:
        nonlocal bodies
        bodies += 1
        creator = bodies == 1
        if not creator:
            second_waits.set()
        a = await flow.step("one", one, returns=int)
        if creator:  # work outside any step (an HTTP call, a log shipper) that takes a while this time
            one_done.set()
            with anyio.fail_after(10):
                await second_waits.wait()
            await anyio.sleep(0.3)
        b = await flow.step("two", two, returns=int)
        return f"{a} {b}"

    results: dict[str, str] = {}

    async def creator() -> None:
        results["creator"] = said(await call(elicitation, era, "job", {"x": 1}))

    async def attached() -> None:
        with anyio.fail_after(10):
            await one_done.wait()
        results["attached"] = said(await call(elicitation, era, "job", {"x": 1}))

    async with anyio.create_task_group() as group:
        group.start_soon(creator)
        group.start_soon(attached)
    assert ran == {"one": 1, "two": 1}
    assert results == {"creator": "1 2", "attached": "1 2"}


# -- 3. (the store alone, on PostgreSQL): tests/store/test_store_races.py ------------------------------------


# -- 4. legacy: the answer is durable before the carrying call stops renewing its claim -------------------


async def test_an_answer_is_durable_before_its_carrier_goes_on_with_slow_work(runtime: Runtime) -> None:
    """The carrier records the answer, then works 2.5 s outside any flow call, longer than the 1.5 s lease.
    The waiting call must read the answer, not find the claim lapsed and ask the person again."""
    elicitation = runtime(timing=Timing(lease=timedelta(seconds=1.5)))
    bodies = 0
    waiter_arrived, asked_once = anyio.Event(), anyio.Event()
    asked: list[str] = []

    @elicitation.tool()
    async def job(flow: Flow, x: int) -> str:
        nonlocal bodies
        bodies += 1
        if bodies == 2:
            waiter_arrived.set()
        answer = await flow.ask("Go?", Go, key="go")
        await anyio.sleep(2.5)  # ordinary work after the answer, outside any flow call
        return f"{type(answer).__name__} {isinstance(answer, Accepted) and answer.data.go}"

    def seat(name: str) -> Callback:
        async def person(context: ClientRequestContext, params: Params) -> ElicitResult:
            asked.append(name)
            asked_once.set()
            with anyio.fail_after(10):
                await waiter_arrived.wait()
            await anyio.sleep(0.3)  # the waiter is paused on the question's claim by now
            return accept(go=True)

        return person

    results: dict[str, str] = {}

    async def carrier() -> None:
        results["carrier"] = said(await call(elicitation, "2025-11-25", "job", {"x": 1}, person=seat("carrier")))

    async def waiter() -> None:
        with anyio.fail_after(10):
            await asked_once.wait()
        results["waiter"] = said(await call(elicitation, "2025-11-25", "job", {"x": 1}, person=seat("waiter")))

    async with anyio.create_task_group() as group:
        group.start_soon(carrier)
        group.start_soon(waiter)
    assert asked == ["carrier"], f"the person was asked on {asked}"
    assert results == {"carrier": "Accepted True", "waiter": "Accepted True"}
    [decision] = elicitation.store.list_decisions(OPERATOR)
    assert decision.status is DecisionStatus.ACCEPTED


# -- 5. (the store alone, on PostgreSQL): tests/store/test_store_races.py ------------------------------------


# -- 6. a lost commit caught by the body still ends the call clearly ---------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_body_that_swallows_losing_the_race_to_create_ends_with_swallowed_signal(
    runtime: Runtime, era: str
) -> None:
    """Two identical calls both find no operation and each holds its own; the first commit makes the
    winner's durable, so the other's commit, at its first step, loses. A body catching BaseException
    around that step must not return as if the step ran: it ends with SwallowedSignal."""
    elicitation = runtime()
    ran = Counter[str]()
    bodies = 0
    both_arrived = anyio.Event()

    @elicitation.tool()
    async def deploy(flow: Flow, scope: str) -> str:
        nonlocal bodies
        bodies += 1
        if bodies == 2:
            both_arrived.set()
        with anyio.fail_after(10):
            await both_arrived.wait()
        try:
            await flow.step("apply", lambda: ran.update(["apply"]) or 1)
        except BaseException:  # the mistake under test
            return "deployed anyway"
        return "deployed"

    results: list[str] = []

    async def one_call() -> None:
        results.append(said(await call(elicitation, era, "deploy", {"scope": "prod"})))

    async with anyio.create_task_group() as group:
        group.start_soon(one_call)
        group.start_soon(one_call)
    assert ran == {"apply": 1}
    assert "deployed" in results and len(results) == 2, results
    [lost] = [result for result in results if result != "deployed"]
    assert lost.startswith("tool error:") and SWALLOWED in lost, lost


async def test_a_body_that_swallows_an_answer_lost_to_an_operator_cancel_ends_with_swallowed_signal(
    runtime: Runtime,
) -> None:
    """2026-07-28: the answer a round brought is held until the body's next commit. An operator cancels
    the question right after the body read the answer, so the commit at the step loses; the body catches
    BaseException there. The call ends with SwallowedSignal, and the step's side effect never ran."""
    elicitation = runtime()
    ran = Counter[str]()

    @elicitation.tool()
    async def deploy(flow: Flow) -> str:
        answer = await flow.ask("Deploy?", Approval, key="deploy")
        if not isinstance(answer, Accepted):
            return type(answer).__name__
        [asked] = elicitation.store.list_decisions(OPERATOR)  # the operator, between the answer and the step
        elicitation.store.transition(asked, DecisionStatus.CANCELLED, caller=OPERATOR, reason="operator")
        try:
            await flow.step("apply", lambda: ran.update(["apply"]) or 1)
        except BaseException:  # the mistake under test
            return "deployed anyway"
        return "deployed"

    async def approve(context: ClientRequestContext, params: Params) -> ElicitResult:
        return accept(approve=True)

    result = said(await call(elicitation, "2026-07-28", "deploy", person=approve))
    assert result.startswith("tool error:") and SWALLOWED in result, result
    assert ran == {}
    [decision] = elicitation.store.list_decisions(OPERATOR)
    assert decision.status is DecisionStatus.CANCELLED
    assert [entry.reason for entry in elicitation.store.audit_trail(decision.elicitation_id, OPERATOR)] == [
        "requested",
        "operator",
    ]


# -- 7. legacy: a -32042 refused at commit leaves nothing watched ----------------------------------------


@pytest.mark.parametrize("resume", [ResumePolicy.NOTIFICATION, ResumePolicy.MANUAL])
async def test_a_url_required_call_refused_at_commit_leaves_nothing_watched(
    runtime: Runtime, resume: ResumePolicy, caplog: pytest.LogCaptureFixture
) -> None:
    """The idempotency key was first used for another tool, so the commit before `-32042` is refused and
    the decision never exists: nothing is stored, and nothing goes on about it afterwards (no completion
    watcher warning, poll after poll, that it cannot find the decision)."""
    elicitation = runtime()

    @elicitation.tool()
    async def first(flow: Flow) -> str:
        return "ok"

    @elicitation.tool()
    async def connect(flow: Flow) -> str:
        await flow.ask_url("Connect your account", key="connect", resume=resume)
        return "connected"

    async def consent(context: ClientRequestContext, params: Params) -> ElicitResult:
        return ElicitResult(action="accept")

    meta = {IDEMPOTENCY_META_KEY: "key-1"}
    caplog.set_level(logging.WARNING, logger="mcp_elicit")
    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=consent) as client:
        assert said(await client.call_tool("first", {}, meta=cast(RequestParamsMeta, meta))) == "ok"
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await client.call_tool("connect", {}, meta=cast(RequestParamsMeta, meta))
        refused = unwrap(raised.value)
        assert isinstance(refused, MCPError) and "idempotency key 'key-1'" in refused.message
        await anyio.sleep(3 * CompletionNotices.POLL_SECONDS)  # the watcher's polls, had it been told to watch
    assert elicitation.store.list_decisions(OPERATOR) == []
    warnings = [r for r in caplog.records if r.name.startswith("mcp_elicit") and r.levelno >= logging.WARNING]
    assert warnings == [], [record.getMessage() for record in warnings]


# -- 8. a call waiting on a step whose holder failed ends with the operation ---------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_waiting_on_a_step_whose_holder_failed_says_so(runtime: Runtime, era: str) -> None:
    """The holder's step raises ToolError, which fails the operation; the identical call waiting on that
    step must neither run it again nor hang: it is told an identical call ended the operation as failed."""
    elicitation = runtime()
    ran = Counter[str]()
    bodies = 0
    holding, waiter_arrived = anyio.Event(), anyio.Event()

    async def charge() -> int:
        ran["charge"] += 1
        holding.set()
        with anyio.fail_after(10):
            await waiter_arrived.wait()
        await anyio.sleep(0.3)  # the waiter is paused on the step's claim by now
        raise ToolError("the card was declined")

    @elicitation.tool()
    async def pay(flow: Flow, amount: int) -> str:
        nonlocal bodies
        bodies += 1
        if bodies == 2:
            waiter_arrived.set()
        await flow.step("charge", charge, returns=int)
        return "paid"

    results: dict[str, str] = {}

    async def holder() -> None:
        results["holder"] = said(await call(elicitation, era, "pay", {"amount": 5}))

    async def waiter() -> None:
        with anyio.fail_after(10):
            await holding.wait()
        with anyio.fail_after(20):
            results["waiter"] = said(await call(elicitation, era, "pay", {"amount": 5}))

    async with anyio.create_task_group() as group:
        group.start_soon(holder)
        group.start_soon(waiter)
    assert ran == {"charge": 1}, results
    assert results["holder"].startswith("tool error:") and "the card was declined" in results["holder"]
    assert results["waiter"].startswith("tool error:")
    assert "An identical call of this tool ended its operation as failed" in results["waiter"]
    assert only_operation(elicitation, "pay", {"amount": 5}).status is OperationStatus.FAILED


# -- answers sent without a round's state never cross a key's binding ---------------------------------


async def test_answers_without_state_under_a_key_bound_to_other_arguments_are_refused(runtime: Runtime) -> None:
    """2026-07-28 answers may come without any round's state; with a key first used for other arguments
    they must be refused before they touch anything, like any other use of that key."""
    elicitation = runtime()

    @elicitation.tool()
    async def deploy(flow: Flow, service: str) -> str:
        answer = await flow.ask(f"Deploy {service}?", Go, key="go")
        return f"deployed {service}" if isinstance(answer, Accepted) and answer.data.go else "not deployed"

    meta = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: "release-7"})

    async def nobody(context: ClientRequestContext, params: Params) -> ElicitResult:
        raise AssertionError("the rounds are driven by hand here")

    async with Client(elicitation.mcp_server, mode="2026-07-28", elicitation_callback=nobody) as client:
        first = await client.session.call_tool("deploy", {"service": "payments"}, meta=meta, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.input_requests is not None
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await client.session.call_tool(
                "deploy",
                {"service": "docs"},
                meta=meta,
                input_responses={"go": ElicitResult(action="accept", content={"go": True})},
                allow_input_required=True,
            )
    refused = unwrap(raised.value)
    assert isinstance(refused, MCPError) and refused.code == -32602 and "release-7" in refused.message
    [decision] = elicitation.store.list_decisions(OPERATOR)
    assert decision.status is DecisionStatus.REQUESTED and "payments" in decision.message


# -- a 2026-07-28 round whose operation ended meanwhile ends its call the same way ------------------------


@pytest.mark.parametrize("to", [OperationStatus.FAILED, OperationStatus.CANCELLED])
async def test_a_round_retried_after_its_operation_ended_says_so(runtime: Runtime, to: OperationStatus) -> None:
    """The person answers, but meanwhile the operation ended (an overlapping call's step failed it, an operator
    cancelled it): the retry of the round must not start a new operation and run the body again."""
    elicitation = runtime()
    bodies = Counter[str]()

    @elicitation.tool()
    async def deploy(flow: Flow, env: str) -> str:
        bodies["deploy"] += 1
        answer = await flow.ask("Deploy?", Go, key="go")
        return "deployed" if isinstance(answer, Accepted) and answer.data.go else "not deployed"

    async def person(context: ClientRequestContext, params: Params) -> ElicitResult:
        operation = only_operation(elicitation, "deploy", {"env": "prod"})
        elicitation.store.finish_operation(operation, to, caller=OPERATOR, reason="ended meanwhile")
        return ElicitResult(action="accept", content={"go": True})

    result = said(await call(elicitation, "2026-07-28", "deploy", {"env": "prod"}, person=person))

    assert result.startswith("tool error:"), result
    assert f"An identical call of this tool ended its operation as {to}" in result
    assert bodies == {"deploy": 1}
    assert only_operation(elicitation, "deploy", {"env": "prod"}).status is to
