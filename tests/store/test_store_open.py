"""Opening stores: migrations, refusal of newer schemas, corrupt files and wrong URLs, nothing half-written."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.store import (
    SCHEMA_VERSION,
    Consumption,
    MigrationPending,
    SchemaTooNew,
    StoreConfigError,
    StoreCorrupt,
    StoreError,
    StoreReadOnly,
    StoreUnavailable,
    open_store,
    schema_statements,
)
from mcp_elicit.store.sqlite import SQLiteStore
from mcp_elicit.store.url import sqlite_path
from tests.helpers.clock import FakeClock
from tests.helpers.corrupt_rows import corrupt
from tests.helpers.environment import with_search_path
from tests.helpers.migrations import SINCE_SCHEMA_9, take_back
from tests.helpers.records import ALICE, Records


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fresh_create_then_reopen_keeps_everything(store_url: str, clock: FakeClock) -> None:
    first = open_store(store_url, clock=clock)
    assert first.schema_version() == SCHEMA_VERSION
    decision = Records(first, clock).form()
    accepted = first.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})
    first.close()

    again = open_store(store_url, clock=clock)
    try:
        assert again.schema_version() == SCHEMA_VERSION
        assert again.get_decision(decision.elicitation_id, ALICE) == accepted
        assert len(again.audit_trail(decision.elicitation_id, ALICE)) == 2
    finally:
        again.close()


def test_a_sqlite_v1_database_migrates_to_the_latest_version_on_open(tmp_path: Path, clock: FakeClock) -> None:
    assert SCHEMA_VERSION >= 2
    path = tmp_path / "v1.db"
    spent_until = clock() + timedelta(hours=1)
    with closing(sqlite3.connect(path)) as connection, connection:
        for statement in schema_statements("sqlite", until=1):
            connection.execute(statement)
        connection.execute("INSERT INTO elicit_tokens (token_id, expires_at) VALUES ('spent', ?)", (2**62,))

    store = open_store(f"sqlite://{path}", clock=clock)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.consume_token("spent", expires_at=spent_until) is Consumption.ALREADY_USED  # v1 data kept
        store.vault_put("alice", "github", "k1", b"\x01sealed")
        record = store.vault_get("alice", "github")
        assert record is not None and (record.key_id, record.sealed) == ("k1", b"\x01sealed")
        store.oauth_client_put("client-1", {"client_id": "client-1", "redirect_uris": ["http://127.0.0.1:1/cb"]})
        assert store.oauth_client_get("client-1") == {
            "client_id": "client-1",
            "redirect_uris": ["http://127.0.0.1:1/cb"],
        }
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as connection:
        versions = [row[0] for row in connection.execute("SELECT version FROM elicit_schema ORDER BY version")]
        columns = {row[1]: (row[2], row[3]) for row in connection.execute("PRAGMA table_info(elicit_vault)")}
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert columns["sealed"] == ("BLOB", 1) and columns["key_id"] == ("TEXT", 1)
    assert columns["principal_id"] == ("TEXT", 1) and columns["name"] == ("TEXT", 1)


@pytest.mark.postgres
def test_a_postgres_v1_database_migrates_to_the_latest_version_on_open(pg_schema_url: str, clock: FakeClock) -> None:
    with psycopg.connect(pg_schema_url, autocommit=True) as connection, connection.transaction():
        for statement in schema_statements("postgresql", until=1):
            connection.execute(statement)
        connection.execute("INSERT INTO elicit_tokens (token_id, expires_at) VALUES ('spent', 'infinity')")

    store = open_store(pg_schema_url, clock=clock)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.consume_token("spent", expires_at=clock()) is Consumption.ALREADY_USED
        store.vault_put("alice", "github", "k1", b"\x01sealed")
        record = store.vault_get("alice", "github")
        assert record is not None and (record.key_id, record.sealed) == ("k1", b"\x01sealed")
        store.oauth_client_put("client-1", {"client_id": "client-1", "redirect_uris": ["http://127.0.0.1:1/cb"]})
        assert store.oauth_client_get("client-1") == {
            "client_id": "client-1",
            "redirect_uris": ["http://127.0.0.1:1/cb"],
        }
    finally:
        store.close()
    with psycopg.connect(pg_schema_url) as connection:
        versions = [row[0] for row in connection.execute("SELECT version FROM elicit_schema ORDER BY version")]
        columns: dict[str, str] = dict(
            connection.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = 'elicit_vault'"
            ).fetchall()
        )
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert columns["sealed"] == "bytea" and columns["updated_at"] == "timestamp with time zone"


def test_sqlite_schema_newer_than_the_code_is_refused_untouched(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "newer.db"
    open_store(f"sqlite://{path}", clock=clock).close()
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO elicit_schema (version) VALUES (?)", (SCHEMA_VERSION + 6,))
    connection.close()
    before = digest(path)
    with pytest.raises(SchemaTooNew) as raised:
        open_store(f"sqlite://{path}", clock=clock)
    message = str(raised.value)
    assert f"version {SCHEMA_VERSION + 6}" in message and f"up to version {SCHEMA_VERSION}" in message
    assert (raised.value.found, raised.value.supported) == (SCHEMA_VERSION + 6, SCHEMA_VERSION)
    assert digest(path) == before


@pytest.mark.postgres
def test_postgres_schema_newer_than_the_code_is_refused(pg_schema_url: str, clock: FakeClock) -> None:
    open_store(pg_schema_url, clock=clock).close()
    with psycopg.connect(pg_schema_url, autocommit=True) as connection:
        connection.execute("INSERT INTO elicit_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaTooNew, match=f"version {SCHEMA_VERSION + 1}.*up to version {SCHEMA_VERSION}"):
        open_store(pg_schema_url, clock=clock)


def test_garbage_file_is_reported_corrupt_and_left_byte_for_byte(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database at all\x00" * 200)
    before = digest(path)
    with pytest.raises(StoreCorrupt, match="not a readable mcp-elicit database"):
        open_store(f"sqlite://{path}", clock=clock)
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.db"]


def test_truncated_store_is_reported_corrupt(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "truncated.db"
    store = open_store(f"sqlite://{path}", clock=clock)
    records = Records(store, clock)
    operation = records.operation()
    for index in range(300):
        records.form(operation, key=f"k{index}")
    store.close()
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(StoreCorrupt):
        reopened = open_store(f"sqlite://{path}", clock=clock)
        try:
            reopened.list_decisions(ALICE, limit=10_000)
            reopened.sweep_expired()
        finally:
            reopened.close()


def test_another_applications_database_is_refused_untouched(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    connection.close()
    before = digest(path)
    with pytest.raises(StoreCorrupt, match=r"another application.*invoices"):
        open_store(f"sqlite://{path}", clock=clock)
    assert digest(path) == before


def test_missing_directory_is_a_clear_error_not_a_new_tree(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(StoreUnavailable, match="does not exist"):
        open_store(f"sqlite://{tmp_path}/no/such/dir/elicit.db", clock=clock)
    assert not (tmp_path / "no").exists()
    with pytest.raises(StoreUnavailable, match="directory"):
        open_store(f"sqlite://{tmp_path}", clock=clock)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@localhost/db", "unknown store URL scheme 'mysql'"),
        ("just-a-path.db", "unknown store URL scheme"),
        ("sqlite://", "needs a file path"),
        ("sqlite://host/file.db", "names a file, not a host"),
        ("sqlite:///tmp/x.db?mode=ro", "unknown SQLite URL parameter .mode."),
        ("sqlite:///:memory:", "needs a file path|not durable"),
        ("sqlite::memory:", "not durable"),
    ],
)
def test_unusable_urls_are_specific_errors(url: str, message: str) -> None:
    with pytest.raises(StoreConfigError, match=message):
        open_store(url)


@pytest.mark.parametrize(
    ("engine", "since", "until", "message"),
    [
        ("mysql", 0, SCHEMA_VERSION, "no schema for the engine 'mysql': sqlite or postgresql"),
        ("sqlite", 2, 1, "2 to 1 is not a way up"),
        ("postgresql", -1, 1, "-1 to 1 is not a way up"),
        ("sqlite", 0, SCHEMA_VERSION + 1, f"schema versions run from 0 to {SCHEMA_VERSION}"),
    ],
)
def test_schema_statements_refuse_what_no_migration_does(engine: str, since: int, until: int, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        schema_statements(engine, since=since, until=until)  # type: ignore[arg-type]
    assert schema_statements("sqlite", since=SCHEMA_VERSION) == []


def test_sqlite_url_forms() -> None:
    assert sqlite_path("sqlite:///var/lib/app/e.db") == Path("/var/lib/app/e.db")
    assert sqlite_path("sqlite:////var/lib/app/e.db") == Path("/var/lib/app/e.db")
    assert sqlite_path("sqlite:data/e.db") == Path("data/e.db")
    assert sqlite_path("sqlite:///tmp/with%20space.db") == Path("/tmp/with space.db")


@pytest.mark.postgres
def test_unreachable_postgres_is_a_specific_error(pg_server: str) -> None:
    with pytest.raises(StoreUnavailable, match=r"cannot reach PostgreSQL at postgresql://postgres@127\.0\.0\.1:1/"):
        open_store("postgresql://postgres:s3cret@127.0.0.1:1/test")


@pytest.mark.postgres
def test_unknown_role_and_database_are_specific_errors_without_the_password(pg_server: str) -> None:
    with pytest.raises(StoreUnavailable) as role:
        open_store("postgresql://nobody_here:hunter2@127.0.0.1:5432/test")
    assert "nobody_here" in str(role.value) and "hunter2" not in str(role.value)
    with pytest.raises(StoreUnavailable, match="database does not exist") as database:
        open_store("postgresql://postgres:hunter2@127.0.0.1:5432/no_such_database_here")
    assert "hunter2" not in str(database.value)


@pytest.mark.postgres
def test_instances_starting_together_migrate_once(pg_schema_url: str, clock: FakeClock) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=6) as pool:
        stores = list(pool.map(lambda _: open_store(pg_schema_url, clock=clock), range(6)))
    for store in stores:
        assert store.schema_version() == SCHEMA_VERSION
        store.close()
    with psycopg.connect(pg_schema_url) as connection:
        rows = connection.execute("SELECT version FROM elicit_schema ORDER BY version").fetchall()
    assert rows == [(version,) for version in range(1, SCHEMA_VERSION + 1)]  # each migration ran exactly once


@pytest.mark.postgres
def test_postgres_tables_altered_by_hand_are_reported(pg_server: str, pg_schema_url: str, clock: FakeClock) -> None:
    open_store(pg_schema_url, clock=clock).close()
    with psycopg.connect(pg_schema_url, autocommit=True) as connection:
        connection.execute("ALTER TABLE elicit_decisions RENAME COLUMN message TO msg")
    store = open_store(pg_schema_url, clock=clock)
    try:
        with pytest.raises(StoreCorrupt, match="not what this mcp-elicit wrote"):
            store.list_decisions(ALICE)
    finally:
        store.close()
    assert with_search_path(pg_server, "x").endswith("search_path%3Dx")


def test_a_database_behind_this_code_is_refused_untouched_when_migrating_is_not_allowed(
    store_url: str, clock: FakeClock
) -> None:
    """`migrate=False` (a serving role that may not change tables) names the versions, and writes nothing."""
    if store_url.startswith("sqlite:"):
        with closing(sqlite3.connect(sqlite_path(store_url))) as lite, lite:
            for statement in schema_statements("sqlite", until=1):
                lite.execute(statement)
    else:
        with psycopg.connect(store_url, autocommit=True) as pg, pg.transaction():
            for statement in schema_statements("postgresql", until=1):
                pg.execute(statement)
    with pytest.raises(MigrationPending) as raised:
        open_store(store_url, clock=clock, migrate=False)
    assert (raised.value.found, raised.value.supported) == (1, SCHEMA_VERSION)
    assert f"needs version {SCHEMA_VERSION}" in str(raised.value)
    assert schema_versions(store_url) == [1]


def schema_versions(store_url: str) -> list[int]:
    query = "SELECT version FROM elicit_schema ORDER BY version"
    if store_url.startswith("sqlite:"):
        with closing(sqlite3.connect(sqlite_path(store_url))) as connection:
            return [row[0] for row in connection.execute(query)]
    with psycopg.connect(store_url) as connection:
        return [row[0] for row in connection.execute(query)]


def test_a_sqlite_schema_table_without_a_version_is_refused_untouched(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "half.db"
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE elicit_schema (version INTEGER NOT NULL)")
    before = digest(path)
    with pytest.raises(StoreCorrupt, match="has an elicit_schema table without a version"):
        open_store(f"sqlite://{path}", clock=clock)
    assert digest(path) == before


def test_verify_schema_names_a_version_taken_back_or_removed_since_opening(store_url: str, clock: FakeClock) -> None:
    """A restored older backup, or a hand edit, under a running store: the health check says which."""
    store = open_store(store_url, clock=clock)
    try:
        store.verify_schema()
        corrupt(store_url, f"DELETE FROM elicit_schema WHERE version = {SCHEMA_VERSION}")
        with pytest.raises(MigrationPending) as pending:
            store.verify_schema()
        assert (pending.value.found, pending.value.supported) == (SCHEMA_VERSION - 1, SCHEMA_VERSION)
        corrupt(store_url, "DELETE FROM elicit_schema")
        with pytest.raises(StoreCorrupt, match="has an elicit_schema table without a version"):
            store.verify_schema()
    finally:
        store.close()


def test_a_new_sqlite_file_another_connection_reads_is_migrated_once_the_read_ends(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Switching to WAL needs the file to itself: the open waits for the reader up to its busy timeout, then
    says the file is locked and leaves it as it was; a read that ends in time only delays it."""
    path = tmp_path / "elicit.db"
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT name FROM sqlite_master").fetchall() == []  # holds a read lock on the file
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=f"^{re.escape(str(path))}: database is locked$"):
            SQLiteStore(path, clock=clock, busy_timeout=0.3)
        assert time.monotonic() - started >= 0.3  # waited out its busy timeout, not refused at once
        assert path.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["elicit.db"]

        ending = threading.Timer(0.2, reader.execute, ("COMMIT",))
        ending.start()
        store = SQLiteStore(path, clock=clock, busy_timeout=10)
        ending.join()
    finally:
        reader.close()
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.connection().execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        store.close()


