"""Background work shared by several lifespans, and answers that stay durable while the body works on.

The SDK runs one lifespan per connection for its in-memory client (and SSE): connections open and close in
any order, and the server's background work (the lease keeper above all) must go on as long as any is up:
the lifespan test opens its connections with the SDK's client itself, since when they open and close is
its subject. A durable answer is a call like any other, through `mcp_elicit.testing.Harness`.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import anyio
import psycopg
import pytest
from mcp import Client
from pydantic import BaseModel

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.model.audit_keys import AuditSigningKeys
from mcp_elicit.server import Accepted, AuditSealing, Elicitation, Flow, RequestState, Timing
from mcp_elicit.server.audit_sealer import AuditSealer
from mcp_elicit.server.background import Shared
from mcp_elicit.store import open_store, utc_now
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.postgres import SEAL_LOCK
from mcp_elicit.testing import Harness, accept
from tests.helpers.records import Records

pytestmark = pytest.mark.anyio


async def test_a_shared_task_runs_once_and_is_taken_over_when_its_host_ends() -> None:
    runs: list[int] = []

    async def work() -> None:
        runs.append(len(runs))
        await anyio.sleep_forever()

    shared = Shared(work)
    async with anyio.create_task_group() as group:
        first, second = anyio.CancelScope(), anyio.CancelScope()

        async def host(scope: anyio.CancelScope) -> None:
            with scope:
                await shared.host()

        group.start_soon(host, first)
        group.start_soon(host, second)
        await anyio.sleep(0.05)
        assert runs == [0] and shared.running
        first.cancel()
        await anyio.sleep(0.05)
        assert runs == [0, 1] and shared.running, "the host still up took the work over"
        second.cancel()
        await anyio.sleep(0.05)
        assert not shared.running


class Go(BaseModel):
    go: bool


async def test_claims_stay_renewed_after_the_connection_whose_lifespan_renewed_them_closes(tmp_path: Path) -> None:
    """Connection A's lifespan runs the lease keeper; B's call holds a step past several leases after A
    closed: its claim must never lapse (a lapsed claim lets an overlapping call run the step again)."""
    lease = timedelta(seconds=0.6)
    elicitation = Elicitation(
        f"sqlite:///{tmp_path / 's.db'}", request_state=RequestState(single_process=True), timing=Timing(lease=lease)
    )
    server = elicitation.server("background")
    entered, lapsed = anyio.Event(), list[bool]()

    @elicitation.tool()
    async def hold(flow: Flow) -> str:
        async def slow() -> str:
            entered.set()
            for _ in range(6):
                await anyio.sleep(lease.total_seconds() / 2)
                [claim] = elicitation.store.claims(flow.operation_id, caller=flow.principal)
                lapsed.append(claim.lease_until <= elicitation.clock())
            return "held"

        return await flow.step("slow", slow)

    a_open, a_done = anyio.Event(), anyio.Event()

    async def connection_a() -> None:
        async with Client(server, mode="legacy"):  # its lifespan is the first, so it runs the keeper
            a_open.set()
            await entered.wait()
        a_done.set()  # A's lifespan is over; B's call is still in its step

    async with anyio.create_task_group() as group:
        group.start_soon(connection_a)
        await a_open.wait()
        async with Client(server, mode="legacy") as b:
            await b.call_tool("hold", {})
        assert a_done.is_set()
    assert len(lapsed) == 6 and not any(lapsed), f"the step's claim lapsed while its holder ran it: {lapsed}"
    elicitation.close()


async def test_the_last_lifespan_to_end_seals_what_was_written_and_says_the_sealer_stopped(tmp_path: Path) -> None:
    """The sealer's interval is an hour, so only the end can seal: A's connection closing leaves the sealing to
    B's lifespan, still up; B's closing, the last, seals the calls' audit rows once the background work stopped,
    and the checkpoint says no sealer runs any more (verify then expects none to seal what comes after)."""
    keys = AuditSigningKeys([bytes(range(32))])
    sealing = AuditSealing(keys, checkpoint_interval=timedelta(hours=1))
    elicitation = Elicitation(
        f"sqlite:///{tmp_path / 's.db'}", request_state=RequestState(single_process=True), audit=sealing
    )
    server = elicitation.server("sealed")

    @elicitation.tool()
    async def noted(flow: Flow, n: int) -> str:
        return f"noted {n}"

    async with Client(server, mode="legacy") as b:
        async with Client(server, mode="legacy") as a:
            await a.call_tool("noted", {"n": 1})
        after_a = elicitation.store.verify_audit(keys.public())
        assert after_a.unsealed > 0 and after_a.last_checkpoint is None, "B's lifespan is up: nothing sealed yet"
        await b.call_tool("noted", {"n": 2})
    report = elicitation.store.verify_audit(keys.public())
    assert report.sound and report.unsealed == 0 and report.rows_sealed > after_a.unsealed, report
    assert report.last_checkpoint is not None and not report.last_checkpoint.sealer_running
    elicitation.close()


async def test_a_legacy_answer_is_durable_before_the_body_works_on(tmp_path: Path) -> None:
    """The body works on past the question's TTL after the answer: the answer was committed when it came,
    so the operation completes with it instead of finding it expired at the next commit."""
    elicitation = Elicitation(f"sqlite:///{tmp_path / 's.db'}", request_state=RequestState(single_process=True))
    elicitation.server("durable")
    seen: list[object] = []

    @elicitation.tool()
    async def decide(flow: Flow) -> str:
        answer = await flow.ask("Go?", Go, ttl=timedelta(seconds=1))
        seen.append(answer)
        await anyio.sleep(1.5)
        return "went" if isinstance(answer, Accepted) and answer.data.go else "stayed"

    called = await Harness(elicitation, era="2025-11-25").call("decide", answers={"go": accept(go=True)})
    assert called.text == "went" and len(called.asked) == 1 and len(seen) == 1
    [decision] = elicitation.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.ACCEPTED
    operation = elicitation.store.get_operation(decision.operation_id, decision.principal)
    assert operation.status is OperationStatus.COMPLETED
    elicitation.close()


@pytest.mark.engines("postgres")  # SQLite's calls run inline on the loop: only a driver that waits can be given up on
async def test_the_last_seal_gives_up_on_a_store_that_does_not_answer(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The last seal, as the app stops, waits on a database that does not answer (here a lock another session
    holds, as a server down keeps the pool waiting): it gives up after its timeout, saying what it left."""
    keys = AuditSigningKeys([bytes(range(32))])
    store = open_store(store_url)
    try:
        Records(store, utc_now).form()
        sealer = AuditSealer(AsyncStore(store), keys, timedelta(hours=1), stop_timeout=timedelta(seconds=0.5))
        with psycopg.connect(store_url) as other:
            other.execute("LOCK TABLE elicit_audit_checkpoints IN ACCESS EXCLUSIVE MODE")

            async def release_late() -> None:
                await anyio.sleep(10)
                other.rollback()

            async with store.serving(), anyio.create_task_group() as group:
                group.start_soon(release_late)
                started = anyio.current_time()
                with caplog.at_level(logging.WARNING, logger="mcp_elicit.server.audit_sealer"):
                    assert await sealer.stop() is None, "it waited for the lock to go"
                assert anyio.current_time() - started < 5
                group.cancel_scope.cancel()
            other.rollback()
        [warning] = [r.getMessage() for r in caplog.records if r.name == "mcp_elicit.server.audit_sealer"]
        assert warning.startswith("the last audit seal of postgresql://") and warning.endswith(
            "did not end (or never got its turn) within 0.5 s: the rows written since no checkpoint of its own are"
            " left unsealed until the next seal"
        )
        assert store.verify_audit(keys.public()).unsealed == 2, "nothing was sealed"
    finally:
        store.close()


