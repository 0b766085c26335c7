"""The operation's run lease, seen from calls: who runs steps, when it is given up, and a lapsed holder fenced out.

Calls go through the real SDK client over its in-memory transport, on both eras, to a real store. Two
`Elicitation` instances on one store stand for two servers; one of them runs its clock ahead by more than
a lease, which is what a holder whose process stalled looks like to the other. The SDK's client, not
`mcp_elicit.testing.Harness`: overlapping calls are ordered by persons that hold their dialog open until an
event, which a scripted answer by key cannot do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, TextContent
from pydantic import BaseModel

from mcp_elicit.model import Decision, DecisionStatus, OperationStatus, Operator, Principal, request_digest
from mcp_elicit.server import Elicitation, Flow, RequestState, Timing
from mcp_elicit.store import Store, StoreUnavailable, open_store, utc_now
from mcp_elicit.store.aio import AsyncStore

pytestmark = pytest.mark.anyio

ERAS = ["2025-11-25", "2026-07-28"]
LOCAL = Principal("local-user", "stdio")
LEASE = timedelta(seconds=30)


class Go(BaseModel):
    go: bool


def sdk_mode(era: str) -> str:
    return "legacy" if era == "2025-11-25" else era


def said(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return f"tool error: {first.text}" if result.is_error else first.text


@pytest.fixture
def servers(store_url: str) -> Iterator[Callable[..., Elicitation]]:
    made: list[Elicitation] = []

    def make(clock: Callable[[], datetime] = utc_now) -> Elicitation:
        elicitation = Elicitation(
            open_store(store_url, clock=clock),
            clock=clock,
            request_state=RequestState(single_process=True),
            timing=Timing(lease=LEASE),
        )
        elicitation.server("leases")
        made.append(elicitation)
        return elicitation

    yield make
    for elicitation in made:
        elicitation.close()


async def call(
    elicitation: Elicitation, era: str, tool: str, arguments: dict[str, Any], person: Any = None
) -> CallToolResult:
    async with Client(elicitation.mcp_server, mode=sdk_mode(era), elicitation_callback=person) as client:
        return await client.call_tool(tool, arguments)


def operation_id(store: Store, tool: str, arguments: dict[str, Any]) -> str:
    digest = request_digest("tools/call", {"name": tool, "arguments": arguments})
    [operation] = store.find_operations(LOCAL, method="tools/call", target=tool, request_digest=digest)
    return operation.operation_id


async def stalled_race(
    servers: Callable[..., Elicitation], era: str, *, at_most_once: bool
) -> tuple[Elicitation, Counter[str], dict[str, str]]:
    """Server A runs `charge` of `pay` and stalls in it past its lease; server B, whose clock says the lease
    lapsed, calls the identical `pay` meanwhile; A's charge ends once B's call did. A, how often each server
    charged, and what each call returned."""
    stalled = servers()
    ahead = servers(clock=lambda: utc_now() + 2 * LEASE)
    ran = Counter[str]()
    a_charging, b_done = anyio.Event(), anyio.Event()

    def register(elicitation: Elicitation, name: str) -> None:
        async def charge() -> str:
            ran[name] += 1
            if name == "a":
                a_charging.set()
                with anyio.fail_after(10):
                    await b_done.wait()
            return f"charged by {name}"

        @elicitation.tool()
        async def pay(flow: Flow, amount: int) -> str:
            return await flow.step("charge", charge, returns=str, at_most_once=at_most_once)

    register(stalled, "a")
    register(ahead, "b")
    results: dict[str, str] = {}

    async def on_a() -> None:
        results["a"] = said(await call(stalled, era, "pay", {"amount": 5}))

    async def on_b() -> None:
        with anyio.fail_after(10):
            await a_charging.wait()
        results["b"] = said(await call(ahead, era, "pay", {"amount": 5}))
        b_done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(on_a)
        group.start_soon(on_b)
    return stalled, ran, results


@pytest.mark.parametrize("era", ERAS)
async def test_a_stalled_holders_step_result_is_refused_and_it_returns_what_the_new_holder_recorded(
    servers: Callable[..., Elicitation], era: str
) -> None:
    """Server A runs `charge` and stalls past its lease; server B, whose clock says the lease lapsed, takes the
    operation over, runs `charge` itself and completes. A's late result is refused by the fence, so A runs
    again and returns B's result: one recorded outcome, whatever A computed."""
    stalled, ran, results = await stalled_race(servers, era, at_most_once=False)

    assert results == {"a": "charged by b", "b": "charged by b"}
    assert ran == {"a": 1, "b": 1}  # a lapsed lease is the one way a step runs twice
    store = stalled.store
    found = operation_id(store, "pay", {"amount": 5})
    [entry] = [e for e in store.journal(found, caller=LOCAL) if e.name == "charge"]
    assert entry.value == "charged by b"
    reasons = [row.reason for row in store.audit_trail(found, LOCAL)]
    assert any("claim on run lapsed" in reason and "taken over" in reason for reason in reasons), reasons


