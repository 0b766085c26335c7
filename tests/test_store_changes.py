"""Change reports for URL decisions: in-process listeners, and PostgreSQL LISTEN/NOTIFY across instances."""

from __future__ import annotations

import anyio
import pytest

from mcp_elicit.model import DecisionStatus
from mcp_elicit.store import Store, open_store
from mcp_elicit.store.postgres import PostgresStore
from tests.conftest import ALICE, FakeClock, Records

pytestmark = pytest.mark.anyio


def test_listeners_hear_url_moves_after_commit_and_not_form_moves(store: Store, records: Records) -> None:
    heard: list[str] = []
    store.add_change_listener(heard.append)
    url = records.url()
    store.transition(url, DecisionStatus.ACCEPTED_URL, caller=ALICE)
    store.transition(records.form(), DecisionStatus.DECLINED, caller=ALICE)
    assert heard == [url.elicitation_id]


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
