"""Shared fixtures: real SQLite files, the machine's real PostgreSQL, a controllable clock.

PostgreSQL is mandatory under CI=true: an unreachable server fails the run instead of skipping.
Each PostgreSQL test gets a schema of its own, dropped afterwards, so tests never see each other.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from mcp_elicit.store import Store, open_store
from tests.helpers.async_engine import through_async_engine
from tests.helpers.clock import FakeClock
from tests.helpers.environment import IN_CI, PG_URL, with_search_path
from tests.helpers.records import Records


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The PostgreSQL server's test database; each pytest-xdist worker gets a database of its own.

    A worker's own database keeps what PostgreSQL scopes to a database apart: LISTEN/NOTIFY channels,
    advisory locks (the sweep's), `pg_stat_activity` counts of listeners. Its name carries the test run's
    id, so two runs on one machine (two checkouts, two terminals) never drop each other's database.

    The drop at the end is sent, not waited for: DROP DATABASE forces a checkpoint of the whole server, which
    on a busy machine took a minute, charged to the worker's last test. The server finishes the drop by itself
    after the connection closes (it reads the close only after the statement ends).
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
        admin = psycopg.connect(PG_URL, autocommit=True)
        admin.pgconn.send_query(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        admin.close()  # not `with`: leaving it commits, which waits for the statement under way


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
"""The `store` fixture also runs on PostgreSQL's async engine (`tests.helpers.async_engine`), the server's path."""


STORE_TIER = Path(__file__).parent / "store"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The engine matrix runs where the store is the subject: `tests/store/`, and tests marked `engines(...)`.

    Everywhere else `store_url` is SQLite: a runtime, wire or system test shows its own behaviour, and the
    engines' differences are the store tier's. A guarantee that only PostgreSQL can show (row locks, several
    instances, LISTEN, restarts) names its engines with `@pytest.mark.engines("sqlite", "postgres")`.
    """
    if "store_url" not in metafunc.fixturenames:
        return
    marked = metafunc.definition.get_closest_marker("engines")
    if marked is not None:
        engines = list(marked.args)
    elif STORE_TIER in Path(str(metafunc.definition.path)).parents:
        engines = [*ENGINES, ASYNC_ENGINE] if "store" in metafunc.fixturenames else list(ENGINES)
    else:
        engines = ["sqlite"]
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


@pytest.fixture
def records(store: Store, clock: FakeClock) -> Records:
    return Records(store, clock)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
