"""The PostgreSQL backend (psycopg 3 with a connection pool), for several instances on one database.

Guarantees: the same behaviour as the SQLite backend, proven by the same test suite; compare-and-set
rests on row locks (a conditional UPDATE re-checks its condition after waiting for a concurrent one);
one instance sweeps at a time (a transaction-scoped advisory lock: a sweep that finds it taken leaves the
work to its holder), and a sweep locks the rows it expires and skips rows another sweeper holds;
migrations run under an advisory lock, so instances starting together migrate once. Connection errors
name the server, database and user, never the password.

Connections: a blocking pool (the CLI, scripts, functions handed to worker threads) and, while a server
serves (`serving`), an async pool on its event loop for everything its calls do, each of `min_size` to
`max_size` connections, plus one listening connection while calls wait: plan `max_connections` for up to
twice `max_size` and one per instance. Both pools' connections are in autocommit mode: a read is its
statements alone, and a write's BEGIN, audit rows and notices travel pipelined with its statements and its
COMMIT (`_Waiting`).

Does not guarantee: anything about a database shared with other applications beyond our `elicit_*`
tables. Point the URL at a schema of its own (`?options=-csearch_path%3Dname`) to keep them apart.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any

import anyio
import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from mcp_elicit.model import JSONValue, Operation
from mcp_elicit.store import _schema
from mcp_elicit.store._blocking import Store
from mcp_elicit.store._core import CLOCK, shape
from mcp_elicit.store._engine import BadValue, ForeignKeyViolation, Tx, UniqueViolation
from mcp_elicit.store._sql import SQLCore
from mcp_elicit.store._sweep import SWEEP_REASON, Sweepable
from mcp_elicit.store.errors import (
    MigrationPending,
    SchemaTooNew,
    StoreConfigError,
    StoreCorrupt,
    StoreError,
    StoreReadOnly,
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
SWEEP_LOCK = 0x6D63_7065_6C69_6302
"""The advisory lock a sweep's transaction holds, so that one instance sweeps at a time. Public because it is
part of the database's use: an application sharing the database keeps its own advisory locks clear of it."""
SEAL_LOCK = 0x6D63_7065_6C69_6303
"""The advisory lock a seal of the audit trail holds, so that one instance seals at a time (public as `SWEEP_LOCK`)."""
NAMED_LOCKS = 0x6D63_7065
"""The first key of the two-key advisory locks a write takes on a name (`_lock_name`), the second the name's hash:
the two-key space does not overlap the one-key locks above."""


_BEGIN: tuple[str, Sequence[object]] = ("BEGIN", ())
_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
"""The first statement of a snapshot (`_snapshot`): every later read sees the database as of its first."""


class _Waiting:
    """The one place the store uses pipeline mode: what both engines' transactions hold back.

    Connections are in autocommit mode, so a read is its statements alone. A statement whose result nobody
    reads (a write's BEGIN, and what `defer` holds: its audit rows and notices) waits for the next statement
    that must be answered, or for the COMMIT, and goes out with it in one round trip: a transition that writes
    its row, its audit and its notice is two round trips. Sent one by one, the same statements made an
    in-process PostgreSQL call 12-35 % slower (the lean-core issue's same-run comparison).
    """

    __slots__ = ("_waiting", "_write")

    def __init__(self, *, write: bool) -> None:
        self._write = write
        self._waiting: list[tuple[str, Sequence[object]]] = [_BEGIN] if write else []

    def defer(self, sql: str, params: Sequence[object] = ()) -> None:
        if not self._write:
            raise AssertionError("a read transaction writes nothing, deferred or not")
        self._waiting.append((sql, params))

    def _with_waiting(self, *last: tuple[str, Sequence[object]]) -> list[tuple[str, Sequence[object]]]:
        """What waits, then `last`, taken to be sent together."""
        statements, self._waiting = [*self._waiting, *last], []
        return statements

    @property
    def _owes_commit(self) -> bool:
        """A write that sent nothing and holds nothing but its BEGIN has nothing to commit."""
        return self._write and self._waiting != [_BEGIN]


