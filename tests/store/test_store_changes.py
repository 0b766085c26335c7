"""Change reports that wake waiting calls: in-process listeners, and PostgreSQL LISTEN/NOTIFY across instances."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import anyio
import psycopg
import pytest

from mcp_elicit.model import DecisionStatus, OperationStatus, SubjectKind
from mcp_elicit.store import DecisionConflict, Store, hooks, open_store, postgres
from mcp_elicit.store.postgres import PostgresStore
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, Records

pytestmark = pytest.mark.anyio


def test_listeners_hear_every_decision_move_after_commit(store: Store, records: Records) -> None:
    heard: list[str] = []
    store.add_change_listener(heard.append)
    url, form = records.url(), records.form()
    store.transition(url, DecisionStatus.ACCEPTED_URL, caller=ALICE)
    store.transition(form, DecisionStatus.DECLINED, caller=ALICE)
    assert heard == [url.elicitation_id, form.elicitation_id]


def test_listeners_hear_an_operation_on_its_journal_claims_and_end(store: Store, records: Records) -> None:
    operation = records.operation()
    heard: list[str] = []
    store.add_change_listener(heard.append)
    lease = store_now(records) + timedelta(seconds=30)
    store.claim(operation.operation_id, "step:plan", holder="a", lease_until=lease, caller=ALICE)
    assert heard == []
    store.journal_record(operation.operation_id, "plan", 1, caller=ALICE)
    store.journal_record(operation.operation_id, "plan", 2, caller=ALICE)
    store.release_claim(operation.operation_id, "step:plan", caller=ALICE, holder="a")
    store.release_claim(operation.operation_id, "step:plan", caller=ALICE, holder="a")
    store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE, result="done")
    assert heard == [operation.operation_id] * 3


def store_now(records: Records) -> datetime:
    return records.clock()


@pytest.mark.postgres
async def test_another_instance_hears_the_move_through_listen_notify(pg_schema_url: str, clock: FakeClock) -> None:
    mover, listener = open_store(pg_schema_url, clock=clock), open_store(pg_schema_url, clock=clock)
    assert isinstance(listener, PostgresStore)
    heard: list[str] = []
    try:
        url = Records(mover, clock).url()
        async with anyio.create_task_group() as group:
            group.start_soon(listener.listen, heard.append)
            await anyio.sleep(0.3)
            mover.transition(url, DecisionStatus.ACCEPTED_URL, caller=ALICE)
            with anyio.fail_after(10):
                while url.elicitation_id not in heard:
                    await anyio.sleep(0.02)
            await anyio.sleep(0.2)  # room for a second notice, which must not come
            group.cancel_scope.cancel()
        # The channel is the database's: other processes' notices may come too, so only this test's ids count.
        assert [subject for subject in heard if subject in (url.elicitation_id, url.operation_id)] == [
            url.elicitation_id
        ]
    finally:
        mover.close()
        listener.close()


class Waiters:
    """An `Interest` the test turns on and off, as calls starting and ending their waits would."""

    def __init__(self) -> None:
        self.waiting = False
        self._changed = anyio.Event()

    def set(self, waiting: bool) -> None:
        self.waiting = waiting
        self._changed.set()
        self._changed = anyio.Event()

    def awaited(self) -> bool:
        return self.waiting

    async def until_awaited(self) -> None:
        while not self.waiting:
            await self._changed.wait()


def listening_backends(database_url: str) -> int:
    """The listener connections that have run their LISTEN: one that is connected but has not yet would miss a
    notice sent now (by design: notices only hurry waiters along), so it is not counted as listening."""
    with psycopg.connect(database_url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s"
            " AND query LIKE 'LISTEN %%'",
            (postgres.LISTENER_NAME,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def eventually(check: Callable[[], bool], seconds: float = 10) -> None:
    with anyio.fail_after(seconds):
        while not check():
            await anyio.sleep(0.02)


@pytest.mark.postgres
async def test_an_instance_listens_only_while_something_in_it_waits(
    pg_schema_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody waiting: no LISTEN connection, so moves signal nobody. A waiter appears: the instance listens
    and hears the next move. The last waiter gone: after the linger the connection closes again."""
    monkeypatch.setattr(postgres, "LISTEN_CHECK", 0.05)
    monkeypatch.setattr(postgres, "LISTEN_LINGER", 0.3)
    mover, listener = open_store(pg_schema_url, clock=clock), open_store(pg_schema_url, clock=clock)
    assert isinstance(listener, PostgresStore)
    waiters, heard = Waiters(), list[str]()
    try:
        records = Records(mover, clock)
        unheard, awaited = records.url(), records.url()
        async with anyio.create_task_group() as group:
            others = listening_backends(pg_schema_url)  # listeners other tests may have left behind
            group.start_soon(listener.listen, heard.append, waiters)
            await anyio.sleep(0.3)
            assert listening_backends(pg_schema_url) == others
            mover.transition(unheard, DecisionStatus.ACCEPTED_URL, caller=ALICE)
            waiters.set(True)
            await eventually(lambda: listening_backends(pg_schema_url) == others + 1)
            mover.transition(awaited, DecisionStatus.ACCEPTED_URL, caller=ALICE)
            mine = (unheard.elicitation_id, awaited.elicitation_id)
            await eventually(lambda: any(subject in mine for subject in heard))
            waiters.set(False)
            await eventually(lambda: listening_backends(pg_schema_url) == others)
            group.cancel_scope.cancel()
        assert [subject for subject in heard if subject in mine] == [awaited.elicitation_id]
    finally:
        mover.close()
        listener.close()


class Told(hooks.StoreHooks):
    """An observer overriding only what it is told: its around-call hooks are `StoreHooks`' own, which must run
    the call and hand back what it returns."""

    def __init__(self) -> None:
        self.told: list[object] = []

    def committed(self, change: hooks.Committed) -> None:
        self.told.append(change)

    def conflict(self, kind: SubjectKind) -> None:
        self.told.append(kind)


def test_hooks_that_override_only_what_they_hear_leave_every_call_as_it_was(
    store: Store, records: Records, clock: FakeClock
) -> None:
    observer, before = Told(), hooks.installed()
    hooks.install(observer)
    try:
        decision = records.form()
        accepted = store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})
        with pytest.raises(DecisionConflict):
            store.transition(decision, DecisionStatus.DECLINED, caller=ALICE)
        operation = store.get_operation(decision.operation_id, ALICE)
        finished = store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE, result="done")
        lapsing = records.url(ttl=timedelta(minutes=1))
        clock.advance(timedelta(hours=2))
        swept = store.sweep_expired()
    finally:
        hooks.install(before)
    assert store.get_decision(decision.elicitation_id, ALICE) == accepted
    assert store.get_operation(operation.operation_id, ALICE) == finished and finished.result == "done"
    assert (swept.decisions, swept.operations) == (1, 1)
    assert store.get_decision(lapsing.elicitation_id, ALICE).status is DecisionStatus.EXPIRED
    assert observer.told == [
        hooks.DecisionCreated(decision),
        hooks.DecisionEnded(accepted),
        SubjectKind.DECISION,
        hooks.DecisionCreated(lapsing),
        hooks.Expired(SubjectKind.DECISION, 1),
        hooks.Expired(SubjectKind.OPERATION, 1),
    ]
