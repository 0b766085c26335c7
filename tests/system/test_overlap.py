"""Single flight: overlapping identical calls share one operation, one run of each step, one question.

Real server processes (the `overlap` tools of `tests.helpers.server`) over streamable HTTP on loopback, K real
SDK clients each on its own connection, whose calls start together behind a barrier so they overlap. Each step
logs every run with the idempotency key it got (`Workspace.keys`) and returns a receipt that is new on every
run, so two runs can never hand their callers the same result. One `Desk` stands for the person behind all
the clients and counts what they were asked, whichever connection it came on.

Reused idempotency keys, and one key used by two principals at once, are tried against an authenticated
in-thread server, and tool bodies that catch exceptions around flow calls run in-process, alone and
overlapping.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import cast

import anyio
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    ElicitResult,
    RequestParamsMeta,
)

from mcp_elicit.model import DecisionStatus, Operator, Principal
from mcp_elicit.server import IDEMPOTENCY_META_KEY, Accepted, Elicitation, Flow, RequestState, Timing
from mcp_elicit.store import StoreError, open_store
from tests.helpers.http_harness import ISSUER, StaticTokenVerifier, auth_settings, free_port, serving
from tests.helpers.overlapping import (
    Callback,
    Desk,
    K,
    Params,
    Reply,
    call,
    connect,
    launch,
    outcome,
    running,
    the_one,
    together,
)
from tests.helpers.person import Person, accept
from tests.helpers.server import KEYS, Approval, Workspace, overlap_tools

# On both engines: several server processes on one store: PostgreSQL's row locks, SQLite's file lock.
pytestmark = [pytest.mark.anyio, pytest.mark.engines("sqlite", "postgres")]

ERAS = ["2025-06-18", "2025-11-25", "2026-07-28"]
WAITERS = 10
"""Calls waiting on P2 while the step's holder on P1 is killed."""
CALLERS = 10
"""Overlapping calls when the one carrying the question is cancelled."""
LOOPBACK = Principal("loopback-dev", "loopback")
ALICE = Principal(f"{ISSUER}#alice", "client-a")
BOB = Principal(f"{ISSUER}#bob", "client-a")


# -- clients ------------------------------------------------------------------------------------------


def keyed(key: str) -> RequestParamsMeta:
    return cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: key})


def confirming(after: float) -> Reply:
    """Takes `after` seconds to decide, so the other calls overlap while the question is out; then yes."""

    async def reply(seat: int, params: Params) -> ElicitResult:
        await anyio.sleep(after)
        return accept(confirm=True)

    return reply


async def nobody(seat: int, params: Params) -> ElicitResult:
    return ElicitResult(action="cancel")


# -- K overlapping calls on one process ------------------------------------------------------------------


def calling(tool: str, n: int, meta: RequestParamsMeta | None = None) -> Callable[[int, Client], Awaitable[str]]:
    async def call_seat(index: int, client: Client) -> str:
        return await call(client, tool, {"n": n}, meta)

    return call_seat


@pytest.mark.parametrize("era", ERAS)
async def test_overlapping_identical_calls_run_the_step_once(store_url: str, tmp_path: Path, era: str) -> None:
    """K identical calls, then (on the same connections) K calls sharing one idempotency key: each step
    runs once per batch, and every call of a batch gets the same result."""
    server = launch(store_url, tmp_path)
    desk = Desk(nobody)
    batches = {1: None, 2: keyed(f"batch-{era}")}
    with running(server):
        outcomes = await together(
            K,
            lambda index: connect(server.url, era, desk.seat(index)),
            *(calling("compute", n, meta) for n, meta in batches.items()),
        )
    for (n, meta), results in zip(batches.items(), outcomes, strict=True):
        how = "identical" if meta is None else "same-key"
        for step in ("work", "seal"):
            keys = Workspace(tmp_path).keys(n, step)
            assert len(keys) == 1, f"step {step} ran {len(keys)} times for {K} overlapping {how} calls"
        the_one(results, f"computed {n}: receipt-")
    assert desk.asked == []


