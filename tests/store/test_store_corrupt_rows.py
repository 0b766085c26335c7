"""Rows that mcp-elicit never wrote: each is reported by its id and column, and the readable ones still list.

The bad values are written behind the store's back, with `sqlite3` and `psycopg` directly, as a hand edit,
another program or a restored backup would.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from mcp_elicit.model import Decision, DecisionStatus, Operation, Operator
from mcp_elicit.server.tasks.state import META_JOURNAL, TaskMeta
from mcp_elicit.store import Store, StoreCorrupt, StoreUnavailable, UnreadableRow, open_store
from tests.helpers.clock import FakeClock
from tests.helpers.corrupt_rows import corrupt, corrupt_operation
from tests.helpers.records import Records

COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))
EVERYONE = Operator()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160"}
    env.pop("MCP_ELICIT_STORE", None)
    return subprocess.run([COMMAND, *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def three_decisions(url: str, clock: FakeClock) -> list[Decision]:
    store = open_store(url, clock=clock)
    try:
        records = Records(store, clock)
        operation = records.operation(ttl=timedelta(days=1))
        made = []
        for key in ("first", "second", "third"):
            made.append(records.form(operation, key=key, ttl=timedelta(hours=1)))
            clock.advance(timedelta(seconds=1))
        return made
    finally:
        store.close()


def sqlite_write(path: Path, sql: str, *params: object, ignore_checks: bool = False) -> None:
    with closing(sqlite3.connect(path)) as connection:
        if ignore_checks:
            connection.execute("PRAGMA ignore_check_constraints = ON")
        connection.execute(sql, params)
        connection.commit()


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("requested_schema", "{broken", "invalid JSON"),
        ("content", "[1, 2]", "a JSON list where a JSON object belongs"),
        ("sensitive_fields", '{"a": 1}', "a JSON object where a JSON list of field names belongs"),
        ("sensitive_fields", '["a", 1]', "a JSON list holding something other than field names"),
        ("content", b"{}", "a blob where JSON text belongs"),
        ("created_at", "2026-01-01 10:00", "text where a time belongs"),
        ("expires_at", 2**63 - 1, "a time outside the years 1 to 9999"),
        ("completion_version", "one", "text where an integer belongs"),
        ("message", b"\x00\xff", "a blob where text belongs"),
        ("status", "approved", "'approved', not one of: requested, accepted"),
        ("status", "approved " * 9, "'approved approved approved approved appr'..., not one of:"),
        ("mode", b"form", "a blob, not one of: form, url"),
    ],
)
def test_a_corrupt_sqlite_decision_names_its_id_and_column(
    tmp_path: Path, clock: FakeClock, column: str, value: object, why: str
) -> None:
    path = tmp_path / "elicit.db"
    first, bad, third = three_decisions(f"sqlite://{path}", clock)
    sqlite_write(
        path, f"UPDATE elicit_decisions SET {column} = ? WHERE elicitation_id = ?", value, bad.elicitation_id,
        ignore_checks=True,
    )  # fmt: skip
    store = open_store(f"sqlite://{path}", clock=clock)
    try:
        with pytest.raises(UnreadableRow) as caught:
            store.get_decision(bad.elicitation_id, EVERYONE)
        assert (caught.value.record, caught.value.row_id, caught.value.column) == (
            "decision",
            bad.elicitation_id,
            column,
        )
        assert why in str(caught.value) and bad.elicitation_id in str(caught.value)
        assert isinstance(caught.value, StoreCorrupt)
        with pytest.raises(UnreadableRow):
            store.list_decisions(EVERYONE)

        skipped: list[UnreadableRow] = []
        listed = store.list_decisions(EVERYONE, on_unreadable=skipped.append)
        assert {d.elicitation_id for d in listed} == {first.elicitation_id, third.elicitation_id}
        assert [(row.row_id, row.column) for row in skipped] == [(bad.elicitation_id, column)]
        assert store.get_decision(first.elicitation_id, EVERYONE) == first
    finally:
        store.close()


@pytest.mark.parametrize(
    ("column", "why"),
    [
        ("message", "column message holds text that is not UTF-8 where text belongs"),
        ("content", "column content holds text that is not UTF-8 where JSON text belongs"),
        ("status", "column status holds text that is not UTF-8, not one of: requested"),
    ],
)
def test_sqlite_text_that_is_not_utf8_names_its_row_and_column(
    tmp_path: Path, clock: FakeClock, column: str, why: str
) -> None:
    """Bytes that are not UTF-8 stored as text (by hand, or another program): SQLite's driver would fail the whole
    statement (every listing, not only this row's); the store names the row and the column, and lists the rest."""
    path = tmp_path / "elicit.db"
    first, bad, third = three_decisions(f"sqlite://{path}", clock)
    sqlite_write(
        path, f"UPDATE elicit_decisions SET {column} = CAST(? AS TEXT) WHERE elicitation_id = ?", b"\xed\xa0\x80",
        bad.elicitation_id, ignore_checks=True,
    )  # fmt: skip
    named_and_listed_past(
        open_store(f"sqlite://{path}", clock=clock), (first, bad, third), column,
        f"decision {bad.elicitation_id}: {why}",
    )  # fmt: skip


def test_sqlite_text_that_is_not_utf8_in_a_write_is_corrupt_not_unavailable(tmp_path: Path, clock: FakeClock) -> None:
    """A statement that writes (the sweep's `UPDATE ... RETURNING`) is never run twice: it fails, as a corrupt store
    naming the column, not as one that is down for a while, and changes nothing."""
    path = tmp_path / "elicit.db"
    _, bad, _ = three_decisions(f"sqlite://{path}", clock)
    sqlite_write(
        path, "UPDATE elicit_decisions SET elicitation_id = CAST(? AS TEXT) WHERE elicitation_id = ?", b"\xff",
        bad.elicitation_id,
    )  # fmt: skip
    clock.advance(timedelta(days=2))
    store = open_store(f"sqlite://{path}", clock=clock)
    try:
        with pytest.raises(StoreCorrupt, match="column elicitation_id holds text that is not UTF-8") as caught:
            store.sweep_expired()
        assert not isinstance(caught.value, StoreUnavailable)
        assert {d.status for d in store.list_decisions(EVERYONE, on_unreadable=lambda _: None)} == {
            DecisionStatus.REQUESTED
        }
    finally:
        store.close()


def test_a_corrupt_operation_and_audit_row_are_named(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "elicit.db"
    first, _, _ = three_decisions(f"sqlite://{path}", clock)
    sqlite_write(path, "UPDATE elicit_operations SET result = '{nope' WHERE operation_id = ?", first.operation_id)
    sqlite_write(path, "UPDATE elicit_audit SET at = 'yesterday' WHERE subject_id = ?", first.elicitation_id)
    store = open_store(f"sqlite://{path}", clock=clock)
    try:
        with pytest.raises(UnreadableRow, match=f"operation {first.operation_id}: column result holds invalid JSON"):
            store.get_operation(first.operation_id, EVERYONE)
        with pytest.raises(UnreadableRow, match=r"audit row \d+: column at holds text where a time belongs") as caught:
            store.audit_trail(first.elicitation_id, EVERYONE)
        assert (caught.value.record, caught.value.column) == ("audit row", "at")
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("requested_schema", "[1, 2]", "a JSON list where a JSON object belongs"),
        ("sensitive_fields", '{"a": 1}', "a JSON object where a JSON list of field names belongs"),
        ("content", '"text"', "a JSON string where a JSON object belongs"),
    ],
)
def test_a_corrupt_postgres_decision_names_its_id_and_column(
    pg_schema_url: str, clock: FakeClock, column: str, value: str, why: str
) -> None:
    first, bad, third = three_decisions(pg_schema_url, clock)
    with psycopg.connect(pg_schema_url, autocommit=True) as connection:
        connection.execute(
            f"UPDATE elicit_decisions SET {column} = %s::jsonb WHERE elicitation_id = %s", (value, bad.elicitation_id)
        )
    named_and_listed_past(
        open_store(pg_schema_url, clock=clock), (first, bad, third), column,
        f"decision {bad.elicitation_id}: column {column} holds {why}",
    )  # fmt: skip