@pytest.mark.parametrize("era", ERAS)
async def test_an_at_most_once_step_a_stalled_holder_started_is_never_run_again(
    servers: Callable[..., Elicitation], era: str
) -> None:
    """As above, but `charge` runs at most once: B, taking the operation over from the stalled A, finds the
    mark A made durable before charging and no result, so it does not charge again. The operation fails saying
    the outcome is unknown, naming the step and the operation; A's late result is fenced out and A ends with it."""
    stalled, ran, results = await stalled_race(servers, era, at_most_once=True)

    assert ran == {"a": 1}, (ran, results)
    store = stalled.store
    found = operation_id(store, "pay", {"amount": 5})
    unknown = f"charge was started by an earlier attempt of operation {found} that ended before its outcome"
    assert results["b"].startswith("tool error:") and unknown in results["b"], results
    # A's own result lost to the fence; it returns the end B gave the operation, not a charge of its own.
    assert "ended its operation as failed while this call waited" in results["a"], results
    operation = store.get_operation(found, LOCAL)
    assert operation.status is OperationStatus.FAILED
    assert [e.name for e in store.journal(found, caller=LOCAL)] == ["mcp-elicit/started/charge"]


@pytest.mark.parametrize("era", ERAS)
async def test_an_at_most_once_step_runs_once_and_its_result_is_replayed(
    servers: Callable[..., Elicitation], era: str
) -> None:
    """Nothing died: the step runs once, and the call and its identical twin return its result; the mark stays
    beside the result in the journal."""
    elicitation = servers()
    ran = Counter[str]()

    async def charge() -> str:
        ran["charge"] += 1
        return "charged"

    @elicitation.tool()
    async def pay(flow: Flow, amount: int) -> str:
        answer = await flow.ask("Pay?", Go)
        return await flow.step("charge", charge, returns=str, at_most_once=True) if answer else "stopped"

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"go": True})

    assert said(await call(elicitation, era, "pay", {"amount": 3}, person)) == "charged"
    assert said(await call(elicitation, era, "pay", {"amount": 3}, person)) == "charged"
    assert ran == {"charge": 1}
    found = operation_id(elicitation.store, "pay", {"amount": 3})
    names = {e.name for e in elicitation.store.journal(found, caller=LOCAL)}
    assert names == {"charge", "mcp-elicit/started/charge"}


@pytest.mark.parametrize("era", ERAS)
async def test_an_at_most_once_step_is_marked_started_only_once_it_holds_what_it_waits_for(
    servers: Callable[..., Elicitation], era: str
) -> None:
    """`holding` is what the step waits for before its effect (the gateway's session with its upstream): a call
    cancelled while it waits leaves no mark, so its identical call runs the step rather than failing with an
    unknown outcome; the mark is made once it holds it, and a run that finds the step journaled never enters it."""
    elicitation = servers()
    store = elicitation.store
    free = anyio.Event()
    waiting = anyio.Event()
    held: list[list[str]] = []

    @asynccontextmanager
    async def slot(operation: str) -> AsyncIterator[None]:
        waiting.set()
        await free.wait()
        held.append([e.name for e in store.journal(operation, caller=LOCAL)])
        yield

    async def charge(operation: str) -> str:
        held.append([e.name for e in store.journal(operation, caller=LOCAL)])
        return "charged"

    @elicitation.tool()
    async def pay(flow: Flow, amount: int) -> str:
        answer = await flow.ask("Pay?", Go)
        operation = flow.operation_id
        charged = await flow.step("charge", charge, operation, returns=str, at_most_once=True, holding=slot(operation))
        receipt = await flow.ask("Send the receipt?", Go, key="receipt")
        return f"{charged if answer else 'stopped'}, receipt {bool(receipt)}"

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"go": True})

    with anyio.CancelScope() as giving_up:
        async with anyio.create_task_group() as calling:
            calling.start_soon(call, elicitation, era, "pay", {"amount": 9}, person)
            await waiting.wait()
            giving_up.cancel()
    free.set()
    result = await call(elicitation, era, "pay", {"amount": 9}, person)
    assert said(result) == "charged, receipt True"
    assert held == [[], ["mcp-elicit/started/charge"]]  # entered unmarked; marked before the charge; entered once


