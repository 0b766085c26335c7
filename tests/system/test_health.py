"""`/healthz` and `/readyz` of `mcp-elicit serve --transport http` as installed, on both stores.

The store goes away for real: the SQLite file is deleted, PostgreSQL is reached through a TCP relay that the
test closes (the port refuses) or stops (the database stops answering), and a newer schema version is written
into the database the way a newer instance's migration would.
"""

from __future__ import annotations

import base64
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import psycopg
import pytest

from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.store import SCHEMA_VERSION, SchemaTooNew, open_store
from mcp_elicit.web.health import Health
from tests.helpers.commands import spawn
from tests.helpers.http_harness import free_port, stop, wait_for_port
from tests.helpers.relay import Relay

# On both engines: readiness reads each engine its own way.
pytestmark = pytest.mark.engines("sqlite", "postgres")

READY = {"store": "ok", "schema": "ok", "keys": "ok"}


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


ENVIRON = {
    "MCP_ELICIT_USERS": "alice:wonderland",
    "MCP_ELICIT_AUTH_KEYS": b64(b"A" * 32),
    "MCP_ELICIT_STATE_KEYS": b64(b"S" * 32),
    "MCP_ELICIT_VAULT_KEYS": "v1:" + b64(b"V" * 32),
}


@dataclass
class Served:
    url: str
    log: Path

    def get(self, path: str, timeout: float = 30) -> httpx2.Response:
        return httpx2.get(f"{self.url}{path}", timeout=timeout)

    def ready(self) -> tuple[int, dict[str, Any]]:
        answer = self.get("/readyz")
        assert answer.headers["cache-control"] == "no-store"
        body: dict[str, Any] = answer.json()
        return answer.status_code, body

    def until(self, status: int, *, timeout: float = 60) -> dict[str, Any]:
        """Poll /readyz until it answers `status`; the body it then gave."""
        deadline = time.monotonic() + timeout
        while True:
            code, body = self.ready()
            if code == status:
                return body
            assert time.monotonic() < deadline, f"/readyz still answers {code} {body}"
            time.sleep(0.2)

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serving(tmp_path: Path, store_url: str, *options: str) -> Iterator[Served]:
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    process = spawn(
        ["serve", "--transport", "http", "--port", str(port), "--store", store_url,
         "--workspace", str(tmp_path / "workspace"), *options],
        env={**os.environ, **ENVIRON}, output=log,
    )  # fmt: skip
    try:
        wait_for_port(port, process)
        yield Served(f"http://127.0.0.1:{port}", log)
    finally:
        stop(process)


@pytest.fixture
def relay(pg_server: str) -> Iterator[Relay]:
    parts = urlsplit(pg_server)
    running = Relay((parts.hostname or "127.0.0.1", parts.port or 5432))
    try:
        yield running
    finally:
        running.release()
        running.close()


def set_schema_version(store_url: str, version: int | None) -> None:
    """Write a schema version row the way a newer instance's migration would (None removes it again)."""
    if store_url.startswith("sqlite:"):
        connection = sqlite3.connect(store_url.removeprefix("sqlite://"), isolation_level=None)
        try:
            if version is None:
                connection.execute("DELETE FROM elicit_schema WHERE version > ?", (SCHEMA_VERSION,))
            else:
                connection.execute("INSERT INTO elicit_schema (version) VALUES (?)", (version,))
        finally:
            connection.close()
        return
    with psycopg.connect(store_url, autocommit=True) as pg:
        if version is None:
            pg.execute("DELETE FROM elicit_schema WHERE version > %s", (SCHEMA_VERSION,))
        else:
            pg.execute("INSERT INTO elicit_schema (version) VALUES (%s)", (version,))


def test_both_answer_without_authorization_while_the_mcp_endpoint_demands_it(tmp_path: Path, store_url: str) -> None:
    with serving(tmp_path, store_url) as served:
        health = served.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert health.headers["cache-control"] == "no-store"
        assert served.ready() == (200, {"status": "ready", "checks": READY})
        assert served.get("/mcp").status_code == 401
        assert httpx2.head(f"{served.url}/readyz").status_code == 200


def test_a_newer_schema_makes_the_instance_not_ready_until_it_is_gone(tmp_path: Path, store_url: str) -> None:
    with serving(tmp_path, store_url) as served:
        assert served.ready()[0] == 200
        set_schema_version(store_url, SCHEMA_VERSION + 1)
        body = served.until(503)
        assert body == {"status": "not ready", "checks": {"store": "ok", "schema": "too_new", "keys": "ok"}}
        assert f"schema version {SCHEMA_VERSION + 1}" in served.logged()
        set_schema_version(store_url, None)
        assert served.until(200)["checks"] == READY
        assert "ready again" in served.logged()