@pytest.mark.postgres
def test_postgres_times_without_a_zone_are_unreadable(pg_schema_url: str, clock: FakeClock) -> None:
    made = three_decisions(pg_schema_url, clock)
    with psycopg.connect(pg_schema_url, autocommit=True) as connection:
        connection.execute("ALTER TABLE elicit_decisions ALTER COLUMN updated_at TYPE timestamp")
    store = open_store(pg_schema_url, clock=clock)
    try:
        skipped: list[UnreadableRow] = []
        assert store.list_decisions(EVERYONE, on_unreadable=skipped.append) == []
        assert {row.row_id for row in skipped} == {d.elicitation_id for d in made}
        assert {row.column for row in skipped} == {"updated_at"}
        assert "a timestamp without a time zone where a time belongs" in str(skipped[0])
    finally:
        store.close()


def test_the_cli_lists_the_readable_rows_and_names_the_others(tmp_path: Path) -> None:
    path = tmp_path / "ops.db"
    url = f"sqlite://{path}"
    clock = FakeClock(datetime.now(UTC) - timedelta(minutes=5))
    good, bad_json, bad_time = three_decisions(url, clock)
    sqlite_write(path, "UPDATE elicit_decisions SET requested_schema = '{' WHERE elicitation_id = ?",
                 bad_json.elicitation_id)  # fmt: skip
    sqlite_write(path, "UPDATE elicit_decisions SET created_at = '2026-01-01T10:00' WHERE elicitation_id = ?",
                 bad_time.elicitation_id)  # fmt: skip

    listed = cli("decisions", "ls", "--store", url)
    assert listed.returncode == 2, listed.stderr
    assert "Traceback" not in listed.stderr
    rows = listed.stdout.splitlines()
    assert [line.split("\t")[0] for line in rows[1:]] == [good.elicitation_id]
    assert "2 rows of" in listed.stderr and "could not be read" in listed.stderr
    assert f"decision {bad_json.elicitation_id}: column requested_schema holds invalid JSON" in listed.stderr
    assert f"decision {bad_time.elicitation_id}: column created_at holds text where a time belongs" in listed.stderr

    as_json = cli("decisions", "ls", "--json", "--store", url)
    assert as_json.returncode == 2
    assert [d["elicitation_id"] for d in json.loads(as_json.stdout)] == [good.elicitation_id]

    shown = cli("decisions", "show", bad_json.elicitation_id[:8], "--store", url)
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert f"decision {bad_json.elicitation_id}: column requested_schema" in shown.stderr
    full = cli("decisions", "show", bad_time.elicitation_id, "--store", url)
    assert full.returncode == 2 and f"{bad_time.elicitation_id}: column created_at" in full.stderr
    assert cli("decisions", "show", good.elicitation_id[:8], "--store", url).returncode == 0


