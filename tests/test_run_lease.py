"""The operation's run lease, seen from calls: who runs steps, when it is given up, and a lapsed holder fenced out.

Calls go through the real SDK client over its in-memory transport, on both eras, to a real store. Two
`Elicitation` instances on one store stand for two servers; one of them runs its clock ahead by more than
a lease, which is what a holder whose process stalled looks like to the other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, TextContent
from pydantic import BaseModel

from mcp_elicit.model import OperationStatus, Operator, Principal, request_digest
from mcp_elicit.server import Elicitation, Flow
from mcp_elicit.store import Store, open_store, utc_now

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
        elicitation = Elicitation(open_store(store_url, clock=clock), clock=clock, single_process=True, lease=LEASE)
        elicitation.server("leases")
        made.append(elicitation)
        return elicitation

    yield make
    for elicitation in made:
        elicitation.close()


async def call(
    elicitation: Elicitation, era: str, tool: str, arguments: dict[str, Any], person: Any = None
) -> CallToolResult:
    assert elicitation._server is not None
    async with Client(elicitation._server, mode=sdk_mode(era), elicitation_callback=person) as client:
        return await client.call_tool(tool, arguments)


def operation_id(store: Store, tool: str, arguments: dict[str, Any]) -> str:
    digest = request_digest("tools/call", {"name": tool, "arguments": arguments})
    [operation] = store.find_operations(LOCAL, method="tools/call", target=tool, request_digest=digest)
    return operation.operation_id


@pytest.mark.parametrize("era", ERAS)
async def test_a_stalled_holders_step_result_is_refused_and_it_returns_what_the_new_holder_recorded(
    servers: Callable[..., Elicitation], era: str
) -> None:
    """Server A runs `charge` and stalls past its lease; server B, whose clock says the lease lapsed, takes the
    operation over, runs `charge` itself and completes. A's late result is refused by the fence, so A runs
    again and returns B's result: one recorded outcome, whatever A computed."""
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
            return await flow.step("charge", charge, returns=str)

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

    assert results == {"a": "charged by b", "b": "charged by b"}
    assert ran == {"a": 1, "b": 1}  # a lapsed lease is the one way a step runs twice
    store = stalled.store
    found = operation_id(store, "pay", {"amount": 5})
    [entry] = [e for e in store.journal(found, caller=LOCAL) if e.name == "charge"]
    assert entry.value == "charged by b"
    reasons = [row.reason for row in store.audit_trail(found, LOCAL)]
    assert any("claim on run lapsed" in reason and "taken over" in reason for reason in reasons), reasons


@pytest.mark.parametrize(("era", "held_while_asking"), [("2025-11-25", True), ("2026-07-28", False)])
async def test_the_run_lease_is_kept_across_a_live_question_and_given_up_with_a_round(
    servers: Callable[..., Elicitation], era: str, held_while_asking: bool
) -> None:
    """While the person sees the question: on a live call the call holds the lease (it goes on with the next
    step when the answer comes); a 2026-07-28 round gave it up in the commit that put the round out, so the
    retry, on any server, takes it without waiting for it to lapse."""
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
    assert ("run" in names) is held_while_asking, names


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