class _PostgresTx(_Waiting):
    """A transaction on a blocking connection (`run_now`)."""

    __slots__ = ("_connection", "_cursor")

    def __init__(self, connection: psycopg.Connection[Any], cursor: psycopg.Cursor[Any], *, write: bool) -> None:
        super().__init__(write=write)
        self._connection = connection
        self._cursor = cursor

    def _send(self, *last: tuple[str, Sequence[object]]) -> psycopg.Cursor[Any]:
        if not self._waiting and len(last) == 1:
            return self._cursor.execute(*last[0])
        with self._connection.pipeline():
            for sql, params in self._with_waiting(*last):
                self._cursor.execute(sql, params)
        return self._cursor

    async def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return self._send((sql, params)).rowcount

    async def one(self, sql: str, params: Sequence[object] = ()) -> Any:
        return self._send((sql, params)).fetchone()

    async def all(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        return self._send((sql, params)).fetchall()

    async def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        if self._waiting:
            self._send()
        self._cursor.executemany(sql, rows)

    @asynccontextmanager
    async def stream(
        self, sql: str, params: Sequence[object] = (), *, size: int = 1000
    ) -> AsyncIterator[AsyncIterator[list[Any]]]:
        if self._waiting:
            self._send()
        named = self._connection.cursor(name=_stream_name())
        try:
            named.execute(sql, params)
            yield _pages(named, size)
        finally:
            named.close()

    def commit(self) -> None:
        if self._owes_commit:
            self._send(("COMMIT", ()))


class _AsyncPostgresTx(_Waiting):
    """`_PostgresTx` on an async connection: the event loop waits on the socket, no thread in between."""

    __slots__ = ("_connection", "_cursor")

    def __init__(
        self, connection: psycopg.AsyncConnection[Any], cursor: psycopg.AsyncCursor[Any], *, write: bool
    ) -> None:
        super().__init__(write=write)
        self._connection = connection
        self._cursor = cursor

    async def _send(self, *last: tuple[str, Sequence[object]]) -> psycopg.AsyncCursor[Any]:
        if not self._waiting and len(last) == 1:
            return await self._cursor.execute(*last[0])
        async with self._connection.pipeline():
            for sql, params in self._with_waiting(*last):
                await self._cursor.execute(sql, params)
        return self._cursor

    async def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return (await self._send((sql, params))).rowcount

    async def one(self, sql: str, params: Sequence[object] = ()) -> Any:
        return await (await self._send((sql, params))).fetchone()

    async def all(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        return await (await self._send((sql, params))).fetchall()

    async def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        if self._waiting:
            await self._send()
        await self._cursor.executemany(sql, rows)

    @asynccontextmanager
    async def stream(
        self, sql: str, params: Sequence[object] = (), *, size: int = 1000
    ) -> AsyncIterator[AsyncIterator[list[Any]]]:
        if self._waiting:
            await self._send()
        named = self._connection.cursor(name=_stream_name())
        try:
            await named.execute(sql, params)
            yield _async_pages(named, size)
        finally:
            await named.close()

    async def commit(self) -> None:
        if self._owes_commit:
            await self._send(("COMMIT", ()))


_STREAMS = itertools.count(1)


def _stream_name() -> str:
    """A server-side cursor's name, never the name of another one the same connection may still hold open."""
    return f"mcp_elicit_stream_{next(_STREAMS)}"


async def _pages(cursor: psycopg.ServerCursor[Any], size: int) -> AsyncIterator[list[Any]]:
    while rows := cursor.fetchmany(size):
        yield rows


async def _async_pages(cursor: psycopg.AsyncServerCursor[Any], size: int) -> AsyncIterator[list[Any]]:
    while rows := await cursor.fetchmany(size):
        yield rows


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


class _PostgresCore(SQLCore):
    """The PostgreSQL engine: codecs, set-based sweeps, notices. Subclasses say where connections come from."""

    _for_update = " FOR UPDATE SKIP LOCKED"
    _lock_row = " FOR UPDATE"

    def __init__(self, clock: Clock, listeners: list[Callable[[str], None]], display: str) -> None:
        super().__init__(clock, listeners)
        self._display = display

    @property
    def display_url(self) -> str:
        return self._display

    async def _lock_name(self, tx: Tx, name: str) -> None:
        await tx.one("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (NAMED_LOCKS, name))

    async def _sweep_turn(self, tx: Tx) -> bool:
        # Released with the transaction: a sweeper that dies mid-batch frees it, and no session keeps it.
        row = await tx.one("SELECT pg_try_advisory_xact_lock(%s)", (SWEEP_LOCK,))
        return bool(row[0])

    async def _seal_turn(self, tx: Tx) -> bool:
        row = await tx.one("SELECT pg_try_advisory_xact_lock(%s)", (SEAL_LOCK,))
        return bool(row[0])

    async def _expire_due(self, tx: Tx, sweepable: Sweepable, now: datetime, batch: int) -> list[str]:
        # One statement: rows another sweeper holds are skipped, never expired or audited twice.
        identity, version = sweepable.id_column, sweepable.version_column
        rows = await tx.all(
            f"WITH due AS ({sweepable.due()} FOR UPDATE SKIP LOCKED),"
            f" old AS (SELECT t.{identity}, t.status FROM {sweepable.table} t JOIN due USING ({identity})),"
            f" moved AS (UPDATE {sweepable.table} t SET status = 'expired', {version} = t.{version} + 1,"
            f" updated_at = %s FROM old WHERE t.{identity} = old.{identity}"
            f" RETURNING t.{identity}, old.status AS from_status, t.{version})"
            " INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)"
            f" SELECT '{sweepable.kind.value}', {identity}, from_status, 'expired', %s, %s,"
            f" jsonb_build_object('version', {version}), %s FROM moved RETURNING subject_id",
            (now, batch, now, CLOCK.actor, SWEEP_REASON, now),
        )
        return [row[0] for row in rows]

    async def _overtaken(self, tx: Tx, candidate: Operation, replay_since: datetime | None) -> bool:
        # READ COMMITTED: the insert looked at the call with the snapshot its statement began with, so it missed
        # a creator not yet committed, and the unique index let it pass if that operation had finished by the
        # time its creator committed. A statement of its own looks again; without replay only an open operation
        # stands in the way, and the unique index already keeps a second one out.
        if replay_since is None:
            return False
        where, params = self._in_the_way(candidate, replay_since)
        undone = await tx.execute(
            "DELETE FROM elicit_operations WHERE operation_id = %s AND EXISTS"
            f" (SELECT 1 FROM elicit_operations WHERE {where} AND operation_id <> %s)",
            (candidate.operation_id, *params, candidate.operation_id),
        )
        return undone == 1

    def _announce(self, tx: Tx, subjects: Sequence[str]) -> None:
        notify = "SELECT pg_notify(%s, subject) FROM unnest(%s::text[]) AS subject"
        tx.defer(notify, (CHANGES_CHANNEL, list(subjects)))

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

    @asynccontextmanager
    async def _join(self, tx: Tx) -> AsyncIterator[Tx]:
        try:
            yield tx
        except psycopg.Error as error:
            raise _translate(error, self._display) from None


class _BlockingPostgres(_PostgresCore):
    """Connections from a blocking pool: for the synchronous `Store` (the CLI, scripts, worker threads)."""

    def __init__(
        self, clock: Clock, listeners: list[Callable[[str], None]], display: str, pool: ConnectionPool[Any]
    ) -> None:
        super().__init__(clock, listeners, display)
        self._pool = pool

    def _begin(self) -> AbstractAsyncContextManager[Tx]:
        return self._transaction(write=True)

    def _begin_read(self) -> AbstractAsyncContextManager[Tx]:
        return self._transaction(write=False)

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[Tx]:
        try:
            with self._pool.connection() as connection, connection.transaction(), connection.cursor() as cursor:
                cursor.execute(_SNAPSHOT)
                yield _PostgresTx(connection, cursor, write=False)
        except PoolTimeout:
            raise StoreUnavailable(f"no connection to {self._display} became free in time") from None
        except psycopg.Error as error:
            raise _translate(error, self._display) from None

    @asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[Tx]:
        # On an error the connection's own exit rolls back whatever was begun.
        try:
            with self._pool.connection() as connection, connection.cursor() as cursor:
                tx = _PostgresTx(connection, cursor, write=write)
                yield tx
                tx.commit()
        except PoolTimeout:  # an OperationalError too: before the general case, which would call it a lost connection
            raise StoreUnavailable(f"no connection to {self._display} became free in time") from None
        except psycopg.Error as error:
            if _connection_lost(error):
                _drop_broken(self._pool)
            raise _translate(error, self._display) from None


class _AsyncPostgres(_PostgresCore):
    """Connections from psycopg's async pool, on the event loop that opened it: no worker thread per call."""

    def __init__(
        self, clock: Clock, listeners: list[Callable[[str], None]], display: str, pool: AsyncConnectionPool[Any]
    ) -> None:
        super().__init__(clock, listeners, display)
        self._pool = pool
        self._checking: asyncio.Task[None] | None = None

    def _check_pool_soon(self) -> None:
        """Test the pool's idle connections in the background (one check at a time), so the unit that met the
        lost connection fails at once and the next one gets a live connection."""
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(_drop_broken_async(self._pool))

    def _begin(self) -> AbstractAsyncContextManager[Tx]:
        return self._transaction(write=True)

    def _begin_read(self) -> AbstractAsyncContextManager[Tx]:
        return self._transaction(write=False)

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[Tx]:
        try:
            async with (
                self._pool.connection() as connection,
                connection.transaction(),
                connection.cursor() as cursor,
            ):
                await cursor.execute(_SNAPSHOT)
                yield _AsyncPostgresTx(connection, cursor, write=False)
        except PoolTimeout:
            raise StoreUnavailable(f"no connection to {self._display} became free in time") from None
        except psycopg.Error as error:
            raise _translate(error, self._display) from None

    @asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[Tx]:
        # On an error the connection's own exit rolls back whatever was begun.
        try:
            async with self._pool.connection() as connection, connection.cursor() as cursor:
                tx = _AsyncPostgresTx(connection, cursor, write=write)
                yield tx
                await tx.commit()
        except PoolTimeout:  # an OperationalError too: before the general case, which would call it a lost connection
            raise StoreUnavailable(f"no connection to {self._display} became free in time") from None
        except psycopg.Error as error:
            if _connection_lost(error):
                self._check_pool_soon()
            raise _translate(error, self._display) from None


def _drop_broken(pool: ConnectionPool[Any]) -> None:
    """After a lost connection (the server restarted, say), the pool's other idle connections are likely lost
    too: test them now and replace the dead, so the next unit is not handed one."""
    try:
        pool.check()
    except Exception as error:
        log.info("checking the pool's connections after a lost one failed: %s", type(error).__name__)


async def _drop_broken_async(pool: AsyncConnectionPool[Any]) -> None:
    """`_drop_broken` for the async pool. Never cancelled midway: psycopg's check holds the connections it has
    not tested yet, and would lose them."""
    try:
        await pool.check()
    except Exception as error:
        log.info("checking the pool's connections after a lost one failed: %s", type(error).__name__)


def _connection_lost(error: psycopg.Error) -> bool:
    """The connection itself failed (SQLSTATE class 08, an administrator's shutdown), not a statement on it."""
    state = error.sqlstate or ""
    return isinstance(error, psycopg.OperationalError) and (
        not state or state.startswith("08") or state in ("57P01", "57P02", "57P03")
    )


class _Serving:
    """An async pool open on one event loop, and how many `serving` blocks hold it there."""

    __slots__ = ("core", "holders", "pool")

    def __init__(self, core: _AsyncPostgres, pool: AsyncConnectionPool[Any]) -> None:
        self.core = core
        self.pool = pool
        self.holders = 0


class PostgresStore(Store):
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
        self._display = describe(conninfo)
        self._conninfo = conninfo
        self._clock = clock
        self._connect_timeout = max(1, int(connect_timeout))
        self._timeout = connect_timeout
        self._sizes = (min_size, max_size)
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
            kwargs={"connect_timeout": self._connect_timeout, "autocommit": True},
            configure=_configure,
            open=False,
            name="mcp-elicit",
        )
        self._pool.open(wait=True, timeout=connect_timeout)
        listeners: list[Callable[[str], None]] = []
        self._listeners = listeners
        super().__init__(_BlockingPostgres(clock, listeners, self._display, self._pool), listeners)
        self._serving: dict[asyncio.AbstractEventLoop, _Serving] = {}

    @property
    def display_url(self) -> str:
        return self._display

    def schema_version(self) -> int:
        return self._version

    @property
    def asynchronous(self) -> SQLCore | None:
        try:
            serving = self._serving.get(asyncio.get_running_loop())
        except RuntimeError:
            return None
        return None if serving is None else serving.core

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Open the async pool on this event loop for as long as any such block runs (the server's lifespans).

        It connects in the background: a database down at start-up makes calls fail as unavailable, not the
        server's start. Outside these blocks, async callers run the blocking store in worker threads.
        """
        loop = asyncio.get_running_loop()
        serving = self._serving.get(loop)
        if serving is None:
            min_size, max_size = self._sizes
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self._conninfo,
                min_size=min_size,
                max_size=max_size,
                timeout=self._timeout,
                kwargs={"connect_timeout": self._connect_timeout, "autocommit": True},
                configure=_configure_async,
                open=False,
                name="mcp-elicit-async",
            )
            await pool.open(wait=False)
            serving = _Serving(_AsyncPostgres(self._clock, self._listeners, self._display, pool), pool)
            self._serving[loop] = serving
        serving.holders += 1
        try:
            yield
        finally:
            serving.holders -= 1
            if serving.holders == 0:
                del self._serving[loop]
                with anyio.CancelScope(shield=True):
                    await serving.pool.close()

    def _check_and_migrate(self, conninfo: str, connect_timeout: float, migrate: bool) -> int:
        try:
            connection = psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, int(connect_timeout)))
        except psycopg.Error as error:
            raise _connection_error(error, self._display) from None
        try:
            _configure(connection)
            with connection.transaction():
                current = _stored_version(connection)
                if current < _schema.LATEST_VERSION and migrate:
                    # Read first, so that a database at this version (a standby too) opens without a write.
                    connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                    connection.execute("CREATE TABLE IF NOT EXISTS elicit_schema (version INTEGER NOT NULL)")
                    current = _stored_version(connection)  # another instance may have migrated meanwhile
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
                try:
                    await connection.execute(f"LISTEN {CHANGES_CHANNEL}")
                    pause = 0.5
                    await _relay(connection, on_change, interest)
                finally:
                    # Shielded too: a listener cancelled mid-wait (its server stopping) still closes its socket.
                    with anyio.CancelScope(shield=True):
                        await connection.close()
            except psycopg.Error as error:
                log.warning("listening on %s stopped (%s); retrying", self._display, type(error).__name__)
                await anyio.sleep(pause)
                pause = min(pause * 2, 30.0)

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


def _stored_version(connection: psycopg.Connection[Any]) -> int:
    if connection.execute("SELECT to_regclass('elicit_schema') IS NOT NULL").fetchone() != (True,):
        return 0
    row = connection.execute("SELECT coalesce(max(version), 0) FROM elicit_schema").fetchone()
    return int(row[0]) if row else 0


def _configure(connection: psycopg.Connection[Any]) -> None:
    connection.execute("SET TIME ZONE 'UTC'")
    if not connection.autocommit:
        connection.commit()


async def _configure_async(connection: psycopg.AsyncConnection[Any]) -> None:
    await connection.execute("SET TIME ZONE 'UTC'")
    if not connection.autocommit:
        await connection.commit()


def _connection_error(error: psycopg.Error, display: str) -> StoreError:
    state = getattr(error, "sqlstate", None)
    text = _first_line(error)
    if state in ("28P01", "28000") or "password authentication failed" in text or "no password supplied" in text:
        return StoreUnavailable(f"{display} refused the credentials: {text}")
    if state == "3D000" or ("database" in text and "does not exist" in text):
        return StoreUnavailable(f"{display}: the database does not exist")
    return StoreUnavailable(f"cannot reach PostgreSQL at {display}: {text}")


def _translate(error: psycopg.Error, display: str) -> StoreError:
    if isinstance(error, pg_errors.UniqueViolation):
        return UniqueViolation(_first_line(error))  # the constraint's name; never DETAIL's key values
    if isinstance(error, pg_errors.ForeignKeyViolation):
        return ForeignKeyViolation(_first_line(error))
    if isinstance(error, pg_errors.ReadOnlySqlTransaction):
        return StoreReadOnly(
            f"{display} is read-only ({_first_line(error)}): a hot standby, or default_transaction_read_only is on "
            "(for the database, its user or in the URL); point the store URL at the primary, or turn that setting off"
        )
    if isinstance(error, pg_errors.InsufficientPrivilege):
        return StoreReadOnly(
            f"{display} is read-only for its user ({_first_line(error)}): grant that user SELECT, INSERT, UPDATE "
            "and DELETE on the elicit_* tables (and USAGE on their sequences)"
        )
    if isinstance(error, pg_errors.UndefinedTable | pg_errors.UndefinedColumn | pg_errors.DatatypeMismatch):
        return StoreCorrupt(f"{display}: the elicit_* tables are not what this mcp-elicit wrote ({error})")
    if isinstance(error, psycopg.OperationalError):
        return StoreUnavailable(f"{display}: {_first_line(error)}")
    return StoreError(f"{display}: {_first_line(error)}")  # the lines after may quote the value refused


def _first_line(error: psycopg.Error) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
