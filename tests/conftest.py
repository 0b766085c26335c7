"""Shared fixtures: real SQLite files, the machine's real PostgreSQL, a controllable clock.

PostgreSQL is mandatory under CI=true: an unreachable server fails the run instead of skipping.
Each PostgreSQL test gets a schema of its own, dropped afterwards, so tests never see each other.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    JSONObject,
    Operation,
    Principal,
    new_form_decision,
    new_operation,
    new_url_decision,
)
from mcp_elicit.store import Store, open_store
from tests.async_engine import through_async_engine

PG_URL = os.environ.get("MCP_ELICIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() == "true"
START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
ALICE = Principal("alice", "client-a")
BOB = Principal("bob", "client-a")
ALICE_OTHER_CLIENT = Principal("alice", "client-b")
FORM_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approve"],
}


class FakeClock:
    """A clock the test moves by hand; safe to read from many threads."""

    def __init__(self, now: datetime = START) -> None:
        self._now = now
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now


def with_search_path(url: str, schema: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The PostgreSQL server's test database; each pytest-xdist worker gets a database of its own.

    A worker's own database keeps what PostgreSQL scopes to a database apart: LISTEN/NOTIFY channels,
    advisory locks (the sweep's), `pg_stat_activity` counts of listeners. Its name carries the test run's
    id, so two runs on one machine (two checkouts, two terminals) never drop each other's database.
    """
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except psycopg.OperationalError as error:
        message = f"PostgreSQL is not reachable at {PG_URL}: {error}"
        if IN_CI:
            pytest.fail(f"{message} (mandatory under CI=true)")
        pytest.skip(message)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        yield PG_URL
        return
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:12]
    name = f"elicit_test_{worker}_{run}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(PG_URL)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_schema_url(pg_server: str) -> Iterator[str]:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield with_search_path(pg_server, schema)
    finally:
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'elicit.db'}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


ENGINES = ("sqlite", "postgres")
ASYNC_ENGINE = "postgres-async"
"""The `store` fixture also runs on PostgreSQL's async engine (`tests.async_engine`): the server's path there."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_url" in metafunc.fixturenames:
        engines = [*ENGINES, ASYNC_ENGINE] if "store" in metafunc.fixturenames else list(ENGINES)
        metafunc.parametrize("store_url", engines, indirect=True)


@pytest.fixture
def store_url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture
def store(request: pytest.FixtureRequest, store_url: str, clock: FakeClock) -> Iterator[Store]:
    opened = open_store(store_url, clock=clock)
    if request.node.callspec.params.get("store_url") == ASYNC_ENGINE:
        opened = through_async_engine(opened)
    try:
        yield opened
    finally:
        opened.close()


class Records:
    """Builds valid records in a store, so each test states only what matters to it."""

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    def operation(self, principal: Principal = ALICE, *, ttl: timedelta = timedelta(hours=1)) -> Operation:
        return self.store.create_operation(
            new_operation(
                principal,
                method="tools/call",
                target="deploy",
                request_digest="sha256:" + uuid.uuid4().hex,
                now=self.clock(),
                ttl=ttl,
            )
        )

    def _origin(self, operation: Operation, key: str, sensitive: tuple[str, ...]) -> DecisionOrigin:
        return DecisionOrigin(
            operation_id=operation.operation_id,
            key=key,
            principal=operation.principal,
            origin_method=operation.method,
            origin_request_digest=operation.request_digest,
            sensitive_fields=sensitive,
        )

    def form(
        self,
        operation: Operation | None = None,
        *,
        ttl: timedelta = timedelta(minutes=10),
        key: str = "approve",
        sensitive: tuple[str, ...] = (),
    ) -> Decision:
        operation = operation or self.operation()
        decision = new_form_decision(
            self._origin(operation, key, sensitive),
            message="Deploy to production?",
            requested_schema=FORM_SCHEMA,
            now=self.clock(),
            ttl=ttl,
        )
        return self.store.create_decision(decision)

    def url(
        self,
        operation: Operation | None = None,
        *,
        ttl: timedelta = timedelta(minutes=10),
        url: str = "https://elicit.example/elicit/abc",
        key: str = "connect",
    ) -> Decision:
        operation = operation or self.operation()
        decision = new_url_decision(
            self._origin(operation, key, ()), message="Connect your account", url=url, now=self.clock(), ttl=ttl
        )
        return self.store.create_decision(decision)


@pytest.fixture
def records(store: Store, clock: FakeClock) -> Records:
    return Records(store, clock)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
