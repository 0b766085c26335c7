"""A call's held writes on a real SQLite store: nothing of them is durable before the commit, all of them with
it; a commit that loses to another call's progress says how (run again, key refused, operation ended) and
still records the step results a run again would otherwise repeat; a store that cannot take those results
now keeps them for the next try.

The store goes away for real: another connection holds `BEGIN EXCLUSIVE` on the file past the store's
busy timeout.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mcp_elicit.model import DecisionStatus, Operation, OperationStatus, new_operation
from mcp_elicit.server.signals import StaleSnapshot
from mcp_elicit.server.writes import HeldWrites, KeyRefused, OperationEnded
from mcp_elicit.store import (
    AlreadyExists,
    DecisionConflict,
    IdempotencyKeyConflict,
    NotFound,
    OperationConflict,
    StoreUnavailable,
)
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.sqlite import SQLiteStore
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, Records

pytestmark = pytest.mark.anyio

Write = Callable[[], Awaitable[Any]]


class Boom(Exception):
    pass


class Call:
    """One call's view of the store: its held writes, and the writes a call holds (a step's result, a round's
    token), each readable back from the store."""

    def __init__(self, store: SQLiteStore, clock: FakeClock) -> None:
        self.store = AsyncStore(store)
        self.records = Records(store, clock)
        self.clock = clock
        self.writes = HeldWrites(self.store)
        self.done: list[str] = []

    def step_result(self, operation: Operation, name: str = "plan", value: int = 1) -> Write:
        return lambda: self.store.journal_record(operation.operation_id, name, value, caller=ALICE)

    def spend(self, token: str) -> Write:
        return lambda: self.store.consume_token(token, expires_at=self.clock() + timedelta(hours=1))

    def after(self, name: str) -> None:
        self.writes.after_commit(lambda: self.done.append(name))

    async def journal(self, operation: Operation) -> dict[str, Any]:
        return {entry.name: entry.value for entry in await self.store.journal(operation.operation_id, caller=ALICE)}

    async def spent(self, token: str) -> bool:
        return await self.store.token_consumed(token)


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "elicit.db", clock=clock, busy_timeout=0.1)
    yield store
    store.close()


@pytest.fixture
def call(sqlite_store: SQLiteStore, clock: FakeClock) -> Call:
    return Call(sqlite_store, clock)


class Locked:
    """Another connection holding the SQLite file exclusively, until `release`."""

    def __init__(self, path: Path) -> None:
        self._locker = sqlite3.connect(path, isolation_level=None)
        self._locker.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        self._locker.execute("ROLLBACK")
        self._locker.close()


def candidate(call: Call, *, key: str | None = None, digest: str = "sha256:a") -> Operation:
    return new_operation(
        ALICE,
        method="tools/call",
        target="deploy",
        request_digest=digest,
        now=call.clock(),
        ttl=timedelta(hours=1),
        idempotency_key=key,
    )


async def test_nothing_held_is_durable_before_the_commit_and_all_of_it_with_the_commit(call: Call) -> None:
    operation = candidate(call)
    call.writes.hold(lambda: call.store.create_operation(operation))
    call.writes.hold(call.step_result(operation))
    call.after("first")
    call.after("second")
    assert call.writes.pending and not call.writes.committed
    with pytest.raises(NotFound):
        await call.store.get_operation(operation.operation_id, ALICE)

    seen = await call.writes.commit_with(lambda: call.store.journal(operation.operation_id, caller=ALICE))

    assert [entry.name for entry in seen] == ["plan"]  # the last call ran in the same transaction, after them
    assert (await call.store.get_operation(operation.operation_id, ALICE)).operation_id == operation.operation_id
    assert not call.writes.pending and call.writes.committed
    assert call.done == ["first", "second"]
    await call.writes.commit()
    assert call.done == ["first", "second"]


async def test_a_commit_of_nothing_held_makes_nothing_durable(call: Call) -> None:
    call.after("nothing")
    await call.writes.commit()
    assert call.done == [] and not call.writes.committed
    assert await call.writes.commit_with(lambda: call.store.token_consumed("round-1")) is False
    assert call.done == ["nothing"] and not call.writes.committed
    operation = call.records.operation()
    call.writes.hold(call.step_result(operation))
    await call.writes.commit()
    await call.writes.commit_with(lambda: call.store.token_consumed("round-1"))
    assert call.writes.committed


async def test_a_failed_commit_writes_nothing_and_holds_on_only_to_the_results_to_keep(call: Call) -> None:
    operation = call.records.operation()
    call.writes.hold(call.step_result(operation), keep=True)
    call.writes.hold(call.spend("round-1"))
    call.after("committed")

    async def fails() -> None:
        raise Boom

    with pytest.raises(Boom):
        await call.writes.commit_with(fails)
    assert await call.journal(operation) == {} and not await call.spent("round-1")
    assert call.writes.pending and not call.writes.committed

    await call.writes.commit()
    assert await call.journal(operation) == {"plan": 1}
    assert not await call.spent("round-1")  # the round is redone by the retry that the failure asks for
    assert call.done == [] and call.writes.committed


async def test_losing_to_a_record_another_call_made_first_runs_the_body_again_with_the_results_kept(
    call: Call,
) -> None:
    operation = call.records.operation()
    call.writes.hold(call.step_result(operation), keep=True)
    call.writes.hold(lambda: call.store.create_operation(operation))
    call.writes.hold(call.spend("round-1"))
    call.after("committed")

    with pytest.raises(StaleSnapshot) as raised:
        await call.writes.commit()

    assert isinstance(raised.value.__cause__, AlreadyExists)
    assert str(raised.value) == f"operation {operation.operation_id} already exists"
    assert await call.journal(operation) == {"plan": 1}
    assert not await call.spent("round-1")
    assert call.done == [] and call.writes.committed and not call.writes.pending


async def test_losing_a_decisions_compare_and_set_runs_the_body_again(call: Call) -> None:
    decision = call.records.form()
    await call.store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})
    call.writes.hold(lambda: call.store.transition(decision, DecisionStatus.DECLINED, caller=ALICE))

    with pytest.raises(StaleSnapshot) as raised:
        await call.writes.commit()

    assert isinstance(raised.value.__cause__, DecisionConflict)
    assert str(raised.value) == (f"cannot move {decision.elicitation_id} to declined: it is now accepted (version 1)")
    assert not call.writes.committed


async def test_a_key_bound_to_another_request_refuses_the_call(call: Call) -> None:
    await call.store.begin_operation(candidate(call, key="k-1", digest="sha256:first"))
    call.writes.hold(lambda: call.store.begin_operation(candidate(call, key="k-1", digest="sha256:other")))

    with pytest.raises(KeyRefused) as raised:
        await call.writes.commit()

    assert isinstance(raised.value.conflict, IdempotencyKeyConflict)
    assert raised.value.__cause__ is raised.value.conflict
    refusal = "idempotency key 'k-1' was first used for the same tool with other arguments; use a new key"
    assert str(raised.value) == str(raised.value.conflict) == f"{refusal} for this request"


async def test_an_operation_another_call_ended_ends_this_call_with_its_end(call: Call) -> None:
    operation = call.records.operation()
    ended = await call.store.finish_operation(operation, OperationStatus.CANCELLED, caller=ALICE)
    call.writes.hold(call.step_result(operation), keep=True)
    call.writes.hold(lambda: call.store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE))

    with pytest.raises(OperationEnded) as raised:
        await call.writes.commit()

    assert raised.value.operation == ended
    assert isinstance(raised.value.__cause__, OperationConflict)
    assert str(raised.value) == f"operation {operation.operation_id} is cancelled"
    assert await call.journal(operation) == {"plan": 1}


async def test_a_check_of_the_calls_own_that_fails_inside_the_commit_still_keeps_the_results(call: Call) -> None:
    operation = call.records.operation()
    call.writes.hold(call.step_result(operation), keep=True)
    call.writes.hold(call.spend("round-1"))
    taken = StaleSnapshot("the question's claim was taken meanwhile")

    async def check() -> None:
        raise taken

    with pytest.raises(StaleSnapshot) as raised:
        await call.writes.commit_with(check)

    assert raised.value is taken
    assert await call.journal(operation) == {"plan": 1}
    assert not await call.spent("round-1")
    assert call.writes.committed


async def test_results_to_keep_are_committed_on_their_own_and_the_rest_stays_held(call: Call) -> None:
    assert await call.writes.keep_results()
    operation = call.records.operation()
    call.writes.hold(call.step_result(operation), keep=True)
    call.writes.hold(call.spend("round-1"))

    assert await call.writes.keep_results()

    assert await call.journal(operation) == {"plan": 1} and not await call.spent("round-1")
    assert call.writes.committed and call.writes.pending
    await call.writes.commit()
    assert await call.spent("round-1")


async def test_results_that_lose_on_their_own_are_left_to_whoever_took_over(
    call: Call, caplog: pytest.LogCaptureFixture
) -> None:
    gone = candidate(call)
    call.writes.hold(call.step_result(gone), keep=True)
    caplog.set_level(logging.INFO, logger="mcp_elicit.server.writes")

    assert await call.writes.keep_results()

    assert not call.writes.committed
    assert [record.getMessage() for record in caplog.records] == [
        f"results of a commit that lost were not kept either: no operation {gone.operation_id}"
    ]
    assert await call.writes.keep_results()
    assert len(caplog.records) == 1


async def test_results_the_store_cannot_take_now_are_kept_for_the_next_try(
    call: Call, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    operation = call.records.operation()
    call.writes.hold(call.step_result(operation), keep=True)
    call.writes.hold(call.spend("round-1"))
    caplog.set_level(logging.WARNING, logger="mcp_elicit.server.writes")
    locked = Locked(tmp_path / "elicit.db")
    try:
        with pytest.raises(StoreUnavailable) as down:
            await call.writes.commit()
        assert call.writes.pending
        assert not await call.writes.keep_results()
        assert not await call.writes.keep_results()
    finally:
        locked.release()
    assert [record.getMessage() for record in caplog.records] == [f"step results not recorded yet: {down.value}"] * 2
    assert not call.writes.committed

    assert await call.writes.keep_results()

    assert await call.journal(operation) == {"plan": 1} and not await call.spent("round-1")
    assert call.writes.committed and not call.writes.pending