@pytest.mark.parametrize("era", ERAS)
async def test_overlapping_identical_calls_ask_the_person_once(store_url: str, tmp_path: Path, era: str) -> None:
    """One question out at a time per operation: one call carries it, the others wait on the same decision
    (2025 eras) or get still-waiting rounds without input requests (2026-07-28); one answer serves all."""
    server = launch(store_url, tmp_path)
    desk = Desk(confirming(after=0.3))
    with running(server):
        [results] = await together(K, lambda index: connect(server.url, era, desk.seat(index)), calling("approve", 3))
    assert len(desk.asked) == 1, f"the person was asked {len(desk.asked)} times by {K} overlapping calls"
    for step in ("work", "seal"):
        keys = Workspace(tmp_path).keys(3, step)
        assert len(keys) == 1, f"step {step} ran {len(keys)} times for {K} overlapping calls"
    the_one(results, "approved 3: receipt-")
    store = open_store(store_url)
    try:
        [decision] = store.list_decisions(Operator())
    finally:
        store.close()
    assert decision.status is DecisionStatus.ACCEPTED
    assert decision.principal == LOOPBACK


@pytest.mark.parametrize("era", ERAS)
async def test_a_body_working_on_after_its_answer_is_not_asked_again(store_url: str, tmp_path: Path, era: str) -> None:
    """The call that carried the question works on for longer than two leases after the answer, without a
    step: its claim is kept until the commit that makes the answer durable, so no waiting call asks again.
    The lease is long enough that only a process kept off the CPU for a whole second lapses it (it is renewed
    every third of it): at 0.9 s, a loaded machine lapsed it now and then and the person was asked twice."""
    lease = 1.5
    server = launch(store_url, tmp_path, lease=lease, ponder=2.2 * lease)
    desk = Desk(confirming(after=0.2))
    with running(server):
        [results] = await together(K, lambda index: connect(server.url, era, desk.seat(index)), calling("ponder", 4))
    assert len(desk.asked) == 1, f"the person was asked {len(desk.asked)} times by {K} overlapping calls"
    assert len(Workspace(tmp_path).keys(4, "seal")) == 1
    the_one(results, "pondered 4: Accepted seal-")


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_a_step_holder_killed_mid_step_is_taken_over_once_its_lease_lapses(
    store_url: str, tmp_path: Path, era: str
) -> None:
    """The holder's call runs on P1, whose step stalls; the waiters' calls go to P2, on the same store;
    P1 is SIGKILLed once every body has reached the step. The claim lapses after the 4 s lease (P1 renews
    it until it dies, so a slow machine cannot lapse it early), the step runs once more on P2 with the same
    idempotency key, and every waiter, and the holder's caller retrying on P2, gets that one result."""
    doomed = launch(store_url, tmp_path, lease=4, stall=True)
    survivor = launch(store_url, tmp_path, lease=4)
    holder_failed: list[BaseException] = []
    runs_before_kill: list[str] = []
    go = anyio.Event()

    async def holder() -> None:
        with anyio.move_on_after(40):
            try:
                async with connect(doomed.url, era, None) as client:
                    await client.call_tool("compute", {"n": 5})
            except Exception as error:  # its server dies mid-call: any transport error will do
                holder_failed.append(error)

    async def kill_once_waiters_wait() -> None:
        with anyio.fail_after(20):
            while not Workspace(tmp_path).stalled("work"):
                await anyio.sleep(0.02)
        go.set()
        with anyio.fail_after(30):
            while Workspace(tmp_path).bodies(5) < 1 + WAITERS:  # the holder's body, and every waiter's, at the step
                await anyio.sleep(0.02)
        await anyio.sleep(0.2)
        runs_before_kill.extend(Workspace(tmp_path).keys(5))
        doomed.kill()

    async def call_seat(index: int, client: Client) -> str:
        return await call(client, "compute", {"n": 5})

    with running(doomed, survivor):
        async with anyio.create_task_group() as group:
            group.start_soon(holder)
            group.start_soon(kill_once_waiters_wait)
            [results] = await together(
                WAITERS, lambda index: connect(survivor.url, era, None), call_seat, start=go, timeout=50
            )
        assert doomed.process.exitcode == -9
        assert len(runs_before_kill) == 1, (
            f"the step ran {len(runs_before_kill)} times while its holder was alive: the waiters did not wait"
        )
        assert holder_failed, "the holder's call should not have finished while its server was killed"
        keys = Workspace(tmp_path).keys(5)
        assert len(keys) == 2, f"the step ran {len(keys)} times: once on the killed holder, then once per waiter?"
        assert keys[0] == keys[1], "the step's second run got another idempotency key"
        assert len(Workspace(tmp_path).keys(5, "seal")) == 1
        shared = the_one(results, "computed 5: receipt-")
        async with connect(survivor.url, era, None) as retrying:
            assert await call(retrying, "compute", {"n": 5}) == shared
    assert len(Workspace(tmp_path).keys(5)) == 2
    assert (tmp_path / "lease").read_text() == "4.0", "the server ran without Timing(lease=...)"


