"""A SQLite write aborted half-way (in a statement, or at its commit) leaves nothing behind and the store usable.

SQLite rolls a transaction back by itself when some errors abort a statement in it (an interrupt, a full
disk, an I/O error), and leaves it open when its COMMIT fails; either way the next write must begin afresh.
The abort here is a real `sqlite3_interrupt`, made from the connection's trace callback as the statement starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from mcp_elicit.store import Consumption, StoreUnavailable
from mcp_elicit.store.sqlite import SQLiteStore
from tests.helpers.clock import FakeClock


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "elicit.db", clock=clock)
    try:
        yield opened
    finally:
        opened.close()


@pytest.mark.parametrize("statement", ["INSERT INTO elicit_tokens", "COMMIT"])
def test_an_interrupted_write_is_unavailable_keeps_nothing_and_the_next_one_commits(
    sqlite_store: SQLiteStore, clock: FakeClock, statement: str
) -> None:
    store = sqlite_store
    connection = store.connection()
    interrupted: list[str] = []

    def interrupt(sql: str) -> None:
        if sql.startswith(statement) and not interrupted:
            interrupted.append(sql)
            connection.interrupt()

    connection.set_trace_callback(interrupt)
    until = clock() + timedelta(hours=1)
    try:
        with pytest.raises(StoreUnavailable, match=r"elicit\.db: interrupted$"):
            store.consume_token("jti-1", expires_at=until)
    finally:
        connection.set_trace_callback(None)
    assert interrupted and not connection.in_transaction
    assert not store.token_consumed("jti-1")
    assert store.consume_token("jti-1", expires_at=until) is Consumption.FIRST
    assert store.consume_token("jti-1", expires_at=until) is Consumption.ALREADY_USED
