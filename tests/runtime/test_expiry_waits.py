"""A call waiting on a decision gets `Expired` at the deadline, not at the next sweep.

The sweep interval is an hour here, so only the wait itself can end a call in time: the legacy call that
carries the question to a person who never answers, an identical call waiting on the question the first
carries, a URL flow consented to and never completed, and a 2026-07-28 long poll on a question another
round holds. Real parts: the SDK's client and server in one process, on SQLite and PostgreSQL. The SDK's
client, not `mcp_elicit.testing.Harness`: the subject is a person who never answers, in real time, where the
harness's scripted person always answers and moves a controlled clock instead of waiting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import Elicitation, Flow, RequestState, Timing
from mcp_elicit.store import open_store
from tests.helpers.results import text
from tests.helpers.server import Approval

# On both engines: a wait woken by LISTEN on PostgreSQL, by the in-process listener on SQLite.
pytestmark = [pytest.mark.anyio, pytest.mark.engines("sqlite", "postgres")]

TTL = timedelta(seconds=2)
LATE = 1.0
"""How long after the deadline a waiting call may come back: its last look at the store, and a busy machine."""
GIVE_UP = 30
"""Seconds after which a call still waiting has missed its deadline for good (the next sweep is an hour away)."""


@pytest.fixture
def elicitation(store_url: str) -> Iterator[Elicitation]:
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(single_process=True),
        public_base_url="https://elicit.example",
        timing=Timing(sweep_interval=timedelta(hours=1)),
    )
    runtime.server("expiring")

    @runtime.tool()
    async def approve(flow: Flow, scope: str) -> str:
        answer = await flow.ask(f"Apply {scope}?", Approval, key="approve", ttl=TTL)
        return type(answer).__name__.lower()

    @runtime.tool()
    async def connect(flow: Flow) -> str:
        outcome = await flow.ask_url("Connect your account", key="connect", ttl=TTL)
        return type(outcome).__name__.lower()

    yield runtime
    runtime.close()


class Silent:
    """A person who sees the question and never answers it."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(
        self, context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
    ) -> ElicitResult:
        self.asked += 1
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def consents(context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams) -> Any:
    return ElicitResult(action="accept")


def expired_by_the_clock(elicitation: Elicitation) -> None:
    store = elicitation.store
    [decision] = store.list_decisions(Operator())
    assert decision.status is DecisionStatus.EXPIRED
    last = store.audit_trail(decision.elicitation_id, Operator())[-1]
    assert (last.to_status, last.actor) == ("expired", "system:clock")


def within_the_deadline(started: float) -> None:
    elapsed = time.monotonic() - started
    assert TTL.total_seconds() - 0.05 <= elapsed <= TTL.total_seconds() + LATE, elapsed


async def test_a_question_nobody_answers_expires_at_its_deadline(elicitation: Elicitation) -> None:
    person = Silent()
    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=person) as client:
        started = time.monotonic()
        with anyio.fail_after(GIVE_UP):
            result = await client.call_tool("approve", {"scope": "prod"})
        within_the_deadline(started)
    assert text(result) == "expired" and person.asked == 1
    expired_by_the_clock(elicitation)


async def test_a_call_waiting_on_the_question_another_call_carries_expires_with_it(elicitation: Elicitation) -> None:
    person = Silent()
    results: list[CallToolResult] = []
    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=person) as client:

        async def call() -> None:
            results.append(await client.call_tool("approve", {"scope": "prod"}))

        started = time.monotonic()
        with anyio.fail_after(GIVE_UP):
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                group.start_soon(call)
        within_the_deadline(started)
    assert [text(result) for result in results] == ["expired", "expired"]
    assert person.asked == 1
    expired_by_the_clock(elicitation)


async def test_a_url_flow_consented_to_and_never_completed_expires_at_its_deadline(elicitation: Elicitation) -> None:
    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=consents) as client:
        started = time.monotonic()
        with anyio.fail_after(GIVE_UP):
            result = await client.call_tool("connect", {})
        within_the_deadline(started)
    assert text(result) == "expired"
    expired_by_the_clock(elicitation)


async def test_a_long_poll_on_a_question_another_round_holds_ends_at_its_deadline(store_url: str) -> None:
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(single_process=True),
        timing=Timing(sweep_interval=timedelta(hours=1), long_poll=timedelta(minutes=1)),
    )
    server = runtime.server("polling")

    @runtime.tool()
    async def approve(flow: Flow, scope: str) -> str:
        answer = await flow.ask(f"Apply {scope}?", Approval, key="approve", ttl=TTL)
        return type(answer).__name__.lower()

    try:
        async with Client(server, mode="2026-07-28", elicitation_callback=Silent()) as client:
            started = time.monotonic()
            first = await client.session.call_tool("approve", {"scope": "prod"}, allow_input_required=True)
            assert not isinstance(first, CallToolResult)
            with anyio.fail_after(GIVE_UP):
                waiting = await client.call_tool("approve", {"scope": "prod"})
            within_the_deadline(started)
        assert text(waiting) == "expired"
        expired_by_the_clock(runtime)
    finally:
        runtime.close()