async def test_a_cancelled_call_hands_its_question_to_a_waiting_call(store_url: str, tmp_path: Path) -> None:
    """2025-11-25: the client cancels the call carrying the question (notifications/cancelled) while the
    others wait on it; the question is asked again on one of them, answered once, the step runs once."""
    era = "2025-11-25"
    carried = anyio.Event()

    async def reply(seat: int, params: Params) -> ElicitResult:
        if len(desk.asked) == 1:
            carried.set()
            await anyio.sleep_forever()  # the person never gets to it: the call is cancelled meanwhile
        return accept(confirm=True)

    desk = Desk(reply)
    cancelled = "cancelled by the client"
    scopes: dict[int, anyio.CancelScope] = {}
    finished: list[int] = []
    others_done = anyio.Event()

    async def call_seat(index: int, client: Client) -> str:
        with anyio.CancelScope() as scope:
            scopes[index] = scope
            result = await call(client, "approve", {"n": 6})
            finished.append(index)
            if len(finished) == CALLERS - 1:
                others_done.set()
            return result
        await others_done.wait()  # only the call was cancelled: the connection stays
        return cancelled

    async def cancel_the_carrier() -> None:
        await carried.wait()
        await anyio.sleep(0.5)
        scopes[desk.asked[0][0]].cancel()

    server = launch(store_url, tmp_path)
    with running(server):
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_the_carrier)
            [results] = await together(CALLERS, lambda index: connect(server.url, era, desk.seat(index)), call_seat)
    seats = [seat for seat, _ in desk.asked]
    assert len(seats) == 2, f"the person was asked {len(seats)} times by {CALLERS} overlapping calls, one cancelled"
    carrier, heir = seats
    assert heir != carrier, "the question was asked again on the call that was cancelled"
    assert results[carrier] == cancelled
    for step in ("work", "seal"):
        keys = Workspace(tmp_path).keys(6, step)
        assert len(keys) == 1, f"step {step} ran {len(keys)} times"
    the_one([r for seat, r in enumerate(results) if seat != carrier], "approved 6: receipt-")


# -- an idempotency key reused for another request -------------------------------------------------------


@pytest.fixture
def authenticated(store_url: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    runtime = Elicitation(open_store(store_url), request_state=RequestState(keys=KEYS))
    server = runtime.server("overlap-auth", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))
    overlap_tools(runtime, Workspace(tmp_path), work_seconds=0.05)
    try:
        with serving(server.streamable_http_app(), port) as base:
            yield f"{base}/mcp"
    finally:
        runtime.close()