def test_a_sqlite_path_the_system_cannot_use_is_unavailable_not_read_only(tmp_path: Path, clock: FakeClock) -> None:
    """A file name longer than the file system allows, or a path longer than SQLite takes: the store's own
    error, saying why, never a stray `OSError` nor advice to make something writable."""
    with pytest.raises(StoreUnavailable, match=r"cannot open .*: File name too long$"):
        open_store(f"sqlite://{tmp_path / ('x' * 300)}.db", clock=clock)
    deep = tmp_path
    while len(str(deep)) <= 600:
        deep /= "d" * 100
    deep.mkdir(parents=True)
    with pytest.raises(StoreUnavailable) as raised:
        open_store(f"sqlite://{deep / 'elicit.db'}", clock=clock)
    assert not isinstance(raised.value, StoreReadOnly)
    assert str(raised.value) == f"{deep / 'elicit.db'}: unable to open database file"
    assert list(deep.iterdir()) == []


def test_a_closed_store_says_it_is_closed_on_every_thread(store_url: str, clock: FakeClock) -> None:
    """Never that the file is corrupt: the thread that opened it has a connection of its own, closed too."""
    store = open_store(store_url, clock=clock)
    Records(store, clock).form()
    store.close()
    failures: list[BaseException | None] = []
    for attempt in (lambda: store.list_decisions(ALICE), lambda: Records(store, clock).operation()):
        with pytest.raises(StoreError) as here:
            attempt()
        failures.append(here.value)
    elsewhere = threading.Thread(target=lambda: failures.append(raised_by(lambda: store.list_decisions(ALICE))))
    elsewhere.start()
    elsewhere.join()
    for failure in failures:
        assert isinstance(failure, StoreError) and not isinstance(failure, StoreCorrupt), failure
        assert "closed" in str(failure), failure


def raised_by(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except BaseException as error:
        return error
    return None


def test_questions_asked_before_schema_8_read_with_no_call_summary(store_url: str, clock: FakeClock) -> None:
    """Schema 8 adds what a call is about to every question; those asked before it have none, and read as such."""
    store = open_store(store_url, clock=clock)
    try:
        asked = Records(store, clock).form()
    finally:
        store.close()
    take_back(
        store_url,
        [
            *SINCE_SCHEMA_9,
            "DROP TABLE elicit_grants",
            "DELETE FROM elicit_schema WHERE version = 9",
            "ALTER TABLE elicit_decisions DROP COLUMN about",
            "DELETE FROM elicit_schema WHERE version = 8",
        ],
    )
    store = open_store(store_url, clock=clock)
    try:
        assert store.schema_version() == SCHEMA_VERSION == 11
        before = store.get_decision(asked.elicitation_id, ALICE)
        assert asked.about and before.about == ""
        assert before == dataclasses.replace(asked, about="")
        assert store.grant_page(Operator()).grants == [], "schema 9 brought the grants' table back, empty"
    finally:
        store.close()
