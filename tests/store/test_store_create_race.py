"""A creator whose look at the call missed another creator still uncommitted, on PostgreSQL.

Under READ COMMITTED an insert looks at the call with the snapshot its statement began with; the unique index
over open operations then makes it wait for the other creator, and lets it pass if that operation is no longer
open when its creator commits. Here the other creator is a connection of the test's own, holding its operation
inserted but uncommitted while the store's `begin_operation` waits on it, then finishing it in the same
transaction: the state a racing creator leaves when its call completes before the waiting insert looks again.
The wait is observed in `pg_stat_activity`, not slept through. SQLite serialises writers, so it has no such race.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from mcp_elicit.model import OperationStatus
from mcp_elicit.store import Store
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE
from tests.helpers.single_flight import DIGEST, METHOD, TARGET, candidate, rows

SECONDS = 30
"""How long the store's insert may take to be seen waiting before the test gives up."""


def wait_until_blocked_by(store_url: str, holder: int) -> None:
    """Until a backend of this database waits on a lock the holder's transaction holds."""
    deadline = time.monotonic() + SECONDS
    with psycopg.connect(store_url, autocommit=True) as watcher:
        while watcher.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND %s = ANY(pg_blocking_pids(pid)))",
            (holder,),
        ).fetchone() != (True,):
            assert time.monotonic() < deadline, "the store's insert never waited on the other creator"
            watcher.execute("SELECT pg_sleep(0.01)")


@pytest.mark.engines("postgres", "postgres-async")
def test_a_creator_that_waited_on_one_finishing_meanwhile_replays_it(
    store_url: str, store: Store, clock: FakeClock
) -> None:
    other = candidate(clock)
    replay_since = clock() - timedelta(minutes=2)
    with psycopg.connect(store_url) as holder, ThreadPoolExecutor(1) as pool:
        holder.execute(
            "INSERT INTO elicit_operations (operation_id, principal_id, client_id, method, target, request_digest,"
            " status, version, created_at, updated_at, expires_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, 'open', %s, %s, %s, %s)",
            (other.operation_id, other.principal_id, other.client_id, METHOD, TARGET, DIGEST, other.version,
             other.created_at, other.updated_at, other.expires_at),
        )  # fmt: skip
        late = pool.submit(store.begin_operation, candidate(clock), replay_since=replay_since)
        wait_until_blocked_by(store_url, holder.info.backend_pid)
        holder.execute(
            "UPDATE elicit_operations SET status = 'completed', result = %s, version = %s WHERE operation_id = %s",
            (Jsonb({"done": 1}), other.version + 1, other.operation_id),
        )
        holder.commit()
        started = late.result(timeout=SECONDS)
    assert not started.created
    assert started.operation.operation_id == other.operation_id
    assert started.operation.status is OperationStatus.COMPLETED
    assert rows(
        store_url,
        "SELECT operation_id FROM elicit_operations WHERE principal_id = %s AND request_digest = %s",
        (ALICE.principal_id, DIGEST),
    ) == [(other.operation_id,)]
