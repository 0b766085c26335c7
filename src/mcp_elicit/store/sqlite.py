"""The embedded SQLite backend (stdlib `sqlite3`, WAL).

Guarantees: one connection per thread; every write is a `BEGIN IMMEDIATE` transaction, so writers
queue on the database lock instead of failing half-way; a committed transition survives the process
being killed (WAL with `synchronous=NORMAL`, the default, keeps commits across process crashes; a power
cut or an OS crash may lose the last commits, never corrupt the file; `synchronous=FULL` syncs the WAL at
every commit, so commits survive those too). Opening never writes to a file that is not an mcp-elicit
store: a corrupt file, another application's database or a newer schema is refused untouched. A file
deleted or replaced under a running store is found before the next write (the device and inode the
path names are compared with those opened, a `stat` per write transaction) and every write is refused
with `StoreFileReplaced`, never made to the unlinked file. A file, `-wal`/`-shm` file or directory that
refuses writes is reported as `StoreReadOnly` naming which, apart from a temporary `StoreUnavailable`
(locked past the busy timeout, a full disk).

Does not guarantee: sharing between machines. SQLite serves the processes of one host; several
instances behind a load balancer need the PostgreSQL backend.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from mcp_elicit.model import JSONValue
from mcp_elicit.store import _schema
from mcp_elicit.store._blocking import Store
from mcp_elicit.store._core import CLOCK, json_text, shape
from mcp_elicit.store._engine import BadValue, ForeignKeyViolation, NotUTF8, Tx, UniqueViolation
from mcp_elicit.store._sql import SQLCore
from mcp_elicit.store._sweep import SWEEP_REASON, Sweepable
from mcp_elicit.store.errors import (
    MigrationPending,
    SchemaTooNew,
    StoreCorrupt,
    StoreError,
    StoreFileReplaced,
    StoreReadOnly,
    StoreUnavailable,
)
from mcp_elicit.store.protocol import Clock

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class Synchronous(StrEnum):
    """How hard a commit is pressed to the disk (SQLite's `PRAGMA synchronous`, in WAL mode)."""

    NORMAL = "normal"
    """The WAL is synced at checkpoints only: a commit survives the process crashing; a power cut or an
    OS crash may lose the last commits (never the file's integrity)."""
    FULL = "full"
    """The WAL is synced at every commit: a commit survives a power cut and an OS crash too."""


class _FileIdentity:
    """The file a store opened, by device and inode, against what its path names now.

    Deleting or replacing (renaming over) the file leaves the store's connections on the unlinked one,
    where every write would seem to succeed and be lost at the next start.
    """

    __slots__ = ("_device", "_inode", "_path", "_reported")

    def __init__(self, path: Path) -> None:
        self._path = os.fspath(path)
        try:
            found = os.stat(self._path)
        except OSError as error:
            raise StoreUnavailable(f"cannot open {path}: {error.strerror}") from None
        self._device, self._inode = found.st_dev, found.st_ino
        self._reported = False

    def check(self) -> None:
        try:
            found = os.stat(self._path)
        except FileNotFoundError:
            raise self._refused(deleted=True) from None
        except OSError as error:
            raise StoreUnavailable(f"cannot check {self._path}: {error.strerror}") from None
        if found.st_ino != self._inode or found.st_dev != self._device:
            raise self._refused(deleted=False)

    def _refused(self, *, deleted: bool) -> StoreFileReplaced:
        refused = StoreFileReplaced(self._path, deleted=deleted)
        if not self._reported:
            self._reported = True
            log.error("%s", refused)
        return refused


class _WriteTransaction:
    """`BEGIN IMMEDIATE` ... `COMMIT`, or `ROLLBACK` on any error; driver errors become store errors.

    The file's identity is checked once the write lock is held, so a refused write leaves nothing behind.
    A plain class rather than a generator context manager: it sits on every transition's hot path.
    """

    __slots__ = ("_connection", "_identity", "_path")

    def __init__(self, connection: sqlite3.Connection, path: Path, identity: _FileIdentity) -> None:
        self._connection = connection
        self._path = path
        self._identity = identity

    async def __aenter__(self) -> _SQLiteTx:
        try:
            self._connection.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            raise _translate(error, self._path) from None
        try:
            self._identity.check()
        except StoreError:
            self._connection.execute("ROLLBACK")
            raise
        return _SQLiteTx(self._connection)

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        connection = self._connection
        try:
            if kind is None:
                connection.execute("COMMIT")
                return
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        except sqlite3.Error as failure:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise _translate(failure, self._path) from None
        if isinstance(error, sqlite3.Error):
            raise _translate(error, self._path) from None


class _SQLiteTx:
    __slots__ = ("_connection",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    async def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return self._connection.execute(_qmark(sql), params).rowcount

    async def one(self, sql: str, params: Sequence[object] = ()) -> Any:
        try:
            return self._connection.execute(_qmark(sql), params).fetchone()
        except sqlite3.OperationalError as error:
            rows = _read_again(self._connection, error, sql, params)
            return rows[0] if rows else None

    async def all(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        try:
            return self._connection.execute(_qmark(sql), params).fetchall()
        except sqlite3.OperationalError as error:
            return _read_again(self._connection, error, sql, params)

    async def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self._connection.executemany(_qmark(sql), rows)

    @asynccontextmanager
    async def stream(
        self, sql: str, params: Sequence[object] = (), *, size: int = 1000
    ) -> AsyncIterator[AsyncIterator[list[Any]]]:
        cursor = self._connection.execute(_qmark(sql), params)
        try:
            yield _pages(cursor, size)
        finally:
            cursor.close()

    def defer(self, sql: str, params: Sequence[object] = ()) -> None:
        self._connection.execute(_qmark(sql), params)  # in-process: nothing to save by holding it back


class _Snapshot:
    """A deferred `BEGIN` ... `ROLLBACK`: in WAL mode its reads see one snapshot, and writers go on meanwhile.

    Its reads are the audit's bulk reads (a seal, verify), streamed: they decode text with `_text`, so that a row
    whose text is not UTF-8 is one unreadable row, not a stream that stops half-way."""

    __slots__ = ("_connection", "_path")

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._connection = connection
        self._path = path

    async def __aenter__(self) -> _SQLiteTx:
        try:
            self._connection.execute("BEGIN")
        except sqlite3.Error as error:
            raise _translate(error, self._path) from None
        self._connection.text_factory = _text
        return _SQLiteTx(self._connection)

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        self._connection.text_factory = str
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")
        if isinstance(error, sqlite3.Error):
            raise _translate(error, self._path) from None


class _Translated:
    """A transaction of the connection's that is already open (a read, or a call inside `atomically`):
    nothing to begin or commit, only driver errors to turn into store errors."""

    __slots__ = ("_path", "_tx")

    def __init__(self, tx: _SQLiteTx, path: Path) -> None:
        self._tx = tx
        self._path = path

    async def __aenter__(self) -> _SQLiteTx:
        return self._tx

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if isinstance(error, sqlite3.Error):
            raise _translate(error, self._path) from None


_QMARK_CACHE: dict[str, str] = {}


def _qmark(sql: str) -> str:
    converted = _QMARK_CACHE.get(sql)
    if converted is None:
        converted = _QMARK_CACHE.setdefault(sql, sql.replace("%s", "?"))
    return converted


class _SQLiteCore(SQLCore):
    _for_update = ""
    _raw_cursor_keys = True

    def __init__(
        self,
        path: Path,
        *,
        clock: Clock,
        listeners: list[Callable[[str], None]],
        busy_timeout: float,
        migrate: bool,
        synchronous: Synchronous,
    ) -> None:
        super().__init__(clock, listeners)
        self._path = path
        self._file = path.absolute()  # what every connection opens, whatever the working directory is by then
        self._synchronous = Synchronous(synchronous)
        self._identity: _FileIdentity | None = None
        self._migrating = migrate
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._closed = False
        self._version = self._open_and_migrate()

    @property
    def display_url(self) -> str:
        url = f"sqlite://{self._path}" if self._path.is_absolute() else f"sqlite:{self._path}"
        return url if self._synchronous is Synchronous.NORMAL else f"{url}?synchronous={self._synchronous.value}"

    @property
    def synchronous(self) -> Synchronous:
        return self._synchronous

    @property
    def version(self) -> int:
        return self._version

    @property
    def path(self) -> Path:
        return self._path

    async def verify_schema(self) -> None:
        # A connection of its own, opened by path without creating: the file may be gone since this store opened it.
        if self._identity is not None:
            self._identity.check()
        try:
            connection = sqlite3.connect(f"{self._path.absolute().as_uri()}?mode=rw", uri=True, timeout=0.2)
        except sqlite3.Error as error:
            raise _not_now(error, self._path) from None
        try:
            row = connection.execute("SELECT max(version) FROM elicit_schema").fetchone()
        except sqlite3.Error as error:
            raise _translate(error, self._path) from None
        finally:
            connection.close()
        self._check_schema(row[0] if row is not None else None)

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"{self.display_url} is closed")
        if self._identity is not None:
            self._identity.check()  # before connecting, which would create a new file at a deleted one's path
        try:
            connection = sqlite3.connect(
                self._file, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise _not_now(error, self._path) from None
        try:
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute(f"PRAGMA synchronous = {self._synchronous.name}")  # reads the file: may fail
        except sqlite3.Error as error:
            connection.close()
            raise _translate(error, self._path) from None
        with self._guard:
            self._connections.append(connection)
        return connection

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None or self._closed:  # closed: `_connect` says so, not the driver's "closed database"
            connection = self._connect()
            self._local.connection = connection
        return connection

    def _open_and_migrate(self) -> int:
        try:  # a name too long, a loop of links: the path itself is unusable, said as the store's error
            if not self._path.parent.is_dir():
                raise StoreUnavailable(f"cannot open {self._path}: directory {self._path.parent} does not exist")
            if self._path.is_dir():
                raise StoreUnavailable(f"cannot open {self._path}: it is a directory")
            if not self._migrating and not self._path.exists():
                raise MigrationPending(0, _schema.LATEST_VERSION, str(self._path))
        except OSError as error:
            raise StoreUnavailable(f"cannot open {self._path}: {error.strerror or error}") from None
        try:
            connection = self._connect()
            self._local.connection = connection
            self._identity = _FileIdentity(self._file)
            return self._settle_schema(connection)
        except sqlite3.Error as error:
            self.close()
            raise _translate(error, self._path) from None
        except StoreError:
            self.close()
            raise

    def _settle_schema(self, connection: sqlite3.Connection) -> int:
        """Check and migrate, again while another process is creating the same new file.

        Switching to WAL needs the file to itself and does not wait for the busy handler, so two processes
        opening one fresh file can meet `database is locked`; the later one then finds the schema done.
        """
        deadline = time.monotonic() + self._busy_timeout
        pause = 0.01
        while True:
            try:
                return self._check_and_migrate(connection)
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def _check_and_migrate(self, connection: sqlite3.Connection) -> int:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "elicit_schema" not in tables:
            raise StoreCorrupt(
                f"{self._path} is a SQLite database of another application (tables: "
                f"{', '.join(sorted(tables)[:5])}); refusing to write to it"
            )
        found = self._stored_version(connection) if tables else 0
        if found > _schema.LATEST_VERSION:
            raise SchemaTooNew(found, _schema.LATEST_VERSION, str(self._path))
        if found < _schema.LATEST_VERSION:
            if not self._migrating:
                raise MigrationPending(found, _schema.LATEST_VERSION, str(self._path))
            if connection.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
                log.warning("%s: WAL journal mode unavailable; falling back to the default", self._path)
            self._migrate(connection)
        return _schema.LATEST_VERSION

    def _stored_version(self, connection: sqlite3.Connection) -> int:
        row = connection.execute("SELECT max(version) FROM elicit_schema").fetchone()
        if row is None or not isinstance(row[0], int):
            raise StoreCorrupt(f"{self._path} has an elicit_schema table without a version")
        return row[0]

    def _migrate(self, connection: sqlite3.Connection) -> None:
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute("CREATE TABLE IF NOT EXISTS elicit_schema (version INTEGER NOT NULL)")
            current = connection.execute("SELECT coalesce(max(version), 0) FROM elicit_schema").fetchone()[0]
            if current > _schema.LATEST_VERSION:
                raise SchemaTooNew(current, _schema.LATEST_VERSION, str(self._path))
            for version in range(current + 1, _schema.LATEST_VERSION + 1):
                for statement in _schema.statements(version, _schema.SQLITE_TYPES):
                    connection.execute(statement)
                connection.execute("INSERT INTO elicit_schema (version) VALUES (?)", (version,))
                log.info("%s: migrated to schema version %d", self._path, version)
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def _begin(self) -> _WriteTransaction:
        connection = self._connection()
        assert self._identity is not None  # taken when the store opened
        return _WriteTransaction(connection, self._path, self._identity)

    def _begin_read(self) -> _Translated:
        return _Translated(_SQLiteTx(self._connection()), self._path)

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(self._connection(), self._path)

    def _join(self, tx: Tx) -> _Translated:
        assert isinstance(tx, _SQLiteTx)
        return _Translated(tx, self._path)

    async def _expire_due(self, tx: Tx, sweepable: Sweepable, now: datetime, batch: int) -> list[str]:
        # BEGIN IMMEDIATE holds the write lock, so both statements see the same due rows.
        stamp = self._to_time(now)
        due = sweepable.due()
        version = sweepable.version_column
        await tx.execute(
            "INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)"
            f" SELECT '{sweepable.kind.value}', {sweepable.id_column}, status, 'expired', %s, %s,"
            f" json_object('version', {version} + 1), %s FROM {sweepable.table} WHERE {sweepable.id_column} IN ({due})"
            f" ORDER BY expires_at, {sweepable.id_column}",
            (CLOCK.actor, SWEEP_REASON, stamp, stamp, batch),
        )
        rows = await tx.all(
            f"UPDATE {sweepable.table} SET status = 'expired', {version} = {version} + 1, updated_at = %s"
            f" WHERE {sweepable.id_column} IN ({due}) RETURNING {sweepable.id_column}",
            (stamp, stamp, batch),
        )
        return [row[0] for row in rows]

    def _to_time(self, value: datetime) -> object:
        return (value - _EPOCH) // _MICROSECOND

    def _from_time(self, value: Any) -> datetime:
        if type(value) is not int:
            raise BadValue(f"{shape(value)} where a time belongs (whole microseconds since 1970)")
        try:
            return _EPOCH + timedelta(microseconds=value)
        except OverflowError:
            raise BadValue("a time outside the years 1 to 9999") from None

    def _to_json(self, value: JSONValue) -> object:
        return json_text(value)

    def _from_json(self, value: Any) -> JSONValue:
        if not isinstance(value, str):
            raise BadValue(f"{shape(value)} where JSON text belongs")
        try:
            return _loads(value)
        except json.JSONDecodeError as error:
            raise BadValue(f"invalid JSON ({error.msg} at character {error.pos})") from None
        except RecursionError:
            raise BadValue("JSON nested too deeply to read") from None
        except ValueError as error:
            raise BadValue(f"JSON that mcp-elicit never writes ({error})") from None

    def close(self) -> None:
        with self._guard:
            self._closed = True
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()


class SQLiteStore(Store):
    """The embedded store: calls take microseconds on a local file, so async code makes them inline."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Clock,
        busy_timeout: float = 30.0,
        migrate: bool = True,
        synchronous: Synchronous = Synchronous.NORMAL,
    ) -> None:
        """`migrate=False` opens only a file at this code's schema version (`MigrationPending` otherwise) and
        never creates one."""
        listeners: list[Callable[[str], None]] = []
        self._engine = _SQLiteCore(
            path, clock=clock, listeners=listeners, busy_timeout=busy_timeout, migrate=migrate, synchronous=synchronous
        )
        super().__init__(self._engine, listeners)

    @property
    def runs_inline(self) -> bool:
        return True

    @property
    def path(self) -> Path:
        return self._engine.path

    @property
    def display_url(self) -> str:
        return self._engine.display_url

    @property
    def synchronous(self) -> Synchronous:
        return self._engine.synchronous

    def schema_version(self) -> int:
        return self._engine.version

    def connection(self) -> sqlite3.Connection:
        """This thread's connection to the file, as the store's calls on this thread use it.

        For looking at what SQLite itself reports about the store at work: a `PRAGMA` as the store set it, the
        statements a call runs (`set_trace_callback`) and their `EXPLAIN QUERY PLAN`. Only for reading: a
        write through it would bypass the store's transactions and its audit trail.
        """
        return self._engine._connection()

    @property
    def _identity(self) -> _FileIdentity | None:
        return self._engine._identity

    def close(self) -> None:
        self._engine.close()


def _text(raw: bytes) -> str | NotUTF8:
    """A text value as `str`; bytes that are not UTF-8 (`CAST(X'EDA080' AS TEXT)`) as `NotUTF8`, which the row
    codecs refuse for its row, where the driver's own decoding fails the whole statement, and with it every read
    and seal that meets the row. Only where such a row was met, or in a snapshot: the driver's own decoding is
    faster, and a listing reads thousands of texts."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return NotUTF8(raw)


def _read_again(
    connection: sqlite3.Connection, error: sqlite3.OperationalError, sql: str, params: Sequence[object]
) -> list[Any]:
    """The rows of a read that met text that is not UTF-8, read again with that text decoded as `NotUTF8`, so that
    the codecs name the row; any other error, or a statement that writes (never run twice), raised as it was."""
    if not _not_utf8(error) or sql.lstrip()[:6].upper() != "SELECT":
        raise error
    connection.text_factory = _text
    try:
        return connection.execute(_qmark(sql), params).fetchall()
    finally:
        connection.text_factory = str


def _not_utf8(error: sqlite3.Error) -> bool:
    return isinstance(error, sqlite3.OperationalError) and str(error).startswith("Could not decode to UTF-8")


async def _pages(cursor: sqlite3.Cursor, size: int) -> AsyncIterator[list[Any]]:
    while rows := cursor.fetchmany(size):
        yield rows


def _loads(value: str) -> JSONValue:
    """JSON text as mcp-elicit writes it (`json_text`): a number that is not finite (NaN, Infinity, 1e400) or a
    lone surrogate (escaped: it has no UTF-8 form) was written by hand, and has no canonical encoding to hash."""
    result: JSONValue = _DECODER.decode(value)
    if "\\u" in value:
        try:
            json_text(result).encode()
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate") from None
    return result


def _not_finite(text: str) -> float:
    raise ValueError("a number that is not finite")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("a number beyond a double")
    return number


_DECODER = json.JSONDecoder(parse_constant=_not_finite, parse_float=_finite)


def _translate(error: sqlite3.Error, path: Path) -> StoreError:
    message = str(error)
    if isinstance(error, sqlite3.IntegrityError):
        if "UNIQUE" in message or "PRIMARY KEY" in message:
            return UniqueViolation(message)
        if "FOREIGN KEY" in message:
            return ForeignKeyViolation(message)
        return StoreCorrupt(f"{path}: a stored value broke a constraint: {message}")
    if _not_utf8(error):
        column = re.match(r"Could not decode to UTF-8 column '([^']*)'", message)
        where = f"column {column[1]}" if column else "a column"
        return StoreCorrupt(f"{path}: {where} holds text that is not UTF-8 (edited by hand?); it was left as it is")
    if isinstance(error, sqlite3.OperationalError):
        return _not_now(error, path)
    if isinstance(error, sqlite3.DatabaseError):
        return StoreCorrupt(f"{path} is not a readable mcp-elicit database ({message}); it was left untouched")
    return StoreError(f"{path}: {message}")


def _not_now(error: sqlite3.Error, path: Path) -> StoreUnavailable:
    """Why the file cannot be used: it refuses writes, it was moved away, or something passes (a lock, a full disk)."""
    code = getattr(error, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_READONLY_DBMOVED:
        return StoreFileReplaced(os.fspath(path.absolute()), deleted=not path.exists())
    primary = None if code is None else code & 0xFF
    if primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN):
        why = _unwritable(path)
        if why is not None or primary == sqlite3.SQLITE_READONLY:
            return StoreReadOnly(f"{path} is read-only: {why or error}; make it writable for this process's user")
    return StoreUnavailable(f"{path}: {error}")


def _unwritable(path: Path) -> str | None:
    """What refuses writes: the file, its `-wal` or `-shm` file, or the directory SQLite creates those in (even
    to read a WAL database)."""
    for what, file in (
        ("the file", path),
        ("its -wal file", path.with_name(f"{path.name}-wal")),
        ("its -shm file", path.with_name(f"{path.name}-shm")),
    ):
        if file.exists() and not os.access(file, os.W_OK):
            return f"{what} is not writable (its mode, its attributes or a read-only file system)"
    directory = path.absolute().parent
    if not os.access(directory, os.W_OK):
        return f"its directory {directory}, where SQLite creates its -wal and -shm files, is not writable"
    return None