# -- the rows read beside the decisions: operations (a task's status), journal entries, audit rows ------------------


def three_tasks(url: str, clock: FakeClock) -> tuple[list[Operation], list[Decision]]:
    """Three tasks (newest last), each asking one question that is still waiting for its answer."""
    store = open_store(url, clock=clock)
    try:
        records = Records(store, clock)
        operations, decisions = [], []
        for _ in range(3):
            operation = records.operation(ttl=timedelta(days=1))
            meta = TaskMeta(era="2026-07-28", ttl_ms=60_000, poll_interval_ms=1_000, arguments={}, form=True, url=False)
            store.journal_record(operation.operation_id, META_JOURNAL, meta.dumped(), caller=operation.principal)
            operations.append(operation)
            decisions.append(records.form(operation, ttl=timedelta(hours=1)))
            clock.advance(timedelta(seconds=1))
        return operations, decisions
    finally:
        store.close()


def test_an_unreadable_audit_or_journal_row_is_named_and_the_others_are_read(store_url: str, clock: FakeClock) -> None:
    store = open_store(store_url, clock=clock)
    try:
        records = Records(store, clock)
        decision = records.form()
        store.transition(decision, DecisionStatus.DECLINED, caller=EVERYONE, reason="no")
        store.journal_record(decision.operation_id, "charge", {"charged": 1}, caller=decision.principal)
        [created, declined] = store.audit_trail(decision.elicitation_id, EVERYONE)
        corrupt(store_url, f"UPDATE elicit_audit SET details = '[1, 2]' WHERE seq = {created.seq}")
        if store_url.startswith("sqlite:"):
            corrupt(store_url, "UPDATE elicit_journal SET value = '{nope' WHERE name = 'charge'")
            column, why = "value", "invalid JSON"
        else:
            corrupt(store_url, "ALTER TABLE elicit_journal ALTER COLUMN recorded_at TYPE timestamp")
            column, why = "recorded_at", "a timestamp without a time zone where a time belongs"

        with pytest.raises(UnreadableRow) as caught:
            store.audit_trail(decision.elicitation_id, EVERYONE)
        assert (caught.value.record, caught.value.row_id, caught.value.column) == ("audit row", created.seq, "details")
        assert f"audit row {created.seq}: column details holds a JSON list where a JSON object belongs" in str(
            caught.value
        )
        skipped: list[UnreadableRow] = []
        assert store.audit_trail(decision.elicitation_id, EVERYONE, on_unreadable=skipped.append) == [declined]
        assert [(row.record, row.row_id) for row in skipped] == [("audit row", created.seq)]

        with pytest.raises(UnreadableRow) as unread:
            store.journal_get(decision.operation_id, "charge", caller=decision.principal)
        assert (unread.value.record, unread.value.column) == ("journal entry", column)
        assert f"journal entry 'charge' of operation {decision.operation_id}: column {column} holds {why}" in str(
            unread.value
        )
    finally:
        store.close()


