"""The PostgreSQL backend (psycopg 3 with a connection pool), for several instances on one database.

Guarantees: the same behaviour as the SQLite backend, proven by the same test suite; compare-and-set
rests on row locks (a conditional UPDATE re-checks its condition after waiting for a concurrent one);
one instance sweeps at a time (a transaction-scoped advisory lock: a sweep that finds it taken leaves the
work to its holder), and a sweep locks the rows it expires and skips rows another sweeper holds;
migrations run under an advisory lock, so instances starting together migrate once. Connection errors
name the server, database and user, never the password.

Does not guarantee: anything about a database shared with other applications beyond our `elicit_*`
tables. Point the URL at a schema of its own (`?options=-csearch_path%3Dname`) to keep them apart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import anyio
import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from mcp_elicit.model import JSONValue
from mcp_elicit.store import _schema
from mcp_elicit.store._sql import (
    CLOCK,
    SWEEP_REASON,
    BadValue,
    Cursor,
    ForeignKeyViolation,
    SQLStore,
    Sweepable,
    Tx,
    UniqueViolation,
    shape,
)
from mcp_elicit.store.errors import (
    MigrationPending,
    SchemaTooNew,
    StoreConfigError,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
)
from mcp_elicit.store.protocol import Clock, Interest

log = logging.getLogger(__name__)

CHANGES_CHANNEL = "elicit_decisions"
LISTENER_NAME = "mcp-elicit listener"
"""The `application_name` of the connection that listens, for whoever reads `pg_stat_activity`."""
LISTEN_CHECK = 1.0
"""Seconds between two looks, while listening, at whether anything here still waits."""
LISTEN_LINGER = 30.0
"""Seconds a process keeps listening after its last waiter: waits come in bursts."""
_MIGRATION_LOCK = 0x6D63_7065_6C69_6301  # an arbitrary constant naming "our migrations" to pg_advisory_lock
_SWEEP_LOCK = 0x6D63_7065_6C69_6302
"""The advisory lock a sweep's transaction holds, so that one instance sweeps at a time."""


class _PostgresTx:
    """A transaction whose deferred writes (audit rows, notices) travel with its COMMIT, pipelined: one round trip.

    Every round trip also costs the worker thread the GIL back, so a transition that writes its row, its
    audit and its notice pays for one statement and the commit, not four. Values stay bound on the server.
    """

    __slots__ = ("_connection", "_cursor", "_deferred")

    def __init__(self, connection: psycopg.Connection[Any], cursor: psycopg.Cursor[Any]) -> None:
        self._connection = connection
        self._cursor = cursor
        self._deferred: list[tuple[str, Sequence[object]]] = []

    def execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        return self._cursor.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self._cursor.executemany(sql, rows)

    def defer(self, sql: str, params: Sequence[object] = ()) -> None:
        self._deferred.append((sql, params))

    def flush(self) -> None:
        self._send(commit=False)

    def commit(self) -> None:
        if self._deferred:
            self._send(commit=True)
        else:
            self._connection.commit()

    def _send(self, *, commit: bool) -> None:
        if not self._deferred:
            return
        deferred, self._deferred = self._deferred, []
        with self._connection.pipeline():
            for sql, params in deferred:
                self._cursor.execute(sql, params)
            if commit:
                self._connection.commit()


def describe(conninfo: str) -> str:
    """The connection target without its password, for messages."""
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "postgresql://(unparsable URL)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname', '')}"


