"""2026-07-28 still-waiting rounds with no URL flow of the call's own are a wait too (`ElicitingClient.rounds`).

Real parts: each call goes through its own real stdio server process (the test server's `waiting` tools) on one
SQLite store, so two identical calls are one operation; the first carries the question to a person who
takes their time, and the second gets still-waiting rounds. The waiting client paces its rounds a minute
apart, so a round that comes sooner was sent by the host's retry now.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from mcp_elicit.client import (
    Accept,
    CallStopped,
    ElicitingClient,
    FormReply,
    FormRequest,
    Pacing,
    ScriptedHandler,
    Stdio,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.handler import Cancel, Mode
from mcp_elicit.client.mrtr_loop import STILL_WAITING
from mcp_elicit.client.pending import FlowWaits, Wait
from mcp_elicit.model import DecisionStatus
from tests.helpers.records import decision_status
from tests.helpers.server import CONNECTED, NAME, ROUNDS_LOG, complete, rounds
from tests.helpers.server_commands import PENDING_COMMAND, ROUNDS_COMMAND

pytestmark = pytest.mark.anyio

SLOW = Pacing(first=60.0, cap=60.0, max_wait=600.0)
"""A minute between two still-waiting rounds: only a retry now sends one sooner."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'elicit.db'}"


def server(store_url: str, rounds_log: Path | None = None, *, command: list[str] = ROUNDS_COMMAND) -> Stdio:
    """A fresh server process on the shared store; `rounds_log` records each round it serves."""
    env = {**os.environ, "MCP_ELICIT_STORE": store_url}
    if rounds_log is not None:
        env[ROUNDS_LOG] = str(rounds_log)
    executable, *args = command
    return Stdio(command=executable, args=args, env=env)


class Person:
    """Answers the form `confirm: true`, but only once `answer()` is called: until then the question is out."""

    modes: frozenset[Mode] = frozenset({"form"})

    def __init__(self) -> None:
        self.asked: list[str] = []
        self._go = anyio.Event()

    def answer(self) -> None:
        self._go.set()

    async def form(self, request: FormRequest) -> FormReply:
        self.asked.append(request.message)
        await self._go.wait()
        return Accept({"confirm": True})

    async def url(self, request: UrlRequest) -> UrlReply:
        return Cancel()


async def until(predicate: Callable[[], object], seconds: float = 30) -> None:
    with anyio.fail_after(seconds):
        while not predicate():
            await anyio.sleep(0.02)


async def retry_until(client: ElicitingClient, wait_id: str, done: Callable[[], bool]) -> None:
    """Retry now until `done`: the rounds are paced a minute apart otherwise."""
    with anyio.fail_after(30):
        while not done():
            client.rounds.retry_now(wait_id)
            await anyio.sleep(0.1)


async def one_wait(client: ElicitingClient) -> Wait:
    await until(client.rounds.waits)
    [wait] = client.rounds.waits()
    return wait


async def test_a_call_waiting_on_a_question_another_call_carries_is_shown_and_retried_now(
    store_url: str, tmp_path: Path
) -> None:
    person, nobody = Person(), ScriptedHandler([])
    log = tmp_path / "rounds-b.log"
    carrier = ElicitingClient(server(store_url), person, era="2026-07-28")
    waiter = ElicitingClient(server(store_url, log), nobody, era="2026-07-28", pacing=SLOW)
    results: dict[str, str] = {}

    async def call(name: str, client: ElicitingClient) -> None:
        result = await client.call_tool("approve", {"n": 1})
        [content] = result.content
        results[name] = getattr(content, "text", "")

    async with carrier, waiter, anyio.create_task_group() as group:
        group.start_soon(call, "carrier", carrier)
        await until(lambda: person.asked)
        assert waiter.rounds.waits() == [], "no call of this client waits yet"
        group.start_soon(call, "waiter", waiter)

        wait = await one_wait(waiter)
        assert wait.kind == "server"
        assert wait.message == f"the tool approve {STILL_WAITING}"
        assert wait.server == NAME
        assert wait.since == wait.started
        assert wait.deadline == wait.started + 600.0, "the deadline is when the kit gives up (max_wait)"
        assert FlowWaits(waiter.pending, browser_time=SLOW.max_wait).waits() == [], "the call has no URL flow"

        sent = len(rounds(log))
        await until(lambda: waiter.rounds.retry_now(wait.id))
        await until(lambda: len(rounds(log)) == sent + 1)
        await until(lambda: waiter.rounds.retry_now(wait.id))
        await until(lambda: len(rounds(log)) == sent + 2)
        [again] = waiter.rounds.waits()
        assert (again.id, again.started) == (wait.id, wait.started), "one stretch of waiting, one wait"
        assert not waiter.rounds.retry_now("rounds-99")
        assert nobody.asked == [], "the question is out once, on the carrier's call"

        person.answer()
        await until(lambda: "carrier" in results)
        await retry_until(waiter, wait.id, lambda: "waiter" in results)
    assert results == {"carrier": "job 1 run", "waiter": "job 1 run"}
    assert waiter.rounds.waits() == [], "the wait vanishes with its call"
    assert decision_status(store_url) is DecisionStatus.ACCEPTED