MISUSES = {
    "other-arguments": ("approve", {"n": 2}),
    "other-tool": ("compute", {"n": 1}),
}


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("moment", ["open", "completed"])
@pytest.mark.parametrize("misuse", list(MISUSES))
async def test_a_key_reused_for_another_request_is_refused(
    authenticated: str, store_url: str, tmp_path: Path, era: str, moment: str, misuse: str
) -> None:
    """Alice's call `approve(n=1)` under key K, still waiting on its question or completed; K again from
    her with other arguments or another tool: -32602 naming K, nobody asked, nothing run or attached."""
    tool, arguments = MISUSES[misuse]
    key = f"order-{misuse}-{moment}"
    meta = keyed(key)
    asked = anyio.Event()
    release = anyio.Event()
    first: list[str] = []

    async def alice_answers(context: ClientRequestContext, params: Params) -> ElicitResult:
        asked.set()
        if moment == "open":
            await release.wait()
        return accept(confirm=True)

    async def first_call() -> None:
        async with connect(authenticated, era, alice_answers, token="token-alice") as alice:
            first.append(await call(alice, "approve", {"n": 1}, meta))

    stranger = Person()
    refused: list[MCPError] = []
    answered: list[str] = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(first_call)
            if moment == "open":
                await asked.wait()
            else:
                while not first:
                    await anyio.sleep(0.01)
            async with connect(authenticated, era, stranger, token="token-alice") as other:
                try:
                    answered.append(outcome(await other.call_tool(tool, arguments, meta=meta)))
                except MCPError as error:
                    refused.append(error)
            release.set()
    reused = f"key {key!r} reused ({misuse}) while the first call was {moment}"
    assert stranger.asked == [], f"{reused}: the person was asked {[p.message for p in stranger.asked]}"
    assert not answered, f"{reused} was not refused: the call got {answered[0]!r}"
    [refusal] = refused
    assert refusal.code == INVALID_PARAMS, refusal.error
    assert key in refusal.message, refusal.message
    [done] = first
    assert done.startswith("approved 1: receipt-"), done
    assert [len(Workspace(tmp_path).keys(1, step)) for step in ("work", "seal")] == [1, 1]
    assert Workspace(tmp_path).keys(2) == []
    store = open_store(store_url)
    try:
        [decision] = store.list_decisions(Operator())
        assert decision.principal == ALICE and decision.status is DecisionStatus.ACCEPTED
        [operation] = store.find_operations(ALICE, method="tools/call", target="approve", idempotency_key=key)
    finally:
        store.close()
    async with connect(authenticated, era, Person(), token="token-alice") as again:
        assert await call(again, "approve", {"n": 1}, meta) == done, "the key no longer names the first call"
    assert operation.result == done


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("bobs_n", [1, 2], ids=["same-arguments", "other-arguments"])
async def test_one_key_from_two_principals_names_two_calls(
    authenticated: str, store_url: str, tmp_path: Path, era: str, bobs_n: int
) -> None:
    """Alice's `approve(n=1)` and Bob's `approve(n=bobs_n)` under one key, each waiting on its own question
    while the other's is out: each is asked once, gets its own result, and hears nothing of the other."""
    meta = keyed("turn-42")
    asked: dict[str, list[str]] = {"alice": [], "bob": []}
    out = {"alice": anyio.Event(), "bob": anyio.Event()}
    results: dict[str, str] = {}

    def person(name: str, other: str) -> Callback:
        async def answer(context: ClientRequestContext, params: Params) -> ElicitResult:
            asked[name].append(params.message)
            out[name].set()
            await out[other].wait()  # both operations are open under the key, each with its question out
            return accept(confirm=True)

        return answer

    async def calls(name: str, other: str, n: int) -> None:
        try:
            async with connect(authenticated, era, person(name, other), token=f"token-{name}") as client:
                results[name] = await call(client, "approve", {"n": n}, meta)
        finally:
            out[name].set()  # a call that ended without a question holds nobody up

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(calls, "alice", "bob", 1)
            group.start_soon(calls, "bob", "alice", bobs_n)
    assert asked == {"alice": ["Run job 1?"], "bob": [f"Run job {bobs_n}?"]}
    assert results["alice"].startswith("approved 1: receipt-"), results
    assert results["bob"].startswith(f"approved {bobs_n}: receipt-"), results
    assert results["alice"] != results["bob"]
    step_keys = Workspace(tmp_path).keys(1) + (Workspace(tmp_path).keys(2) if bobs_n == 2 else [])
    assert len(step_keys) == 2 and len(set(step_keys)) == 2, step_keys  # one run each, each its own step key
    store = open_store(store_url)
    try:
        operations = {
            who.principal_id: store.find_operations(
                who, method="tools/call", target="approve", idempotency_key="turn-42"
            )
            for who in (ALICE, BOB)
        }
        [alices], [bobs] = operations[ALICE.principal_id], operations[BOB.principal_id]
        assert (alices.result, bobs.result) == (results["alice"], results["bob"])
        assert {(d.principal, d.status) for d in store.list_decisions(Operator())} == {
            (ALICE, DecisionStatus.ACCEPTED),
            (BOB, DecisionStatus.ACCEPTED),
        }
    finally:
        store.close()
    async with connect(authenticated, era, Person(), token="token-bob") as bob:
        assert await call(bob, "approve", {"n": bobs_n}, meta) == results["bob"]  # his own result, replayed
        with pytest.raises(MCPError) as refused:
            await bob.call_tool("approve", {"n": 3}, meta=meta)
    assert refused.value.code == INVALID_PARAMS and "turn-42" in refused.value.message
    assert "caller" not in refused.value.message and "alice" not in refused.value.message


# -- bodies that catch exceptions around flow calls -------------------------------------------------------