@pytest.mark.parametrize("era", ERAS)
async def test_the_run_lease_is_never_held_while_a_person_thinks(servers: Callable[..., Elicitation], era: str) -> None:
    """The commit that puts the question out gives the lease up: on a live call it comes back with the answer's
    commit, on 2026-07-28 the retry, on any server, takes it without waiting for it to lapse."""
    elicitation = servers()
    seen: list[list[str]] = []

    @elicitation.tool()
    async def deploy(flow: Flow, target: str) -> str:
        plan = await flow.step("plan", lambda: f"plan for {target}", returns=str)
        answer = await flow.ask("Go ahead?", Go)
        done = await flow.step("apply", lambda: "applied", returns=str)
        return f"{plan}: {done if answer else 'stopped'}"

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        found = operation_id(elicitation.store, "deploy", {"target": "prod"})
        seen.append([claim.name for claim in elicitation.store.claims(found, caller=LOCAL)])
        return ElicitResult(action="accept", content={"go": True})

    result = await call(elicitation, era, "deploy", {"target": "prod"}, person)
    assert said(result) == "plan for prod: applied"
    [names] = seen
    assert "run" not in names, names


@pytest.mark.parametrize("era", ERAS)
async def test_a_step_result_is_kept_when_the_commit_it_rode_in_lost(
    servers: Callable[..., Elicitation], era: str
) -> None:
    """An operator cancels the operation while its step runs; the step's result was to ride in the commit that
    puts the next question out, and that commit loses (no question for an ended operation). The result is
    recorded on its own all the same (the charge happened), and the call says its operation ended."""
    elicitation = servers()
    store = elicitation.store

    async def charge() -> str:
        found = operation_id(store, "pay", {"amount": 7})
        store.finish_operation(
            store.get_operation(found, LOCAL), OperationStatus.CANCELLED, caller=Operator("oncall"), reason="stop"
        )
        return "charged"

    @elicitation.tool()
    async def pay(flow: Flow, amount: int) -> str:
        charged = await flow.step("charge", charge, returns=str)
        await flow.ask("Send the receipt?", Go)
        return charged

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        raise AssertionError("no question goes out for a cancelled operation")

    outcome = said(await call(elicitation, era, "pay", {"amount": 7}, person))
    assert outcome.startswith("tool error:") and "cancelled" in outcome, outcome
    found = operation_id(store, "pay", {"amount": 7})
    assert store.get_operation(found, LOCAL).status is OperationStatus.CANCELLED
    assert [(e.name, e.value) for e in store.journal(found, caller=LOCAL)] == [("charge", "charged")]


async def test_a_step_result_is_kept_when_the_rounds_own_check_fails(servers: Callable[..., Elicitation]) -> None:
    """`gather(ask, step)` on 2026-07-28: an operator cancels the question while the step runs, so the round's
    commit fails its own check on the question. The step's result, held for that commit, is recorded all the
    same, and the call runs again without running the step again."""
    elicitation = servers()
    store = elicitation.store
    ran = Counter[str]()

    def charge() -> str:
        ran["charge"] += 1
        if ran["charge"] == 1:
            [decision] = store.list_decisions(LOCAL, operation_id=operation_id(store, "pay", {"amount": 3}))
            store.transition(decision, DecisionStatus.CANCELLED, caller=Operator("oncall"), reason="stop")
        return "charged"

    @elicitation.tool()
    async def pay(flow: Flow, amount: int) -> str:
        answer, charged = await flow.gather(flow.ask("Go?", Go, key="go"), flow.step("charge", charge, returns=str))
        return f"{charged} {type(answer).__name__}"

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        raise AssertionError("the question was cancelled before it went out")

    assert said(await call(elicitation, "2026-07-28", "pay", {"amount": 3}, person)) == "charged Cancelled"
    assert ran == {"charge": 1}