def test_a_deleted_sqlite_file_is_not_ready_and_the_process_stays_healthy(tmp_path: Path) -> None:
    path = tmp_path / "data" / "elicit.db"
    path.parent.mkdir()
    with serving(tmp_path, f"sqlite://{path}") as served:
        assert served.ready()[0] == 200
        for name in ("elicit.db", "elicit.db-wal", "elicit.db-shm"):
            (path.parent / name).unlink(missing_ok=True)
        code, body = served.ready()
        assert code == 503
        assert body == {"status": "not ready", "checks": {"store": "replaced", "schema": "unknown", "keys": "ok"}}
        assert str(tmp_path) not in served.get("/readyz").text
        assert served.get("/healthz").status_code == 200
        assert f"not ready: the database file {path} was deleted" in served.logged()
        assert "Traceback" not in served.logged()


def test_postgres_out_of_reach_is_not_ready_and_ready_again_once_back(
    tmp_path: Path, pg_schema_url: str, relay: Relay
) -> None:
    with serving(tmp_path, relay.url(pg_schema_url)) as served:
        assert served.ready() == (200, {"status": "ready", "checks": READY})
        relay.close()
        code, body = served.ready()
        assert code == 503 and body["status"] == "not ready"
        assert body["checks"]["store"] in ("unreachable", "timeout")
        assert body["checks"]["schema"] == "unknown" and body["checks"]["keys"] == "ok"
        assert str(relay.port) not in served.get("/readyz").text
        assert served.get("/healthz").status_code == 200
        assert "not ready: " in served.logged() and str(relay.port) in served.logged()
        relay.open()
        assert served.until(200)["checks"] == READY
        assert "Traceback" not in served.logged()


def test_postgres_that_stops_answering_is_not_ready_within_the_timeout(
    tmp_path: Path, pg_schema_url: str, relay: Relay
) -> None:
    with serving(tmp_path, relay.url(pg_schema_url)) as served:
        assert served.ready()[0] == 200
        relay.hold()
        results: list[tuple[int, dict[str, Any]]] = []
        callers = [threading.Thread(target=lambda: results.append(served.ready())) for _ in range(4)]
        for caller in callers:
            caller.start()
        assert served.get("/healthz", timeout=5).status_code == 200  # the event loop is not held up meanwhile
        for caller in callers:
            caller.join(timeout=30)
        assert [code for code, _ in results] == [503] * 4
        assert all(body["checks"]["store"] == "timeout" for _, body in results)
        assert "gave no answer within 2 s" in served.logged()
        relay.release()
        assert served.until(200)["checks"] == READY


def test_the_development_server_serves_them_too(tmp_path: Path) -> None:
    with serving(tmp_path, f"sqlite://{tmp_path / 'e.db'}", "--dev-loopback", "--single-process") as served:
        assert served.get("/healthz").json() == {"status": "ok"}
        assert served.ready() == (200, {"status": "ready", "checks": READY})


def schema_reads_waiting_on_a_lock(database_url: str) -> int:
    """The store's reads of `elicit_schema` (readiness's query) that wait on a lock held elsewhere."""
    with psycopg.connect(database_url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            " AND query LIKE 'SELECT max(version) FROM elicit_schema%%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.postgres
def test_one_check_runs_at_a_time_and_callers_meanwhile_share_its_answer(pg_schema_url: str) -> None:
    """While the database holds readiness's query up, the callers arriving meanwhile wait for the check under
    way: one query on the database, not one (and one worker thread) per caller. A check that ended is not
    reused: the next caller's check reads the database again."""
    elicitation = Elicitation(open_store(pg_schema_url), request_state=RequestState(keys=[b"k" * 32]))
    health = Health(elicitation, timeout=30)

    async def main() -> None:
        answers: list[dict[str, str]] = []

        async def ask() -> None:
            answers.append(await health.readiness())

        with psycopg.connect(pg_schema_url) as holder:
            holder.execute("LOCK TABLE elicit_schema IN ACCESS EXCLUSIVE MODE")  # until this transaction ends
            async with anyio.create_task_group() as group:
                for _ in range(5):
                    group.start_soon(ask)
                with anyio.fail_after(30):
                    while not await anyio.to_thread.run_sync(schema_reads_waiting_on_a_lock, pg_schema_url):
                        await anyio.sleep(0.05)
                await anyio.wait_all_tasks_blocked()
                assert await anyio.to_thread.run_sync(schema_reads_waiting_on_a_lock, pg_schema_url) == 1
                holder.rollback()
        assert answers == [READY] * 5
        set_schema_version(pg_schema_url, SCHEMA_VERSION + 1)
        assert (await health.readiness())["schema"] == "too_new"

    try:
        anyio.run(main)
    finally:
        elicitation.close()


def test_verify_schema_reads_the_database_now_not_what_opening_found(store_url: str) -> None:
    store = open_store(store_url)
    try:
        store.verify_schema()
        set_schema_version(store_url, SCHEMA_VERSION + 1)
        with pytest.raises(SchemaTooNew, match=f"schema version {SCHEMA_VERSION + 1}"):
            store.verify_schema()
        assert store.schema_version() == SCHEMA_VERSION
    finally:
        store.close()
