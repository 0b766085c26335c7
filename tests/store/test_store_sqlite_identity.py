"""A SQLite file deleted or replaced under a running store: the next write is refused, never made to the old file.

Real files throughout. A hard link, or a rename aside, keeps the old file reachable, so a test can put it
back afterwards and read what the store had committed, and that nothing it refused was written. SQLite
leaves the old file's `-wal` beside the path (it never checkpoints into a moved file), so putting the file
back finds every commit; the replacement is moved away first, since opening it there would read that WAL.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.store import StoreFileReplaced, open_store
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, Records


def in_a_thread(work: Callable[[], object]) -> BaseException | None:
    """What `work` raised on a thread of its own (a connection the store opens afterwards), if anything."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:
            raised.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    return raised[0] if raised else None


def sqlite_rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as connection:
        return connection.execute(sql).fetchall()


def refused(write: Callable[[], object], path: Path, *, deleted: bool) -> StoreFileReplaced:
    with pytest.raises(StoreFileReplaced) as caught:
        write()
    assert caught.value.deleted is deleted and caught.value.path == str(path)
    assert str(path) in str(caught.value)
    assert ("was deleted" if deleted else "was replaced by another file") in str(caught.value)
    return caught.value


def test_a_deleted_file_is_refused_and_nothing_committed_is_lost(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    path, kept = tmp_path / "elicit.db", tmp_path / "kept.db"
    store = open_store(f"sqlite://{path}", clock=clock)
    records = Records(store, clock)
    committed = records.form()
    waiting = records.form(key="second")
    os.link(path, kept)
    path.unlink()  # as `rm` would; the inode lives on under the other name

    with caplog.at_level(logging.ERROR, logger="mcp_elicit.store.sqlite"):
        refused(records.operation, path, deleted=True)
        refused(lambda: store.transition(waiting, DecisionStatus.CANCELLED, caller=ALICE), path, deleted=True)
        refused(lambda: store.atomically(records.operation), path, deleted=True)
    assert isinstance(in_a_thread(records.operation), StoreFileReplaced)
    assert not path.exists()  # the thread's new connection did not create a new, empty store there
    ours = [record.getMessage() for record in caplog.records if record.name.startswith("mcp_elicit")]
    assert ours == [str(refused(records.operation, path, deleted=True))]  # another test's tracer may log too
    store.close()

    os.rename(kept, path)
    reopened = open_store(f"sqlite://{path}", clock=clock)
    try:
        listed = reopened.list_decisions(Operator())
        assert {d.elicitation_id for d in listed} == {committed.elicitation_id, waiting.elicitation_id}
        assert reopened.get_decision(waiting.elicitation_id, ALICE).status is DecisionStatus.REQUESTED
        assert len(reopened.audit_trail(waiting.elicitation_id, ALICE)) == 1  # the refused cancel left no row
        operations = {row[0] for row in sqlite_rows(path, "SELECT operation_id FROM elicit_operations")}
        assert operations == {committed.operation_id, waiting.operation_id}  # none of the refused ones
    finally:
        reopened.close()


def test_a_replaced_file_is_refused_and_neither_file_gets_the_write(tmp_path: Path, clock: FakeClock) -> None:
    path, aside, other = tmp_path / "elicit.db", tmp_path / "moved-aside.db", tmp_path / "other.db"
    store = open_store(f"sqlite://{path}", clock=clock)
    records = Records(store, clock)
    committed = records.form()
    theirs = open_store(f"sqlite://{other}", clock=clock)
    their_decision = Records(theirs, clock).form()
    theirs.close()
    os.rename(path, aside)
    os.rename(other, path)  # another mcp-elicit database now has the path (a backup put back, say)

    refused(records.operation, path, deleted=False)
    refused(lambda: store.transition(committed, DecisionStatus.CANCELLED, caller=ALICE), path, deleted=False)
    assert isinstance(in_a_thread(records.operation), StoreFileReplaced)
    store.close()

    os.rename(path, other)
    os.rename(aside, path)
    for file, only in ((path, committed), (other, their_decision)):
        reopened = open_store(f"sqlite://{file}", clock=clock)
        try:
            assert [d.elicitation_id for d in reopened.list_decisions(Operator())] == [only.elicitation_id]
            assert reopened.get_decision(only.elicitation_id, ALICE).status is DecisionStatus.REQUESTED
            assert len(sqlite_rows(file, "SELECT operation_id FROM elicit_operations")) == 1
        finally:
            reopened.close()


def test_the_same_file_put_back_is_written_again(tmp_path: Path, clock: FakeClock) -> None:
    """The check compares the file, it does not latch: moving the very file back ends the refusals."""
    path, aside = tmp_path / "elicit.db", tmp_path / "aside.db"
    store = open_store(f"sqlite://{path}", clock=clock)
    try:
        records = Records(store, clock)
        os.rename(path, aside)
        refused(records.operation, path, deleted=True)
        os.rename(aside, path)
        operation = records.operation()
        assert store.get_operation(operation.operation_id, ALICE) == operation
    finally:
        store.close()
    assert sqlite_rows(path, "SELECT operation_id FROM elicit_operations") == [(operation.operation_id,)]


def test_a_relative_path_keeps_naming_the_file_opened_after_the_working_directory_changes(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:elicit.db", clock=clock)
    try:
        records = Records(store, clock)
        monkeypatch.chdir(elsewhere)
        assert in_a_thread(records.operation) is None  # a new connection, the same file: neither refused nor astray
        records.operation()
    finally:
        store.close()
    assert list(elsewhere.iterdir()) == []
    assert len(sqlite_rows(tmp_path / "elicit.db", "SELECT operation_id FROM elicit_operations")) == 2
