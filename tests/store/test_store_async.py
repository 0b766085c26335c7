"""The store's calls from async code: inline on SQLite, coroutines on PostgreSQL's async pool, threads otherwise."""

from __future__ import annotations

import asyncio
import inspect
import threading

import anyio
import psycopg
import pytest

from mcp_elicit.model import DecisionStatus, OperationStatus
from mcp_elicit.store import DecisionConflict, NotFound, Store, open_store
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.postgres import PostgresStore
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, BOB, Records

pytestmark = pytest.mark.anyio


def test_every_call_is_declared_once_for_both_faces_with_its_signature() -> None:
    """`AsyncStore` declares each of the store's calls; `Store`, generated from it, has each as a blocking
    method with the same signature, and nothing else of its own."""
    calls = [name for name, member in vars(AsyncStore).items() if inspect.iscoroutinefunction(member)]
    assert len(calls) > 25
    blocking = {name for name, member in vars(Store).items() if inspect.isfunction(member)}
    assert set(calls) == blocking
    for name in calls:
        declared = inspect.signature(getattr(AsyncStore, name), eval_str=True)
        assert not inspect.iscoroutinefunction(getattr(Store, name)), name
        assert inspect.signature(getattr(Store, name), eval_str=True) == declared, name


async def test_an_async_unit_that_waits_on_anything_but_its_calls_is_refused_on_an_inline_store(
    sqlite_url: str, clock: FakeClock
) -> None:
    """On SQLite a unit runs to its end without the event loop's help: a unit that awaits something else
    (here, a turn of the loop) is refused as such, not left half-run."""
    store = open_store(sqlite_url, clock=clock)
    reached = AsyncStore(store)
    decision = Records(store, clock).form()

    async def answer_then_wait() -> None:
        await reached.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"ok": 1})
        await asyncio.sleep(0)  # gives way to the loop once

    try:
        with pytest.raises(RuntimeError, match="waited on an engine that runs synchronously"):
            await reached.atomically(answer_then_wait)
        assert store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.REQUESTED
    finally:
        store.close()


@pytest.mark.postgres
async def test_on_postgresql_calls_run_on_the_event_loop_while_serving_holds_the_pool(
    pg_schema_url: str, clock: FakeClock
) -> None:
    store = open_store(pg_schema_url, clock=clock)
    assert isinstance(store, PostgresStore)
    committed_on: list[threading.Thread] = []
    store.add_change_listener(lambda _subject: committed_on.append(threading.current_thread()))
    reached = AsyncStore(store)
    records = Records(store, clock)
    try:
        assert store.asynchronous is None
        first = records.operation()
        await reached.finish_operation(first, OperationStatus.COMPLETED, caller=ALICE, result=1)
        assert committed_on[-1] is not threading.current_thread()  # outside `serving`: a worker thread

        async with store.serving():
            async with store.serving():
                assert store.asynchronous is not None
            assert store.asynchronous is not None  # the outer block still holds it
            second = records.operation()
            await reached.finish_operation(second, OperationStatus.COMPLETED, caller=ALICE, result=2)
            assert committed_on[-1] is threading.current_thread()
            assert (await reached.get_operation(second.operation_id, ALICE)).result == 2
            with pytest.raises(NotFound):
                await reached.get_operation(second.operation_id, BOB)
        assert store.asynchronous is None
    finally:
        store.close()


@pytest.mark.postgres
async def test_an_async_unit_commits_whole_or_not_at_all(pg_schema_url: str, clock: FakeClock) -> None:
    store = open_store(pg_schema_url, clock=clock)
    reached = AsyncStore(store)
    records = Records(store, clock)
    try:
        async with store.serving():
            decision = records.form()
            operation = store.get_operation(decision.operation_id, ALICE)

            async def answer_then_lose() -> None:
                await reached.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"ok": 1})
                await reached.journal_record(operation.operation_id, "plan", "p", caller=ALICE)
                await reached.transition(decision, DecisionStatus.DECLINED, caller=ALICE)

            with pytest.raises(DecisionConflict):
                await reached.atomically(answer_then_lose)
            assert store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.REQUESTED
            assert store.journal_get(operation.operation_id, "plan", caller=ALICE) is None

            async def answer_and_record() -> str:
                await reached.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"ok": 1})
                entry = await reached.journal_record(operation.operation_id, "plan", "p", caller=ALICE)
                # the unit reads its own writes
                seen = await reached.get_decision(decision.elicitation_id, ALICE)
                assert seen.status is DecisionStatus.ACCEPTED
                return str(entry.value)

            assert await reached.atomically(answer_and_record) == "p"
        assert store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.ACCEPTED
        trail = store.audit_trail(decision.elicitation_id, ALICE)
        assert [entry.to_status for entry in trail] == ["requested", "accepted"]  # nothing of the lost unit
    finally:
        store.close()