class Tally:
    """Counts side effects across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def bump(self, what: str, pause: float = 0.0) -> int:
        time.sleep(pause)
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1
            return self.counts[what]


def build_catching(elicitation: Elicitation, tally: Tally) -> None:
    @elicitation.tool()
    async def guarded(flow: Flow, link: bool) -> str:
        """Every flow call wrapped in `except Exception`, as ordinary code would."""
        try:
            plan = await flow.step("plan", tally.bump, "plan", 0.3, returns=int)
        except Exception as error:
            return f"the step raised {type(error).__name__}"
        try:
            answer = await flow.ask(f"Apply plan {plan}?", Approval, key="approve")
        except Exception as error:
            return f"the question raised {type(error).__name__}"
        if not (isinstance(answer, Accepted) and answer.data.approve):
            return f"plan {plan} not approved"
        linked = "nothing to connect"
        if link:
            try:
                linked = type(await flow.ask_url("Connect your account", key="connect")).__name__
            except Exception as error:
                return f"the URL question raised {type(error).__name__}"
        try:
            applied = await flow.step("apply", tally.bump, "apply", returns=int)
        except Exception as error:
            return f"the apply step raised {type(error).__name__}"
        return f"applied plan {plan} (apply #{applied}, {linked})"

    @elicitation.tool()
    async def swallowing(flow: Flow) -> str:
        """Catches everything around `flow.ask`, the runtime's own signals included."""
        try:
            answer = await flow.ask("Approve?", Approval, key="approve")
        except BaseException:
            return "swallowed"
        return "answered" if isinstance(answer, Accepted) else "not answered"


@pytest.fixture
def catching(store_url: str) -> Iterator[tuple[Elicitation, MCPServer, Tally]]:
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(single_process=True),
        public_base_url="http://127.0.0.1:8765",
        timing=Timing(long_poll=timedelta(milliseconds=300)),
    )
    server = runtime.server("catching-server")
    tally = Tally()
    build_catching(runtime, tally)
    yield runtime, server, tally
    runtime.close()


async def complete_url_flows(elicitation: Elicitation, until: anyio.Event) -> None:
    """What the decision page does once the person is through: every consented URL decision completes."""
    store = elicitation.store
    while not until.is_set():
        for decision in store.list_decisions(Operator(), status=DecisionStatus.ACCEPTED_URL):
            try:
                pending = store.transition(decision, DecisionStatus.EXTERNAL_PENDING, caller=decision.principal)
                store.transition(pending, DecisionStatus.EXTERNAL_COMPLETED, caller=decision.principal)
            except StoreError:
                continue
        await anyio.sleep(0.05)


def answers(seat: int, params: Params) -> ElicitResult:
    return accept(approve=True) if params.mode == "form" else ElicitResult(action="accept")


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("overlapping", [1, 3])
async def test_except_exception_around_flow_calls_changes_nothing(
    catching: tuple[Elicitation, MCPServer, Tally], era: str, overlapping: int
) -> None:
    """The body wraps step, ask and ask_url in `except Exception`: the same result on every era, alone or
    with overlapping calls waiting on each other, each step run once and each question asked once."""
    runtime, server, tally = catching
    connecting = era != "2025-06-18"  # form mode only there

    async def reply(seat: int, params: Params) -> ElicitResult:
        await anyio.sleep(0.1)
        return answers(seat, params)

    desk = Desk(reply)
    done = anyio.Event()

    async def call_seat(index: int, client: Client) -> str:
        return await call(client, "guarded", {"link": connecting})

    async with anyio.create_task_group() as group:
        group.start_soon(complete_url_flows, runtime, done)
        try:
            [results] = await together(overlapping, lambda index: connect(server, era, desk.seat(index)), call_seat)
        finally:
            done.set()
    linked = "Completed" if connecting else "nothing to connect"
    seen = {"results": sorted(set(results)), "asked": [message for _, message in desk.asked], "runs": tally.counts}
    assert seen == {
        "results": [f"applied plan 1 (apply #1, {linked})"],
        "asked": ["Apply plan 1?", "Connect your account"] if connecting else ["Apply plan 1?"],
        "runs": {"plan": 1, "apply": 1},
    }


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_a_body_that_swallows_the_runtimes_signal_gets_a_clear_error(
    catching: tuple[Elicitation, MCPServer, Tally], era: str
) -> None:
    """`except BaseException` around `flow.ask`: on 2026-07-28 the round's signal is caught, and the call
    ends with an error saying so, never the body's "swallowed". On a 2025 era the question is asked on
    the live call, nothing is signalled, and the body goes on with the answer."""
    _, server, _ = catching
    person = Person([accept(approve=True)])
    async with connect(server, era, person) as client:
        said = await call(client, "swallowing", {})
    if era == "2025-11-25":
        assert said == "answered"
        return
    assert "swallowed" not in said, f"the body's silent wrong value came through: {said!r}"
    assert said.startswith(("tool error: ", "MCP error ")), said
    assert re.search(r"caught|control.flow", said, re.IGNORECASE), said