@pytest.mark.parametrize("era", ERAS)
async def test_a_store_failure_after_a_step_keeps_its_result_before_running_the_call_again(
    servers: Callable[..., Elicitation], monkeypatch: pytest.MonkeyPatch, era: str
) -> None:
    """The commit carrying a step's result fails (the store drops the connection once). The call records that
    result on its own when the store answers again, then runs again: the step runs once."""
    elicitation = servers()
    ran = Counter[str]()
    dropped: list[str] = []
    create_decision = AsyncStore.create_decision

    async def drops_once(self: AsyncStore, decision: Decision) -> Decision:
        if not dropped:
            dropped.append(decision.key)
            raise StoreUnavailable("the connection to the store was lost")
        return await create_decision(self, decision)

    monkeypatch.setattr(AsyncStore, "create_decision", drops_once)

    def charge() -> str:
        ran["charge"] += 1
        return "charged"

    @elicitation.tool()
    async def pay(flow: Flow, amount: int) -> str:
        charged = await flow.step("charge", charge, returns=str)
        await flow.ask("Receipt?", Go, key="receipt")
        return charged

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"go": True})

    assert said(await call(elicitation, era, "pay", {"amount": 4}, person)) == "charged"
    assert dropped == ["receipt"] and ran == {"charge": 1}


@pytest.mark.parametrize(
    ("returned", "why"), [("charged\ud800", "surrogate"), ({"handle": object()}, "serialize")], ids=["text", "object"]
)
@pytest.mark.parametrize("era", ERAS)
async def test_a_result_that_cannot_be_recorded_fails_the_operation_and_keeps_its_steps(
    servers: Callable[..., Elicitation], era: str, returned: object, why: str
) -> None:
    elicitation = servers()
    ran = Counter[str]()

    def charge() -> str:
        ran["charge"] += 1
        return "charged"

    @elicitation.tool()
    async def pay(flow: Flow, amount: int) -> Any:
        await flow.step("charge", charge, returns=str)
        return returned

    for _ in range(2):
        outcome = said(await call(elicitation, era, "pay", {"amount": 5}))
        assert outcome.startswith("tool error:") and "returned a result that cannot be recorded" in outcome, outcome
        assert why in outcome, outcome
    store = elicitation.store
    digest = request_digest("tools/call", {"name": "pay", "arguments": {"amount": 5}})
    [latest, first] = store.find_operations(LOCAL, method="tools/call", target="pay", request_digest=digest)
    for failed in (latest, first):
        assert failed.status is OperationStatus.FAILED
        assert [(e.name, e.value) for e in store.journal(failed.operation_id, caller=LOCAL)] == [("charge", "charged")]
    assert ran == {"charge": 2}  # each call is a new operation once the last one failed: its step ran once


async def test_an_identical_call_does_not_wait_for_a_dialog_answered_elsewhere(
    servers: Callable[..., Elicitation],
) -> None:
    """2025-11-25: the first call's dialog stays open after the inbox answered its question. The identical call
    that comes next finds the answer and runs the next step: the dialog holds no run lease."""
    elicitation = servers()
    store = elicitation.store
    ran = Counter[str]()
    dialog_open, release = anyio.Event(), anyio.Event()

    @elicitation.tool()
    async def deploy(flow: Flow, target: str) -> str:
        await flow.step("plan", lambda: ran.update(["plan"]) or "plan", returns=str)
        await flow.ask("Go?", Go, key="go")
        return await flow.step("apply", lambda: ran.update(["apply"]) or "applied", returns=str)

    async def slow_person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        dialog_open.set()
        await release.wait()
        return ElicitResult(action="cancel")

    async def never(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        raise AssertionError("answered already")

    outcome: dict[str, str] = {}

    async def first() -> None:
        outcome["first"] = said(await call(elicitation, "2025-11-25", "deploy", {"target": "prod"}, slow_person))

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        with anyio.fail_after(10):
            await dialog_open.wait()
        [decision] = store.list_decisions(LOCAL, operation_id=operation_id(store, "deploy", {"target": "prod"}))
        store.transition(
            decision, DecisionStatus.ACCEPTED, caller=Operator("inbox"), content={"go": True}, reason="inbox"
        )
        with anyio.fail_after(10):
            outcome["second"] = said(await call(elicitation, "2025-11-25", "deploy", {"target": "prod"}, never))
        release.set()
    assert outcome == {"first": "applied", "second": "applied"}
    assert ran == {"plan": 1, "apply": 1}