async def test_overlapping_async_units_keep_their_own_transactions(store_url: str, clock: FakeClock) -> None:
    """Each task's unit is its own: one failing rolls back its writes only, on every engine."""
    store = open_store(store_url, clock=clock)
    reached = AsyncStore(store)
    records = Records(store, clock)
    async with store.serving():
        kept, lost = records.form(), records.form()

        async def keep() -> None:
            await reached.transition(kept, DecisionStatus.ACCEPTED, caller=ALICE, content={"ok": 1})

        async def lose() -> None:
            await reached.transition(lost, DecisionStatus.DECLINED, caller=ALICE)
            raise LookupError("the unit fails after its write")

        async def losing() -> None:
            with pytest.raises(LookupError):
                await reached.atomically(lose)

        async with anyio.create_task_group() as group:
            group.start_soon(reached.atomically, keep)
            group.start_soon(losing)
    try:
        assert store.get_decision(kept.elicitation_id, ALICE).status is DecisionStatus.ACCEPTED
        assert store.get_decision(lost.elicitation_id, ALICE).status is DecisionStatus.REQUESTED
    finally:
        store.close()


@pytest.mark.postgres
async def test_a_function_that_is_not_a_store_call_runs_in_a_worker_thread(
    pg_schema_url: str, clock: FakeClock
) -> None:
    """Pages hand `AsyncStore.call_blocking` functions of their own that read the store: those keep to a thread."""
    store = open_store(pg_schema_url, clock=clock)
    records = Records(store, clock)
    try:
        operation = records.operation()

        def target_of(operation_id: str) -> tuple[str, threading.Thread]:
            return store.get_operation(operation_id, ALICE).target, threading.current_thread()

        async with store.serving():
            target, ran_on = await AsyncStore(store).call_blocking(target_of, operation.operation_id)
        assert target == "deploy" and ran_on is not threading.current_thread()
    finally:
        store.close()


@pytest.mark.postgres
async def test_a_unit_cancelled_while_it_commits_still_commits_whole(pg_schema_url: str, clock: FakeClock) -> None:
    """A cancelled call (the client cancelled, the server stopping) finishes the commit it began, as a worker
    thread always did: its answer and its operation's end are not lost half-way."""
    store = open_store(pg_schema_url, clock=clock)
    reached = AsyncStore(store)
    records = Records(store, clock)
    try:
        async with store.serving():
            first, second = records.operation(), records.operation()
            blocker = await psycopg.AsyncConnection.connect(pg_schema_url)
            await blocker.execute(
                "SELECT 1 FROM elicit_operations WHERE operation_id = %s FOR UPDATE", (second.operation_id,)
            )

            async def finish_both() -> None:
                await reached.finish_operation(first, OperationStatus.COMPLETED, caller=ALICE, result=1)
                await reached.finish_operation(second, OperationStatus.COMPLETED, caller=ALICE, result=2)

            async def release_later() -> None:
                await anyio.sleep(0.5)
                await blocker.rollback()

            async with anyio.create_task_group() as group:
                group.start_soon(release_later)
                with anyio.move_on_after(0.2) as waited:
                    await reached.atomically(finish_both)
            await blocker.close()
            assert waited.cancel_called  # the deadline passed while the unit waited on the lock
        assert [store.get_operation(o.operation_id, ALICE).result for o in (first, second)] == [1, 2]
    finally:
        store.close()


@pytest.mark.postgres
async def test_an_async_unit_outside_serving_runs_whole_in_a_worker_thread(
    pg_schema_url: str, clock: FakeClock
) -> None:
    """Without the async engine (no `serving`), a unit runs on the blocking store in a thread of its own, its
    calls inline there: the loop is never blocked, and the unit still commits whole or not at all."""
    store = open_store(pg_schema_url, clock=clock)
    reached = AsyncStore(store)
    records = Records(store, clock)
    loop_thread = threading.current_thread()
    ran_on: list[threading.Thread] = []
    try:
        assert store.asynchronous is None
        decision = records.form()

        async def answer_then_lose() -> None:
            ran_on.append(threading.current_thread())
            await reached.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"ok": 1})
            await reached.transition(decision, DecisionStatus.DECLINED, caller=ALICE)

        with pytest.raises(DecisionConflict):
            await reached.atomically(answer_then_lose)
        assert store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.REQUESTED

        async def answer_and_look() -> DecisionStatus:
            await reached.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"ok": 1})
            return (await reached.get_decision(decision.elicitation_id, ALICE)).status

        assert await reached.atomically(answer_and_look) is DecisionStatus.ACCEPTED
        assert ran_on and ran_on[0] is not loop_thread
        trail = store.audit_trail(decision.elicitation_id, ALICE)
        assert [entry.to_status for entry in trail] == ["requested", "accepted"]
    finally:
        store.close()