class PostgresStore(SQLStore):
    _for_update = " FOR UPDATE SKIP LOCKED"
    _lock_row = " FOR UPDATE"

    def __init__(
        self,
        conninfo: str,
        *,
        clock: Clock,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
        migrate: bool = True,
    ) -> None:
        """`migrate=False` opens only a database at this code's schema version (`MigrationPending` otherwise) and
        writes nothing."""
        super().__init__(clock)
        self._display = describe(conninfo)
        self._conninfo = conninfo
        self._connect_timeout = max(1, int(connect_timeout))
        try:
            conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as error:
            raise StoreConfigError(f"cannot parse the PostgreSQL URL {self._display}: {error}") from None
        self._version = self._check_and_migrate(conninfo, connect_timeout, migrate)
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=connect_timeout,
            kwargs={"connect_timeout": max(1, int(connect_timeout))},
            configure=_configure,
            open=False,
            name="mcp-elicit",
        )
        self._pool.open(wait=True, timeout=connect_timeout)

    @property
    def display_url(self) -> str:
        return self._display

    def schema_version(self) -> int:
        return self._version

    def _check_and_migrate(self, conninfo: str, connect_timeout: float, migrate: bool) -> int:
        try:
            connection = psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, int(connect_timeout)))
        except psycopg.Error as error:
            raise _connection_error(error, self._display) from None
        try:
            _configure(connection)
            with connection.transaction():
                if migrate:
                    connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                    connection.execute("CREATE TABLE IF NOT EXISTS elicit_schema (version INTEGER NOT NULL)")
                current = 0
                if connection.execute("SELECT to_regclass('elicit_schema') IS NOT NULL").fetchone() == (True,):
                    row = connection.execute("SELECT coalesce(max(version), 0) FROM elicit_schema").fetchone()
                    current = int(row[0]) if row else 0
                if current > _schema.LATEST_VERSION:
                    raise SchemaTooNew(current, _schema.LATEST_VERSION, self._display)
                if current < _schema.LATEST_VERSION and not migrate:
                    raise MigrationPending(current, _schema.LATEST_VERSION, self._display)
                for version in range(current + 1, _schema.LATEST_VERSION + 1):
                    for statement in _schema.statements(version, _schema.POSTGRES_TYPES):
                        connection.execute(statement)
                    connection.execute("INSERT INTO elicit_schema (version) VALUES (%s)", (version,))
                    log.info("%s: migrated to schema version %d", self._display, version)
            return _schema.LATEST_VERSION
        except psycopg.Error as error:
            raise _translate(error, self._display) from None
        finally:
            connection.close()

    @contextmanager
    def _begin(self) -> Iterator[Tx]:
        try:
            with self._pool.connection() as connection, connection.cursor() as cursor:
                tx = _PostgresTx(connection, cursor)
                yield tx
                tx.commit()
        except psycopg.Error as error:
            raise _translate(error, self._display) from None
        except PoolTimeout:
            raise StoreUnavailable(f"no connection to {self._display} became free in time") from None

    _begin_read = _begin

    @contextmanager
    def _join(self, tx: Tx) -> Iterator[Tx]:
        try:
            yield tx
        except psycopg.Error as error:
            raise _translate(error, self._display) from None

    def _sweep_turn(self, tx: Tx) -> bool:
        # Released with the transaction: a sweeper that dies mid-batch frees it, and no session keeps it.
        row = tx.execute("SELECT pg_try_advisory_xact_lock(%s)", (_SWEEP_LOCK,)).fetchone()
        return bool(row[0])

    def _expire_due(self, tx: Tx, sweepable: Sweepable, now: datetime, batch: int) -> list[str]:
        # One statement: rows another sweeper holds are skipped, never expired or audited twice.
        identity, version = sweepable.id_column, sweepable.version_column
        rows = tx.execute(
            f"WITH due AS ({sweepable.due()} FOR UPDATE SKIP LOCKED),"
            f" old AS (SELECT t.{identity}, t.status FROM {sweepable.table} t JOIN due USING ({identity})),"
            f" moved AS (UPDATE {sweepable.table} t SET status = 'expired', {version} = t.{version} + 1,"
            f" updated_at = %s FROM old WHERE t.{identity} = old.{identity}"
            f" RETURNING t.{identity}, old.status AS from_status, t.{version})"
            " INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)"
            f" SELECT '{sweepable.kind.value}', {identity}, from_status, 'expired', %s, %s,"
            f" jsonb_build_object('version', {version}), %s FROM moved RETURNING subject_id",
            (now, batch, now, CLOCK.actor, SWEEP_REASON, now),
        ).fetchall()
        return [row[0] for row in rows]

    def _announce(self, tx: Tx, subjects: Sequence[str]) -> None:
        notify = "SELECT pg_notify(%s, subject) FROM unnest(%s::text[]) AS subject"
        tx.defer(notify, (CHANGES_CHANNEL, list(subjects)))

    async def listen(self, on_change: Callable[[str], None], interest: Interest | None = None) -> None:
        """Call `on_change(subject)` for every change any instance announces (see `add_change_listener`).

        LISTEN/NOTIFY only hurries waiters along: a notice lost while reconnecting, or sent before this
        process listened, is covered by their polls. With `interest`, the connection is open only while
        something here waits, and `LISTEN_LINGER` after.
        """
        pause = 0.5
        while True:
            try:
                if interest is not None:
                    await interest.until_awaited()
                # Shielded, and bounded by the connect timeout: a connection cancelled half-way through its
                # handshake would be left open for the garbage collector to find.
                with anyio.CancelScope(shield=True):
                    connection = await psycopg.AsyncConnection.connect(
                        self._conninfo,
                        autocommit=True,
                        connect_timeout=self._connect_timeout,
                        application_name=LISTENER_NAME,
                    )
                async with connection:
                    await connection.execute(f"LISTEN {CHANGES_CHANNEL}")
                    pause = 0.5
                    await _relay(connection, on_change, interest)
            except psycopg.Error as error:
                log.warning("listening on %s stopped (%s); retrying", self._display, type(error).__name__)
                await anyio.sleep(pause)
                pause = min(pause * 2, 30.0)

    def _to_time(self, value: datetime) -> object:
        return value

    def _from_time(self, value: Any) -> datetime:
        if not isinstance(value, datetime) or value.tzinfo is None:
            kind = "a timestamp without a time zone" if isinstance(value, datetime) else shape(value)
            raise BadValue(f"{kind} where a time belongs (timestamptz)")
        return value

    def _to_json(self, value: JSONValue) -> object:
        return Jsonb(value)

    def _from_json(self, value: Any) -> JSONValue:
        result: JSONValue = value
        return result

    def close(self) -> None:
        self._pool.close()