def test_an_unreadable_operation_leaves_every_decision_listed_without_its_task_status(store_url: str) -> None:
    clock = FakeClock(datetime.now(UTC) - timedelta(minutes=5))
    operations, decisions = three_tasks(store_url, clock)
    damaged = corrupt_operation(store_url, operations[1])
    newest_first = [d.elicitation_id for d in reversed(decisions)]
    note = f"The decisions of operation {operations[1].operation_id} are listed without a task status."

    listed = cli("decisions", "ls", "--store", store_url)
    assert listed.returncode == 2, listed.stderr
    assert "Traceback" not in listed.stderr and "nope" not in listed.stderr
    header, *rows = [line.split("\t") for line in listed.stdout.splitlines()]
    task = header.index("task")
    assert [(row[0], row[task]) for row in rows] == [
        (newest_first[0], "input_required"), (newest_first[1], ""), (newest_first[2], "input_required")
    ]  # fmt: skip
    assert "1 row of" in listed.stderr and "could not be read and is left out:" in listed.stderr
    assert f"operation {operations[1].operation_id}: {damaged}" in listed.stderr and note in listed.stderr

    as_json = cli("decisions", "ls", "--json", "--store", store_url)
    assert as_json.returncode == 2
    shown = json.loads(as_json.stdout)
    assert [(d["elicitation_id"], d.get("task")) for d in shown] == [
        (newest_first[0], "input_required"), (newest_first[1], None), (newest_first[2], "input_required")
    ]  # fmt: skip
    assert all(d["status"] == "requested" and d["operation_id"] for d in shown)
    assert f"operation {operations[1].operation_id}: {damaged}" in as_json.stderr

    shown_one = cli("decisions", "show", decisions[1].elicitation_id, "--store", store_url)
    assert shown_one.returncode == 0, shown_one.stderr
    assert decisions[1].elicitation_id in shown_one.stdout and "Traceback" not in shown_one.stderr
    trail = cli("decisions", "audit", operations[1].operation_id, "--store", store_url)
    assert trail.returncode == 0 and "created" in trail.stdout, trail.stderr