async def test_cancelling_a_round_wait_stops_the_call_and_withdraws_nothing_on_the_server(
    store_url: str, tmp_path: Path
) -> None:
    person = Person()
    carrier = ElicitingClient(server(store_url), person, era="2026-07-28")
    waiter = ElicitingClient(server(store_url), ScriptedHandler([]), era="2026-07-28")
    stopped: list[CallStopped] = []
    carried: list[str] = []

    async def carry() -> None:
        result = await carrier.call_tool("approve", {"n": 2})
        carried.append(getattr(result.content[0], "text", ""))

    async def wait_on_it() -> None:
        with pytest.raises(CallStopped) as raised:
            await waiter.call_tool("approve", {"n": 2})
        stopped.append(raised.value)

    async with carrier, waiter, anyio.create_task_group() as group:
        group.start_soon(carry)
        await until(lambda: person.asked)
        group.start_soon(wait_on_it)
        wait = await one_wait(waiter)
        assert waiter.rounds.cancel(wait.id, "the host stopped it")
        await until(lambda: stopped)
        assert waiter.rounds.waits() == []
        assert not waiter.rounds.cancel(wait.id), "nothing is left to cancel"
        assert decision_status(store_url) is DecisionStatus.REQUESTED, "the question is still out to the person"

        person.answer()
        await until(lambda: carried)
    [error] = stopped
    assert (error.kind, error.name, error.reason) == ("tool", "approve", "the host stopped it")
    assert str(error) == (
        "the tool 'approve' was stopped while the server was still waiting (the host stopped it); nothing was "
        "withdrawn on the server: what the call waited on goes on there, and the same call made again can take it up"
    )
    assert carried == ["job 2 run"]
    assert decision_status(store_url) is DecisionStatus.ACCEPTED

    async with ElicitingClient(server(store_url), ScriptedHandler([]), era="2026-07-28") as again:
        result = await again.call_tool("approve", {"n": 2})
    assert getattr(result.content[0], "text", "") == "job 2 run", "the same call made again gets the recorded result"


async def test_a_call_waiting_on_its_own_open_url_flow_shows_the_flow_and_no_round_wait(store_url: str) -> None:
    opened: list[str] = []
    person = ScriptedHandler([{"reply": "consent"}])
    client = ElicitingClient(
        server(store_url, command=PENDING_COMMAND),
        person,
        era="2026-07-28",
        opener=opened.append,
        pacing=SLOW,
    )
    flows = FlowWaits(client.pending, browser_time=SLOW.max_wait)
    results: list[str] = []

    async def call() -> None:
        result = await client.call_tool("connect_later", {})
        results.append(getattr(result.content[0], "text", ""))

    async with client, anyio.create_task_group() as group:
        group.start_soon(call)
        await until(flows.waits)
        [flow_wait] = flows.waits()
        assert flow_wait.kind == "url_flow"
        assert opened, "the person consented and the page was opened"
        assert client.rounds.waits() == [], "the open flow is the wait: it is never shown twice"

        await anyio.to_thread.run_sync(complete, store_url)
        await until(lambda: client.pending.retry_now(flow_wait.id))
        await until(lambda: results)
    assert results == [CONNECTED]
    assert client.rounds.waits() == []