@pytest.mark.engines("postgres")  # SQLite's write lock serializes seals: a seal there always has its turn
async def test_the_last_seal_waits_for_its_turn_held_by_another_session(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A periodic seal cancelled as the app stops may leave its session holding the seal's lock a moment: the
    last seal is not skipped in silence, it asks again until it gets its turn, or says what it left."""
    keys = AuditSigningKeys([bytes(range(32))])
    store = open_store(store_url)
    try:
        Records(store, utc_now).form()
        with psycopg.connect(store_url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (SEAL_LOCK,))
            taken = store.seal_audit(keys)
            assert (taken.rows, taken.turn) == (0, False), "the seal says it did not get its turn"
            sealer = AuditSealer(AsyncStore(store), keys, timedelta(hours=1), stop_timeout=timedelta(seconds=0.5))
            async with store.serving():
                with caplog.at_level(logging.WARNING, logger="mcp_elicit.server.audit_sealer"):
                    assert await sealer.stop() is None, "it never got its turn"
            [warning] = [r.getMessage() for r in caplog.records if r.name == "mcp_elicit.server.audit_sealer"]
            assert "never got its turn) within 0.5 s: the rows written since no checkpoint" in warning, warning
            assert store.verify_audit(keys.public()).unsealed == 2

            async def release_soon() -> None:
                await anyio.sleep(1)
                other.execute("SELECT pg_advisory_unlock(%s)", (SEAL_LOCK,))

            sealer = AuditSealer(AsyncStore(store), keys, timedelta(hours=1))
            async with store.serving(), anyio.create_task_group() as group:
                group.start_soon(release_soon)
                result = await sealer.stop()
            assert result is not None and result.turn and result.rows == 2, result
        report = store.verify_audit(keys.public())
        assert report.unsealed == 0 and report.last_checkpoint is not None
        assert not report.last_checkpoint.sealer_running
    finally:
        store.close()
