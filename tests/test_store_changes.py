"""Change reports that wake waiting calls: in-process listeners, and PostgreSQL LISTEN/NOTIFY across instances."""

from __future__ import annotations

from datetime import datetime, timedelta

import anyio
import pytest

from mcp_elicit.model import DecisionStatus, OperationStatus
from mcp_elicit.store import Store, open_store
from mcp_elicit.store.postgres import PostgresStore
from tests.conftest import ALICE, FakeClock, Records

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
                while not heard:
                    await anyio.sleep(0.02)
            group.cancel_scope.cancel()
        assert heard == [url.elicitation_id]
    finally:
        mover.close()
        listener.close()