async def _relay(
    connection: psycopg.AsyncConnection[Any], on_change: Callable[[str], None], interest: Interest | None
) -> None:
    """Hand on notices until nothing has waited here for `LISTEN_LINGER` (forever without `interest`)."""
    idle_since: float | None = None
    while True:
        async for notice in connection.notifies(timeout=LISTEN_CHECK):
            on_change(notice.payload)
        if interest is None or interest.awaited():
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= LISTEN_LINGER:
            return


def _configure(connection: psycopg.Connection[Any]) -> None:
    connection.execute("SET TIME ZONE 'UTC'")
    if not connection.autocommit:
        connection.commit()


def _connection_error(error: psycopg.Error, display: str) -> StoreError:
    state = getattr(error, "sqlstate", None)
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if state in ("28P01", "28000") or "password authentication failed" in text or "no password supplied" in text:
        return StoreUnavailable(f"{display} refused the credentials: {text}")
    if state == "3D000" or ("database" in text and "does not exist" in text):
        return StoreUnavailable(f"{display}: the database does not exist")
    return StoreUnavailable(f"cannot reach PostgreSQL at {display}: {text}")


def _translate(error: psycopg.Error, display: str) -> StoreError:
    if isinstance(error, pg_errors.UniqueViolation):
        return UniqueViolation(str(error))
    if isinstance(error, pg_errors.ForeignKeyViolation):
        return ForeignKeyViolation(str(error))
    if isinstance(error, pg_errors.UndefinedTable | pg_errors.UndefinedColumn | pg_errors.DatatypeMismatch):
        return StoreCorrupt(f"{display}: the elicit_* tables are not what this mcp-elicit wrote ({error})")
    if isinstance(error, psycopg.OperationalError):
        return StoreUnavailable(f"{display}: {error}")
    return StoreError(f"{display}: {error}")