def test_an_unreadable_journal_entry_leaves_the_listing_whole(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'elicit.db'}"
    operations, decisions = three_tasks(url, FakeClock(datetime.now(UTC) - timedelta(minutes=5)))
    sqlite_write(tmp_path / "elicit.db", "UPDATE elicit_journal SET value = '{nope' WHERE operation_id = ?",
                 operations[0].operation_id)  # fmt: skip

    listed = cli("decisions", "ls", "--json", "--store", url)
    assert listed.returncode == 2 and "Traceback" not in listed.stderr
    assert [d.get("task") for d in json.loads(listed.stdout)] == ["input_required", "input_required", None]
    assert (
        f"journal entry 'mcp-elicit/task' of operation {operations[0].operation_id}: column value holds invalid JSON"
        in listed.stderr
    )
    assert {d.elicitation_id for d in decisions} == {d["elicitation_id"] for d in json.loads(listed.stdout)}


def test_an_unreadable_audit_row_leaves_the_rest_of_the_trail_shown(store_url: str, clock: FakeClock) -> None:
    store = open_store(store_url, clock=clock)
    try:
        decision = Records(store, clock).form()
        store.transition(decision, DecisionStatus.DECLINED, caller=EVERYONE, reason="not today")
        [created, _] = store.audit_trail(decision.elicitation_id, EVERYONE)
    finally:
        store.close()
    corrupt(store_url, f"UPDATE elicit_audit SET subject_kind = 'thing' WHERE seq = {created.seq}")
    named = f"audit row {created.seq}: column subject_kind holds 'thing', not one of: decision, operation"

    table = cli("decisions", "audit", decision.elicitation_id[:8], "--store", store_url)
    assert table.returncode == 2 and "Traceback" not in table.stderr
    assert "not today" in table.stdout and "declined" in table.stdout and "created" not in table.stdout
    assert "1 row of" in table.stderr and named in table.stderr

    as_json = cli("decisions", "audit", decision.elicitation_id, "--json", "--store", store_url)
    assert as_json.returncode == 2 and named in as_json.stderr
    [entry] = json.loads(as_json.stdout)
    assert (entry["to_status"], entry["reason"]) == ("declined", "not today")


def test_a_damaged_oauth_client_registration_names_its_client_and_column(store_url: str, store: Store) -> None:
    """Valid JSON that is no object (PostgreSQL's JSONB takes nothing else): named, never handed on as metadata.
    A caller handing such metadata in is refused before anything is written."""
    store.oauth_client_put("client-1", {"client_id": "client-1", "redirect_uris": ["http://127.0.0.1:1/cb"]})
    corrupt(store_url, """UPDATE elicit_oauth_clients SET metadata = '["http://127.0.0.1:1/cb"]'""")
    with pytest.raises(UnreadableRow) as caught:
        store.oauth_client_get("client-1")
    assert str(caught.value) == (
        "OAuth client client-1: column metadata holds a JSON list where a JSON object belongs;"
        " the row was left as it is"
    )
    assert (caught.value.record, caught.value.row_id, caught.value.column) == ("OAuth client", "client-1", "metadata")
    with pytest.raises(ValueError, match=r"^an OAuth client's metadata is a JSON object, not a JSON list$"):
        store.oauth_client_put("client-2", ["http://127.0.0.1:1/cb"])  # type: ignore[arg-type]
    assert store.oauth_client_get("client-2") is None


def named_and_listed_past(
    store: Store, decisions: tuple[Decision, Decision, Decision], column: str, match: str
) -> None:
    """The middle decision's row is unreadable in `column`: reading it names the row (`match`), and a listing
    skips it, reports it, and lists the other two. The store is closed after."""
    first, bad, third = decisions
    try:
        with pytest.raises(UnreadableRow, match=match):
            store.get_decision(bad.elicitation_id, EVERYONE)
        skipped: list[UnreadableRow] = []
        listed = store.list_decisions(EVERYONE, on_unreadable=skipped.append)
        assert {d.elicitation_id for d in listed} == {first.elicitation_id, third.elicitation_id}
        assert [(row.row_id, row.column) for row in skipped] == [(bad.elicitation_id, column)]
    finally:
        store.close()
