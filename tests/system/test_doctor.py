"""`mcp-elicit doctor` as installed: good and bad configurations, every problem listed at once, nothing changed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from mcp_elicit.store import SCHEMA_VERSION, open_store, schema_statements
from tests.helpers.commands import command
from tests.helpers.doctor import GOOD, b64, clean_environment, run
from tests.helpers.http_harness import free_port

# On both engines: doctor checks each engine its own way.
pytestmark = pytest.mark.engines("sqlite", "postgres")


def at_version(store_url: str, version: int) -> None:
    """A store as an older mcp-elicit left it: migrations 1..version applied, no later one."""
    on_sqlite = store_url.startswith("sqlite:")
    script = schema_statements("sqlite" if on_sqlite else "postgresql", until=version)
    if on_sqlite:
        connection = sqlite3.connect(store_url.removeprefix("sqlite://"), isolation_level=None)
        try:
            for statement in script:
                connection.execute(statement)
        finally:
            connection.close()
        return
    with psycopg.connect(store_url, autocommit=True) as pg:
        for statement in script:
            pg.execute(statement.encode())


def stored_versions(store_url: str) -> list[int]:
    if store_url.startswith("sqlite:"):
        connection = sqlite3.connect(store_url.removeprefix("sqlite://"))
        try:
            return [row[0] for row in connection.execute("SELECT version FROM elicit_schema ORDER BY version")]
        finally:
            connection.close()
    with psycopg.connect(store_url) as pg:
        return [row[0] for row in pg.execute("SELECT version FROM elicit_schema ORDER BY version")]


def test_a_good_configuration_passes_on_both_stores(tmp_path: Path, store_url: str) -> None:
    open_store(store_url).close()
    code, problems, fine = run(tmp_path, {**GOOD, "MCP_ELICIT_STORE": store_url})
    assert (code, problems) == (0, [])
    assert fine[:4] == [
        "public URL http://127.0.0.1:8000",
        "users: alice, bob",
        "key rings: MCP_ELICIT_AUTH_KEYS 1 key, MCP_ELICIT_STATE_KEYS 2 keys, MCP_ELICIT_VAULT_KEYS v2, v1 "
        "(sealing with v2)",
        "provider: none configured, so connect_account is not served (set MCP_ELICIT_PROVIDER_URL to serve it)",
    ]
    assert fine[4].startswith("store ") and fine[4].endswith(f": schema version {SCHEMA_VERSION}, this code's")
    assert "sekret" not in fine[4]


def test_options_and_provider_are_read_as_serve_reads_them(tmp_path: Path) -> None:
    store = tmp_path / "e.db"
    open_store(f"sqlite://{store}").close()
    provider = {
        "MCP_ELICIT_PROVIDER_URL": "https://provider.example/",
        "MCP_ELICIT_PROVIDER_CLIENT_ID": "elicit",
        "MCP_ELICIT_PROVIDER_CLIENT_SECRET": "provider-secret",
    }
    code, problems, fine = run(
        tmp_path, {**GOOD, **provider}, "--store", f"sqlite://{store}", "--public-url", "https://elicit.example/"
    )
    assert (code, problems) == (0, [])
    assert fine[0] == "public URL https://elicit.example"
    assert fine[3] == "provider https://provider.example (client elicit): connect_account is served"
    assert "provider-secret" not in " ".join(fine)
    code, problems, fine = run(tmp_path, GOOD, "--store", f"sqlite://{store}", "--host", "::1", "--port", "9100")
    assert code == 0 and fine[0] == "public URL http://[::1]:9100"


def test_an_empty_environment_lists_every_problem_and_creates_nothing(tmp_path: Path) -> None:
    code, problems, fine = run(tmp_path, {}, "--public-url", "http://elicit.example/mcp")
    assert code == 1 and fine == []
    assert [problem.split()[0] for problem in problems] == [
        "the",
        "the",
        "MCP_ELICIT_USERS",
        "MCP_ELICIT_AUTH_KEYS",
        "MCP_ELICIT_STATE_KEYS",
        "MCP_ELICIT_VAULT_KEYS",
        "store:",
    ]
    assert "plain http outside loopback" in problems[0] and "pass --public-url https://" in problems[0]
    assert "carries a path" in problems[1]
    assert all(" is not set: give " in problem for problem in problems[2:6])
    assert problems[6] == (
        f"store: {tmp_path / 'xdg' / 'mcp-elicit' / 'elicit.db'} has no mcp-elicit schema yet, and this mcp-elicit "
        f"needs version {SCHEMA_VERSION}; `mcp-elicit serve` creates it when it starts"
    )
    assert not (tmp_path / "xdg").exists()


def test_bad_values_are_each_named_with_what_to_do(tmp_path: Path) -> None:
    environ = {
        "MCP_ELICIT_USERS": "alice",
        "MCP_ELICIT_AUTH_KEYS": "not base64!",
        "MCP_ELICIT_STATE_KEYS": f"{b64(b'S' * 32)},{b64(b'S' * 32)}",
        "MCP_ELICIT_VAULT_KEYS": "v1:" + b64(b"short"),
        "MCP_ELICIT_PROVIDER_URL": "https://provider.example",
        "MCP_ELICIT_STORE": "mysql://db/elicit",
    }
    code, problems, fine = run(tmp_path, environ)
    assert code == 1 and fine == []
    assert [problem.split()[0].rstrip(":") for problem in problems] == [
        "MCP_ELICIT_USERS",
        "MCP_ELICIT_AUTH_KEYS",
        "MCP_ELICIT_STATE_KEYS",
        "MCP_ELICIT_VAULT_KEYS",
        "MCP_ELICIT_PROVIDER_CLIENT_ID",
        "MCP_ELICIT_PROVIDER_CLIENT_SECRET",
        "store",
    ]
    assert "key 1 is not base64; generate one with: python -c" in problems[1]
    assert "key 2 repeats key 1; give each key of the ring once" in problems[2]
    assert "unset MCP_ELICIT_PROVIDER_URL to serve without connect_account" in problems[4]
    assert "unknown store URL scheme 'mysql'" in problems[6] and problems[6].endswith("fix --store or MCP_ELICIT_STORE")


def test_serve_refuses_the_same_problems_doctor_lists(tmp_path: Path) -> None:
    environ = {**GOOD, "MCP_ELICIT_STATE_KEYS": f"{b64(b'S' * 32)},{b64(b'S' * 32)}"}
    store = f"sqlite://{tmp_path / 'e.db'}"
    code, problems, _ = run(tmp_path, environ, "--public-url", "http://elicit.example", "--store", store)
    assert code == 1
    served = command(
        ["serve", "--transport", "http", "--public-url", "http://elicit.example", "--port", str(free_port()),
         "--store", store, "--workspace", str(tmp_path / "workspace")],
        env=clean_environment(tmp_path, environ), timeout=60,
    )  # fmt: skip
    assert served.returncode == 2
    listed = [line.removeprefix("  - ") for line in served.stderr.splitlines()[1:]]
    assert listed == problems[:-1]  # all but the store, which serve would create
    assert len(listed) == 2 and not (tmp_path / "e.db").exists()


def test_a_pending_migration_is_reported_and_not_run(tmp_path: Path, store_url: str) -> None:
    at_version(store_url, 1)
    code, problems, _ = run(tmp_path, {**GOOD, "MCP_ELICIT_STORE": store_url})
    assert code == 1
    [problem] = problems
    assert problem.startswith("store: ")
    assert problem.endswith(
        f"has schema version 1, and this mcp-elicit needs version {SCHEMA_VERSION}; "
        "`mcp-elicit serve` migrates it when it starts (back the database up first)"
    )
    assert stored_versions(store_url) == [1]


def test_a_newer_schema_says_to_upgrade(tmp_path: Path, store_url: str) -> None:
    open_store(store_url).close()
    if store_url.startswith("sqlite:"):
        connection = sqlite3.connect(store_url.removeprefix("sqlite://"), isolation_level=None)
        connection.execute("INSERT INTO elicit_schema (version) VALUES (?)", (SCHEMA_VERSION + 1,))
        connection.close()
    else:
        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute("INSERT INTO elicit_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    code, [problem], _ = run(tmp_path, {**GOOD, "MCP_ELICIT_STORE": store_url})
    assert code == 1
    assert f"has schema version {SCHEMA_VERSION + 1}, but this mcp-elicit supports up to" in problem
    assert problem.endswith("upgrade mcp-elicit to use this store")


@pytest.mark.usefixtures("pg_server")
def test_unreachable_postgres_is_named_without_its_password(tmp_path: Path) -> None:
    url = f"postgresql://postgres:sekret@127.0.0.1:{free_port()}/test"
    code, [problem], fine = run(tmp_path, {**GOOD, "MCP_ELICIT_STORE": url})
    assert code == 1 and len(fine) == 4
    assert problem.startswith("store: cannot reach PostgreSQL at postgresql://postgres@127.0.0.1:")
    assert problem.endswith(
        "check that the PostgreSQL server runs and that the store URL names it: host, port, user, database"
    )
    assert "sekret" not in problem


def test_a_store_that_is_not_mcp_elicits_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE invoices (id INTEGER)")
    connection.commit()
    connection.close()
    before = path.read_bytes()
    code, [problem], _ = run(tmp_path, GOOD, "--store", f"sqlite://{path}")
    assert code == 1
    assert "is a SQLite database of another application" in problem
    assert problem.endswith("point the store URL at mcp-elicit's own database, or restore it from a backup")
    assert path.read_bytes() == before


def test_what_a_setting_holds_is_shown_as_text_not_acted_on(tmp_path: Path) -> None:
    store = tmp_path / "e.db"
    open_store(f"sqlite://{store}").close()
    code, [problem], _ = run(
        tmp_path, GOOD, "--store", f"sqlite://{store}", "--public-url", "http://ex\u202eample\x1bc.test"
    )
    assert code == 1
    assert problem.startswith("the public URL http://ex<U+202E>ample<U+001B>c.test is plain http outside loopback")
