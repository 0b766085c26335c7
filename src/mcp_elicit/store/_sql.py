"""The store's logic, written once over a minimal SQL interface that each engine adapts.

Every write runs in one transaction through `_write()`: the change and its audit row commit together
or not at all. Compare-and-set is a conditional UPDATE on `(status, version)` plus the binding; when it
matches no row, a second read in the same transaction says why (missing, someone else's, lost race,
overdue), and an overdue record is expired right there so a late signal can never wake it.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from mcp_elicit.model import (
    Actor,
    AuditEntry,
    BrowserUser,
    Caller,
    Decision,
    DecisionStatus,
    JSONObject,
    JSONValue,
    Mode,
    Operation,
    OperationStatus,
    Operator,
    Principal,
    ResumePolicy,
    SubjectKind,
    System,
    check_decision_transition,
    check_operation_transition,
    redact_content,
    redact_text,
    redact_url,
)
from mcp_elicit.model.transitions import TERMINAL_DECISION_STATUSES
from mcp_elicit.store import hooks
from mcp_elicit.store._schema import LATEST_VERSION, WAITING_SQL
from mcp_elicit.store._unit import UNIT, Unit, after_commit
from mcp_elicit.store.errors import (
    AlreadyExists,
    DecisionConflict,
    DecisionExpired,
    IdempotencyKeyConflict,
    LeaseLost,
    MigrationPending,
    NotFound,
    OperationConflict,
    OperationExpired,
    SchemaTooNew,
    StoreCorrupt,
    StoreError,
    UnreadableRow,
)
from mcp_elicit.store.protocol import (
    OPERATION_DECISIONS_READ,
    TASK_JOURNAL,
    Claim,
    Clock,
    Consumption,
    DecisionFilter,
    DecisionPage,
    Delivery,
    DeliveryState,
    Interest,
    JournalEntry,
    NotificationEvent,
    OperationRecords,
    OperationStart,
    SweepResult,
    VaultRecord,
)

R = TypeVar("R")
P = ParamSpec("P")
E = TypeVar("E", bound=Enum)

CLOCK = System("clock")
_ID_PREFIX = re.compile(r"[0-9a-fA-F-]{1,36}")
SWEEP_BATCH = 1000

DECISION_COLUMNS = (
    "elicitation_id, operation_id, key, principal_id, client_id, origin_method, origin_request_digest, mode, "
    "status, resume_policy, message, requested_schema, url, sensitive_fields, content, completion_version, "
    "created_at, updated_at, expires_at"
)
OPERATION_COLUMNS = (
    "operation_id, principal_id, client_id, method, target, request_digest, idempotency_key, status, result, "
    "version, created_at, updated_at, expires_at"
)
AUDIT_COLUMNS = "seq, subject_kind, subject_id, from_status, to_status, actor, reason, details, at"
DECISION_NAMES = tuple(DECISION_COLUMNS.split(", "))
OPERATION_NAMES = tuple(OPERATION_COLUMNS.split(", "))
AUDIT_NAMES = tuple(AUDIT_COLUMNS.split(", "))
_JOURNAL_NAMES = ("value", "recorded_at")
VAULT_COLUMNS = "principal_id, name, key_id, sealed, created_at, updated_at"
VAULT_KEY = "principal_id = %s AND name = %s"
VAULT_STORED = "stored"
VAULT_DELETED = "deleted"
VAULT_ROTATION = System("vault-rotation")
_VAULT_PUT_ATTEMPTS = 5
BINDING = " AND principal_id = %s AND client_id = %s"
_OPERATION_OF_JOIN = ", ".join(f"o.{name}" for name in OPERATION_NAMES)
_DECISION_OF_JOIN = ", ".join(f"d.{name}" for name in DECISION_NAMES)
KEY_COLUMNS = "principal_id, client_id, idempotency_key, method, target, request_digest, expires_at"
KEY_OF_CALLER = "principal_id = %s AND client_id = %s AND idempotency_key = %s"
"""An idempotency key is its caller's own: another caller's use of the same key is another key."""
_CREATE_ATTEMPTS = 3
SUBSCRIPTIONS_RECHECK = 1.0
"""Seconds a store trusts what it last found of the webhook subscriptions: one another process adds is
written to by this one's transitions from at most this long after."""
OUTBOX_COLUMNS = (
    "event_id, subscription, event_type, elicitation_id, operation_id, principal_id, status, method, target, "
    "deadline, occurred_at, state, attempts, next_attempt_at, last_error"
)
OUTBOX_NAMES = tuple(OUTBOX_COLUMNS.split(", "))
OUTBOX_KEY = "event_id = %s AND subscription = %s AND state = 'pending'"
_OUTBOX_ERROR_LENGTH = 300
_ASKED = (NotificationEvent.DECISION_WAITING, NotificationEvent.TASK_INPUT_REQUIRED)
_ENDED = (NotificationEvent.DECISION_ENDED,)


class Tx(Protocol):
    """One transaction's statements. Every call may wait on the engine; one that never does (SQLite, a
    blocking driver) lets the same code run synchronously (see `run_now`)."""

    async def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run a statement; the number of rows it changed."""
        ...

    async def one(self, sql: str, params: Sequence[object] = ()) -> Any:
        """The statement's first row, or `None`."""
        ...

    async def all(self, sql: str, params: Sequence[object] = ()) -> list[Any]: ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None: ...

    def defer(self, sql: str, params: Sequence[object] = ()) -> None:
        """A write whose result nobody reads (an audit row, a notice): the engine may hold it back and send it
        with the commit, so its transaction must not read what it writes before `flush`."""
        ...

    async def flush(self) -> None:
        """Send what `defer` held back, before a read that needs it."""
        ...


class Transaction(Protocol):
    """What an engine's `_begin` gives: entered, a `Tx`; left without an error, committed."""

    async def __aenter__(self) -> Tx: ...

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None: ...


def run_now(coroutine: Coroutine[Any, Any, R]) -> R:
    """Run a store coroutine whose engine never waits to its end, here and now, without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: R = done.value
        return result
    coroutine.close()
    raise RuntimeError("a store call waited on an engine that runs synchronously")


class UniqueViolation(StoreError):
    """Raised by an engine adapter for a primary-key or unique clash."""


class ForeignKeyViolation(StoreError):
    """Raised by an engine adapter when a referenced record is missing."""


class BadValue(StoreCorrupt):
    """A stored value of a kind mcp-elicit never writes there, met while decoding it.

    The row codecs turn it into `UnreadableRow`, which names the row and the column; where no row is at
    hand it is raised as it is: a store error saying what is wrong, not a `TypeError` far from the store.
    """


class _Cells:
    """A fetched row whose values are read by column: a value of the wrong kind is an `UnreadableRow`.

    One corrupt row (a hand edit, another program, a disk fault SQLite could not see) then says which
    row and which column, instead of surfacing later as a `TypeError` in whatever used the record.
    """

    __slots__ = ("_names", "_record", "_row", "_row_id")

    def __init__(self, record: str, names: tuple[str, ...], row: Sequence[Any], *, row_id: str | None = None) -> None:
        """`row_id` names a row whose key is not its first column (by default, the first column's value)."""
        self._record = record
        self._names = names
        self._row = row
        self._row_id = row_id

    def text(self, index: int) -> str:
        value = self._row[index]
        if isinstance(value, str):
            return value
        raise self._unreadable(index, f"{shape(value)} where text belongs")

    def optional_text(self, index: int) -> str | None:
        return None if self._row[index] is None else self.text(index)

    def integer(self, index: int) -> int:
        value = self._row[index]
        if type(value) is int:
            return value
        raise self._unreadable(index, f"{shape(value)} where an integer belongs")

    def choice(self, index: int, kind: type[E]) -> E:
        value = self._row[index]
        try:
            return kind(value)
        except ValueError:
            allowed = ", ".join(str(member.value) for member in kind)
            raise self._unreadable(index, f"{_quoted(value)}, not one of: {allowed}") from None

    def read(self, index: int, decode: Callable[[Any], R]) -> R:
        try:
            return decode(self._row[index])
        except BadValue as error:
            raise self._unreadable(index, str(error)) from None

    def _unreadable(self, index: int, why: str) -> UnreadableRow:
        row_id = self._row[0] if self._row_id is None else self._row_id
        return UnreadableRow(self._record, row_id if isinstance(row_id, str | int) else None, self._names[index], why)


def _decoded(
    rows: Sequence[Sequence[Any]],
    decode: Callable[[Sequence[Any]], R],
    on_unreadable: Callable[[UnreadableRow], None] | None,
) -> list[R]:
    """Each row decoded; one that cannot be raises `UnreadableRow`, or with `on_unreadable` is handed there
    and left out, so that one corrupt row does not hide the others."""
    if on_unreadable is None:
        return [decode(row) for row in rows]
    decoded = []
    for row in rows:
        try:
            decoded.append(decode(row))
        except UnreadableRow as error:
            on_unreadable(error)
    return decoded


def _binding(caller: Caller) -> tuple[str, tuple[str, ...]]:
    if isinstance(caller, Principal):
        return BINDING, (caller.principal_id, caller.client_id)
    if isinstance(caller, BrowserUser):
        return " AND principal_id = %s", (caller.principal_id,)
    if isinstance(caller, Operator):
        return "", ()
    raise TypeError(f"a store caller is a Principal, a BrowserUser or an Operator, not {type(caller).__name__}")


_AUDIT_INSERT = (
    "INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at) VALUES "
)
_AUDIT_VALUES = "(%s, %s, %s, %s, %s, %s, %s, %s)"
_AUDITS_PER_STATEMENT = 500
"""Rows per audit INSERT: 4,000 parameters, far below either engine's limit."""


def _fenced(fence: Claim | None) -> tuple[str, tuple[object, ...]]:
    """The condition that makes a write count only while `fence`, a run lease, is still its caller's: the same
    holder and attempt (a lapsed holder's late write finds another holder, or its own next attempt)."""
    if fence is None:
        return "", ()
    return (
        " AND EXISTS (SELECT 1 FROM elicit_claims WHERE operation_id = %s AND name = %s AND holder = %s"
        " AND attempt = %s)",
        (fence.operation_id, fence.name, fence.holder, fence.attempt),
    )


def _unit_of(tx: Tx) -> Unit | None:
    """The unit under way in this context if `tx` is its transaction (not a read of its own)."""
    unit = UNIT.get()
    return unit if unit is not None and unit.tx is tx else None


def _committed(change: hooks.Committed) -> None:
    """Tell the installed hooks of `change` once the write under way commits."""
    observer = hooks.installed()
    if observer is not None:
        after_commit(functools.partial(observer.committed, change))


def _lost(kind: SubjectKind) -> None:
    observer = hooks.installed()
    if observer is not None:
        observer.conflict(kind)


def _write_audits(unit: Unit) -> None:
    """The unit's audit rows so far, deferred as few statements as the parameter limit allows."""
    rows, unit.audits = unit.audits, []
    for start in range(0, len(rows), _AUDITS_PER_STATEMENT):
        chunk = rows[start : start + _AUDITS_PER_STATEMENT]
        unit.tx.defer(_AUDIT_INSERT + ", ".join([_AUDIT_VALUES] * len(chunk)), [v for row in chunk for v in row])


class _Write:
    """A write transaction, or the unit's one when a store call runs inside `atomically`.

    What it moved is announced once, before it commits, and told to this process's listeners after.
    A plain class rather than a generator context manager: it sits on every write's hot path.
    """

    __slots__ = ("_core", "_token", "_transaction", "_unit")

    def __init__(self, core: SQLCore) -> None:
        self._core = core

    async def __aenter__(self) -> Tx:
        unit = UNIT.get()
        if unit is not None and unit.core is self._core:
            self._unit = None
            self._transaction = self._core._join(unit.tx)
            return await self._transaction.__aenter__()
        self._transaction = self._core._begin()
        tx = await self._transaction.__aenter__()
        self._unit = Unit(self._core, tx)
        self._token = UNIT.set(self._unit)
        return tx

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        unit = self._unit
        if unit is None:
            return await self._transaction.__aexit__(kind, error, trace)
        UNIT.reset(self._token)
        if kind is None:
            try:
                _write_audits(unit)
                if unit.notices and await self._core._subscribed(unit.tx):
                    for events, subjects, at in unit.notices:
                        self._core._write_outbox(unit.tx, events, subjects, at)
                if unit.moved:
                    self._core._announce(unit.tx, unit.moved)
            except BaseException as failure:
                # Rolled back, and the connection given back, whatever failed on the way to the commit.
                await self._transaction.__aexit__(type(failure), failure, failure.__traceback__)
                raise
        suppressed = await self._transaction.__aexit__(kind, error, trace)
        if kind is None:
            for record in unit.committed:
                record()
            for subject in unit.moved:
                self._core._tell_listeners(subject)
        return suppressed


class SQLCore(ABC):
    """The store's logic, once, as coroutines; an engine supplies transactions and value codecs.

    The `Store` a caller holds is `SQLStore`, which runs these on an engine that never waits; an engine
    with an async driver (PostgreSQL's) runs the very same coroutines on the event loop.
    """

    def __init__(self, clock: Clock, listeners: list[Callable[[str], None]]) -> None:
        self._clock = clock
        self._change_listeners = listeners
        self._subscriptions_seen: tuple[float, bool] = (-SUBSCRIPTIONS_RECHECK, False)

    # -- what an engine supplies -------------------------------------------------------------

    @abstractmethod
    def _begin(self) -> Transaction:
        """A transaction that takes the write lock (where the engine has one) and commits on success."""

    @abstractmethod
    def _begin_read(self) -> Transaction: ...

    @abstractmethod
    def _join(self, tx: Tx) -> Transaction:
        """The open transaction `tx` again, for a store call inside `atomically`: no commit, same error translation."""

    # -- transactions ---------------------------------------------------------------------------

    def _write(self) -> _Write:
        return _Write(self)

    def _read(self) -> Transaction:
        unit = UNIT.get()
        return self._begin_read() if unit is None or unit.core is not self else self._join(unit.tx)

    async def atomically(self, work: Callable[[], Awaitable[R]]) -> R:
        """Run `work`'s store calls (in this context) in one transaction: all of them commit, or none.

        Inside, every call reads what the earlier ones wrote. An exception from `work`, a store error
        included, rolls everything back. Other processes and change listeners hear of what moved once,
        with the commit.
        """
        async with self._write():
            return await work()

    def _moved(self, subject: str) -> None:
        """`subject` moved in the transaction under way: announce it with the commit (once however often)."""
        unit = UNIT.get()
        assert unit is not None, "a move is made inside a write transaction"
        if subject not in unit.moved:
            unit.moved.append(subject)

    def _tell_listeners(self, subject: str) -> None:
        for listener in list(self._change_listeners):
            listener(subject)

    @abstractmethod
    def _to_time(self, value: datetime) -> object: ...

    @abstractmethod
    def _from_time(self, value: Any) -> datetime:
        """The stored time, or `BadValue` for a value of another kind."""

    @abstractmethod
    def _to_json(self, value: JSONValue) -> object: ...

    @abstractmethod
    def _from_json(self, value: Any) -> JSONValue:
        """The stored JSON value, or `BadValue` for one that is not JSON."""

    @property
    @abstractmethod
    def display_url(self) -> str: ...

    async def verify_schema(self) -> None:
        async with self._read() as tx:
            row = await tx.one("SELECT max(version) FROM elicit_schema")
        self._check_schema(row[0] if row is not None else None)

    def _check_schema(self, found: object) -> None:
        if type(found) is not int:
            raise StoreCorrupt(f"{self.display_url} has an elicit_schema table without a version")
        if found > LATEST_VERSION:
            raise SchemaTooNew(found, LATEST_VERSION, self.display_url)
        if found < LATEST_VERSION:
            raise MigrationPending(found, LATEST_VERSION, self.display_url)

    _raw_cursor_keys = False
    """Whether a listing cursor may hold a sort key as stored (only a corrupt SQLite row has one)."""
    _for_update = ""
    _lock_row = ""
    """Appended to a SELECT that must lock the row it reads until the transaction ends (where the engine can)."""

    # -- row codecs ---------------------------------------------------------------------------

    def _optional_json(self, value: JSONValue) -> object:
        return None if value is None else self._to_json(value)

    def _decision_row(self, d: Decision) -> tuple[object, ...]:
        t = self._to_time
        return (
            d.elicitation_id, d.operation_id, d.key, d.principal_id, d.client_id, d.origin_method,
            d.origin_request_digest, d.mode.value, d.status.value, d.resume_policy.value, d.message,
            self._optional_json(d.requested_schema), d.url, self._to_json(list(d.sensitive_fields)),
            self._optional_json(d.content), d.completion_version, t(d.created_at), t(d.updated_at), t(d.expires_at),
        )  # fmt: skip

    def _decision(self, row: Sequence[Any]) -> Decision:
        c, t = _Cells("decision", DECISION_NAMES, row), self._from_time
        return Decision(
            elicitation_id=c.text(0), operation_id=c.text(1), key=c.text(2), principal_id=c.text(3),
            client_id=c.text(4), origin_method=c.text(5), origin_request_digest=c.text(6), mode=c.choice(7, Mode),
            status=c.choice(8, DecisionStatus), resume_policy=c.choice(9, ResumePolicy), message=c.text(10),
            requested_schema=c.read(11, self._optional_object), url=c.optional_text(12),
            sensitive_fields=c.read(13, self._names), content=c.read(14, self._optional_object),
            completion_version=c.integer(15), created_at=c.read(16, t), updated_at=c.read(17, t),
            expires_at=c.read(18, t),
        )  # fmt: skip

    def _operation_row(self, o: Operation) -> tuple[object, ...]:
        t = self._to_time
        return (
            o.operation_id, o.principal_id, o.client_id, o.method, o.target, o.request_digest, o.idempotency_key,
            o.status.value, self._optional_json(o.result), o.version, t(o.created_at), t(o.updated_at),
            t(o.expires_at),
        )  # fmt: skip

    def _operation(self, row: Sequence[Any]) -> Operation:
        c, t = _Cells("operation", OPERATION_NAMES, row), self._from_time
        return Operation(
            operation_id=c.text(0), principal_id=c.text(1), client_id=c.text(2), method=c.text(3), target=c.text(4),
            request_digest=c.text(5), idempotency_key=c.optional_text(6), status=c.choice(7, OperationStatus),
            result=c.read(8, self._optional_value), version=c.integer(9), created_at=c.read(10, t),
            updated_at=c.read(11, t), expires_at=c.read(12, t),
        )  # fmt: skip

    def _audit_entry(self, row: Sequence[Any]) -> AuditEntry:
        c = _Cells("audit row", AUDIT_NAMES, row)
        return AuditEntry(
            seq=c.integer(0), subject_kind=c.choice(1, SubjectKind), subject_id=c.text(2),
            from_status=c.optional_text(3), to_status=c.text(4), actor=c.text(5), reason=c.text(6),
            details=c.read(7, self._stored_object), at=c.read(8, self._from_time),
        )  # fmt: skip

    def _stored_object(self, value: Any) -> JSONObject:
        decoded = self._from_json(value)
        if not isinstance(decoded, dict):
            raise BadValue(f"{_json_shape(decoded)} where a JSON object belongs")
        return decoded

    def _optional_object(self, value: Any) -> JSONObject | None:
        return None if value is None else self._stored_object(value)

    def _optional_value(self, value: Any) -> JSONValue:
        return None if value is None else self._from_json(value)

    def _names(self, value: Any) -> tuple[str, ...]:
        decoded = self._from_json(value)
        if isinstance(decoded, list):
            names = tuple(name for name in decoded if isinstance(name, str))
            if len(names) == len(decoded):
                return names
        raise BadValue(f"{_json_shape(decoded)} where a JSON list of field names belongs")

    def _audit(
        self,
        tx: Tx,
        kind: SubjectKind,
        subject_id: str,
        from_status: str | None,
        to_status: str,
        actor: str,
        reason: str,
        details: JSONObject,
        at: datetime,
    ) -> None:
        row = (kind.value, subject_id, from_status, to_status, actor, redact_text(reason), self._to_json(details),
               self._to_time(at))  # fmt: skip
        unit = _unit_of(tx)
        if unit is not None:
            unit.audits.append(row)
        else:
            tx.defer(_AUDIT_INSERT + _AUDIT_VALUES, row)

    # -- operations ---------------------------------------------------------------------------

    async def create_operation(self, operation: Operation) -> Operation:
        if operation.status is not OperationStatus.OPEN:
            raise ValueError("an operation is created open")
        try:
            async with self._write() as tx:
                await tx.execute(
                    f"INSERT INTO elicit_operations ({OPERATION_COLUMNS}) VALUES ({_marks(13)})",
                    self._operation_row(operation),
                )
                self._audit_created(tx, operation)
        except UniqueViolation:
            raise AlreadyExists(f"operation {operation.operation_id} already exists") from None
        return operation

    def _audit_created(self, tx: Tx, operation: Operation) -> None:
        self._audit(
            tx, SubjectKind.OPERATION, operation.operation_id, None, operation.status, operation.principal.actor,
            "created",
            {"method": operation.method, "target": operation.target, "request_digest": operation.request_digest},
            operation.created_at,
        )  # fmt: skip

    async def _select_operation(self, tx: Tx, operation_id: str, caller: Caller) -> Operation | None:
        where, params = _binding(caller)
        row = await tx.one(
            f"SELECT {OPERATION_COLUMNS} FROM elicit_operations WHERE operation_id = %s{where}",
            (operation_id, *params),
        )
        return None if row is None else self._operation(row)

    async def get_operation(self, operation_id: str, caller: Caller) -> Operation:
        async with self._read() as tx:
            operation = await self._select_operation(tx, operation_id, caller)
        if operation is None:
            raise NotFound(f"no operation {operation_id}")
        return operation

    async def get_operation_records(self, operation_id: str, caller: Caller) -> OperationRecords:
        # One statement: the operation's row repeated beside each of its decisions (or beside NULLs).
        where, params = _binding(caller)
        async with self._read() as tx:
            rows = await tx.all(
                f"SELECT {_OPERATION_OF_JOIN}, {_DECISION_OF_JOIN} FROM elicit_operations o"
                " LEFT JOIN elicit_decisions d ON d.operation_id = o.operation_id"
                " AND d.principal_id = o.principal_id AND d.client_id = o.client_id"
                f" WHERE o.operation_id = %s{where.replace(' AND ', ' AND o.')}"
                " ORDER BY d.created_at DESC, d.elicitation_id LIMIT %s",
                (operation_id, *params, OPERATION_DECISIONS_READ),
            )
        if not rows:
            raise NotFound(f"no operation {operation_id}")
        split = len(OPERATION_NAMES)
        decisions = [self._decision(row[split:]) for row in rows if row[split] is not None]
        return OperationRecords(self._operation(rows[0][:split]), decisions)

    async def begin_operation(self, candidate: Operation, *, replay_since: datetime | None = None) -> OperationStart:
        if candidate.status is not OperationStatus.OPEN:
            raise ValueError("an operation is created open")
        now = self._clock()
        async with self._write() as tx:
            if candidate.idempotency_key is not None:
                await self._bind_key(tx, candidate, now)
            if await tx.execute(*self._first_of_call(candidate, replay_since)) == 1:
                self._audit_created(tx, candidate)
                return OperationStart(candidate, created=True)
            return await self._begin_carefully(tx, candidate, now, replay_since)

    async def _begin_carefully(
        self, tx: Tx, candidate: Operation, now: datetime, replay_since: datetime | None
    ) -> OperationStart:
        """What stood in the first statement's way: an open operation to attach to, a result to replay, or a
        lapsed operation to expire before inserting."""
        for _ in range(_CREATE_ATTEMPTS):
            found = await self._newest_of_call(tx, candidate)
            if found is not None and found.status is OperationStatus.OPEN:
                if now < found.expires_at:
                    return OperationStart(found, created=False)
                await self._expire_operations(
                    tx, [(found.operation_id, found.version)], now, "overdue; call made again"
                )
            elif (
                found is not None
                and found.status is OperationStatus.COMPLETED
                and replay_since is not None
                and found.updated_at >= replay_since
            ):
                return OperationStart(found, created=False)
            if candidate.idempotency_key is not None:
                await self._expire_lapsed_of_key(tx, candidate, now)
            inserted = await tx.execute(
                f"INSERT INTO elicit_operations ({OPERATION_COLUMNS}) VALUES ({_marks(13)}) ON CONFLICT DO NOTHING",
                self._operation_row(candidate),
            )
            if inserted == 1:
                self._audit_created(tx, candidate)
                return OperationStart(candidate, created=True)
        raise StoreError(f"operation for {candidate.method} {candidate.target} kept changing; not started")

    def _first_of_call(self, candidate: Operation, replay_since: datetime | None) -> tuple[str, tuple[object, ...]]:
        """The operation inserted in one statement when nothing of the call stands in its way: no open operation
        (lapsed or not) and no result to replay. Anything else is for the careful path to sort out."""
        where, params = self._of_call(candidate)
        replayable, replay_params = (
            ("", ()) if replay_since is None else (" OR (status = 'completed' AND updated_at >= %s)", (replay_since,))
        )
        return (
            f"INSERT INTO elicit_operations ({OPERATION_COLUMNS}) SELECT {_marks(13)}"
            f" WHERE NOT EXISTS (SELECT 1 FROM elicit_operations WHERE {where}"
            f" AND (status = 'open'{replayable})) ON CONFLICT DO NOTHING",
            (*self._operation_row(candidate), *params, *(self._to_time(t) for t in replay_params)),
        )

    def _of_call(self, candidate: Operation) -> tuple[str, tuple[str, ...]]:
        """Which operations are the call's: a keyed call is its key *and* the request the key is bound to now,
        so operations a key named under an earlier, lapsed binding belong to another request."""
        key = candidate.idempotency_key
        where = "request_digest = %s AND method = %s AND target = %s" + BINDING
        params: tuple[str, ...] = (candidate.request_digest, candidate.method, candidate.target,
                                   candidate.principal_id, candidate.client_id)  # fmt: skip
        if key is None:
            return "idempotency_key IS NULL AND " + where, params
        return "idempotency_key = %s AND " + where, (key, *params)

    async def _newest_of_call(self, tx: Tx, candidate: Operation) -> Operation | None:
        """The call's newest operation: its open one if there is one (never older than a finished one);
        operations of a key's earlier, lapsed binding are never attached to nor replayed (`_of_call`)."""
        where, params = self._of_call(candidate)
        row = await tx.one(
            f"SELECT {OPERATION_COLUMNS} FROM elicit_operations WHERE {where}"
            " ORDER BY CASE WHEN status = 'open' THEN 0 ELSE 1 END, created_at DESC LIMIT 1",
            params,
        )
        return None if row is None else self._operation(row)

    async def _expire_lapsed_of_key(self, tx: Tx, candidate: Operation, now: datetime) -> None:
        """An overdue open operation of the key's earlier binding would hold the key's unique index."""
        rows = await tx.all(
            f"SELECT operation_id, version FROM elicit_operations WHERE {KEY_OF_CALLER}"
            " AND status = 'open' AND expires_at <= %s",
            (candidate.principal_id, candidate.client_id, candidate.idempotency_key, self._to_time(now)),
        )
        if rows:
            await self._expire_operations(
                tx, [(row[0], row[1]) for row in rows], now, "overdue; its key was bound anew"
            )

    async def _bind_key(self, tx: Tx, candidate: Operation, now: datetime) -> None:
        """Bind the caller's key to this request, or check that it names this request; first binder wins."""
        key = candidate.idempotency_key
        assert key is not None
        of_caller = (candidate.principal_id, candidate.client_id, key)
        request = (candidate.method, candidate.target, candidate.request_digest)
        await tx.execute(
            f"INSERT INTO elicit_idempotency_keys ({KEY_COLUMNS}, created_at) VALUES ({_marks(8)})"
            " ON CONFLICT (principal_id, client_id, idempotency_key) DO UPDATE SET method = excluded.method,"
            " target = excluded.target, request_digest = excluded.request_digest, created_at = excluded.created_at,"
            " expires_at = excluded.expires_at WHERE elicit_idempotency_keys.expires_at <= %s",
            (*of_caller, *request, self._to_time(candidate.expires_at), self._to_time(now), self._to_time(now)),
        )  # fmt: skip
        row = await tx.one(
            f"SELECT method, target, request_digest, expires_at FROM elicit_idempotency_keys WHERE {KEY_OF_CALLER}",
            of_caller,
        )
        if row is None:
            raise StoreError(f"idempotency key {key!r} vanished while it was being bound")
        if tuple(row[:2]) != request[:2]:
            raise IdempotencyKeyConflict(key, f"another {_kind(row[0])} ({row[1]})")
        if row[2] != request[2]:
            raise IdempotencyKeyConflict(key, f"the same {_kind(row[0])} with other arguments")
        if self._from_time(row[3]) < candidate.expires_at:
            await tx.execute(
                f"UPDATE elicit_idempotency_keys SET expires_at = %s WHERE {KEY_OF_CALLER}",
                (self._to_time(candidate.expires_at), *of_caller),
            )

    async def find_operations(
        self,
        caller: Principal,
        *,
        method: str,
        target: str,
        request_digest: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[Operation]:
        if (request_digest is None) == (idempotency_key is None):
            raise ValueError("find operations by request_digest or by idempotency_key, exactly one")
        column, value = (
            ("idempotency_key", idempotency_key) if idempotency_key is not None else ("request_digest", request_digest)
        )
        where, params = _binding(caller)
        async with self._read() as tx:
            rows = await tx.all(
                f"SELECT {OPERATION_COLUMNS} FROM elicit_operations"
                f" WHERE method = %s AND target = %s AND {column} = %s{where} ORDER BY created_at DESC",
                (method, target, value, *params),
            )
        return [self._operation(row) for row in rows]

    async def finish_operation(
        self,
        snapshot: Operation,
        to: OperationStatus,
        *,
        caller: Caller,
        result: JSONValue = None,
        reason: str = "",
        fence: Claim | None = None,
    ) -> Operation:
        finish = functools.partial(
            self._finish_operation, snapshot, to, caller=caller, result=result, reason=reason, fence=fence
        )
        observer = hooks.installed()
        return await (finish() if observer is None else observer.finishing(snapshot, to, finish))

    async def _finish_operation(
        self,
        snapshot: Operation,
        to: OperationStatus,
        *,
        caller: Caller,
        result: JSONValue,
        reason: str,
        fence: Claim | None,
    ) -> Operation:
        if to is OperationStatus.EXPIRED:
            raise ValueError("expiry is decided by the clock: it happens in sweeps and on late signals")
        check_operation_transition(snapshot.status, to)
        now = self._clock()
        version = snapshot.version + 1
        where, params = _binding(caller)
        fenced, fence_params = _fenced(fence)
        failure: StoreError
        finished: Operation | None = None
        async with self._write() as tx:
            changed = await tx.execute(
                "UPDATE elicit_operations SET status = %s, result = %s, version = %s, updated_at = %s"
                f" WHERE operation_id = %s AND status = %s AND version = %s AND expires_at > %s{where}{fenced}",
                (to.value, self._optional_json(result), version, self._to_time(now), snapshot.operation_id,
                 snapshot.status.value, snapshot.version, self._to_time(now), *params, *fence_params),
            )  # fmt: skip
            if changed == 1:
                self._audit(
                    tx, SubjectKind.OPERATION, snapshot.operation_id, snapshot.status, to, caller.actor, reason,
                    {"version": version}, now,
                )  # fmt: skip
                self._moved(snapshot.operation_id)
                finished = replace(snapshot, status=to, result=result, version=version, updated_at=now)
            elif (current := await self._select_operation(tx, snapshot.operation_id, caller)) is None:
                raise NotFound(f"no operation {snapshot.operation_id}")
            elif current.status is OperationStatus.OPEN and now >= current.expires_at:
                await self._expire_operations(tx, [(current.operation_id, current.version)], now, f"late {to}")
                expired = replace(current, status=OperationStatus.EXPIRED, version=current.version + 1, updated_at=now)
                failure = OperationExpired(expired, to)
            elif current.status is OperationStatus.EXPIRED:
                failure = OperationExpired(current, to)
            elif fence is not None and (current.status, current.version) == (snapshot.status, snapshot.version):
                failure = LeaseLost(snapshot.operation_id, fence.holder, fence.attempt)
            else:
                failure = OperationConflict(current, to)
                _lost(SubjectKind.OPERATION)
        if finished is None:
            raise failure
        return finished

    async def _expire_operations(self, tx: Tx, rows: Sequence[tuple[str, int]], now: datetime, reason: str) -> None:
        """Expire these open operations by compare-and-set; only those this transaction moved are audited."""
        stamp = self._to_time(now)
        moved = [
            (operation_id, "open", version + 1)
            for operation_id, version in rows
            if await tx.execute(
                "UPDATE elicit_operations SET status = 'expired', version = version + 1, updated_at = %s"
                " WHERE operation_id = %s AND status = 'open' AND version = %s",
                (stamp, operation_id, version),
            )
        ]
        await self._audit_many(tx, SubjectKind.OPERATION, moved, "expired", reason, now)
        if moved:
            _committed(hooks.Expired(SubjectKind.OPERATION, len(moved)))
        for operation_id, _, _ in moved:
            self._moved(operation_id)

    async def _audit_many(
        self,
        tx: Tx,
        kind: SubjectKind,
        rows: Sequence[tuple[str, str, int]],
        to_status: str,
        reason: str,
        at: datetime,
    ) -> None:
        if not rows:
            return
        stamp = self._to_time(at)
        audits = [
            (kind.value, subject_id, from_status, to_status, CLOCK.actor, reason, self._to_json({"version": version}),
             stamp)
            for subject_id, from_status, version in rows
        ]  # fmt: skip
        unit = _unit_of(tx)
        if unit is not None:
            unit.audits.extend(audits)
        else:
            await tx.executemany(_AUDIT_INSERT + _AUDIT_VALUES, audits)

    # -- decisions ----------------------------------------------------------------------------

    async def create_decision(self, decision: Decision) -> Decision:
        observer = hooks.installed()
        if observer is None:
            return await self._create_decision(decision)
        created = await observer.creating(decision, functools.partial(self._create_decision, decision))
        _committed(hooks.DecisionCreated(created))
        return created

    async def _create_decision(self, decision: Decision) -> Decision:
        if decision.status is not DecisionStatus.REQUESTED or decision.completion_version != 0:
            raise ValueError("a decision is created requested, at version 0")
        details: JSONObject = {
            "mode": decision.mode.value,
            "operation_id": decision.operation_id,
            "key": decision.key,
            "expires_at": decision.expires_at.isoformat(),
        }
        if decision.url is not None:
            details["url"] = redact_url(decision.url)
        try:
            async with self._write() as tx:
                await tx.execute(
                    f"INSERT INTO elicit_decisions ({DECISION_COLUMNS}) VALUES ({_marks(19)})",
                    self._decision_row(decision),
                )
                self._audit(
                    tx, SubjectKind.DECISION, decision.elicitation_id, None, decision.status,
                    decision.principal.actor, "requested", details, decision.created_at,
                )  # fmt: skip
                self._outbox(tx, _ASKED, [decision.elicitation_id], decision.created_at)
        except UniqueViolation as clash:
            if "operation_key" in str(clash) or "elicit_decisions.key" in str(clash):
                raise AlreadyExists(
                    f"operation {decision.operation_id} already has a question under key {decision.key!r}"
                ) from None
            raise AlreadyExists(f"decision {decision.elicitation_id} already exists") from None
        except ForeignKeyViolation:
            raise NotFound(f"no operation {decision.operation_id} for decision {decision.elicitation_id}") from None
        return decision

    async def _select_decision(self, tx: Tx, elicitation_id: str, caller: Caller) -> Decision | None:
        where, params = _binding(caller)
        row = await tx.one(
            f"SELECT {DECISION_COLUMNS} FROM elicit_decisions WHERE elicitation_id = %s{where}",
            (elicitation_id, *params),
        )
        return None if row is None else self._decision(row)

    async def get_decision(self, elicitation_id: str, caller: Caller) -> Decision:
        async with self._read() as tx:
            decision = await self._select_decision(tx, elicitation_id, caller)
        if decision is None:
            raise NotFound(f"no decision {elicitation_id}")
        return decision

    async def list_decisions(
        self,
        caller: Caller,
        *,
        status: DecisionStatus | None = None,
        principal_id: str | None = None,
        operation_id: str | None = None,
        expiring_before: datetime | None = None,
        id_prefix: str | None = None,
        limit: int = 100,
        on_unreadable: Callable[[UnreadableRow], None] | None = None,
    ) -> list[Decision]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where = DecisionFilter(status, principal_id, operation_id, expiring_before, id_prefix)
        return _decoded(await self._decision_rows(caller, where, None, limit), self._decision, on_unreadable)

    async def decision_page(
        self, caller: Caller, where: DecisionFilter | None = None, *, after: str | None = None, limit: int = 100
    ) -> DecisionPage:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        rows = await self._decision_rows(caller, where or DecisionFilter(), after, limit + 1)
        unreadable: list[UnreadableRow] = []
        decisions = _decoded(rows[:limit], self._decision, unreadable.append)
        last = rows[limit - 1] if len(rows) > limit else None
        return DecisionPage(decisions, unreadable, None if last is None else _cursor(last[_CREATED], last[0]))

    async def count_decisions(
        self, caller: Caller, where: DecisionFilter | None = None, *, after: str | None = None
    ) -> int:
        found = self._decision_filter(caller, where or DecisionFilter(), after)
        if found is None:
            return 0
        clauses, values = found
        async with self._read() as tx:
            row = await tx.one(f"SELECT count(*) FROM elicit_decisions WHERE 1 = 1{clauses}", values)
        return int(row[0])

    async def _decision_rows(self, caller: Caller, where: DecisionFilter, after: str | None, limit: int) -> list[Any]:
        found = self._decision_filter(caller, where, after)
        if found is None:
            return []
        clauses, values = found
        async with self._read() as tx:
            # The order is the elicit_decisions_newest index's, so a page reads its own rows and no others.
            return await tx.all(
                f"SELECT {DECISION_COLUMNS} FROM elicit_decisions WHERE 1 = 1{clauses}"
                " ORDER BY created_at DESC, elicitation_id LIMIT %s",
                (*values, limit),
            )

    def _decision_filter(
        self, caller: Caller, where: DecisionFilter, after: str | None
    ) -> tuple[str, list[object]] | None:
        """The clauses to append to `WHERE 1 = 1`, and their values; `None` when no decision can match."""
        if where.id_prefix is not None and not _ID_PREFIX.fullmatch(where.id_prefix):
            return None
        binding, params = _binding(caller)
        clauses: list[str] = [binding] if binding else []
        values: list[object] = list(params)
        for clause, value in (
            (" AND status = %s", None if where.status is None else DecisionStatus(where.status).value),
            (" AND principal_id = %s", where.principal_id),
            (" AND operation_id = %s", where.operation_id),
            (" AND elicitation_id LIKE %s", where.id_prefix and where.id_prefix.lower() + "%"),
            (
                f" AND status IN {WAITING_SQL} AND expires_at < %s",
                where.expiring_before and self._to_time(where.expiring_before),
            ),
        ):
            if value is not None:
                clauses.append(clause)
                values.append(value)
        if after is not None:
            created, elicitation_id = _parse_cursor(after)
            if not self._raw_cursor_keys and (type(created) is not int or not isinstance(elicitation_id, str)):
                raise ValueError(f"{_quoted(after)} is not a cursor of a decision listing")
            if type(created) is int:
                try:
                    created = self._to_time(_EPOCH + timedelta(microseconds=created))
                except OverflowError:
                    raise ValueError(f"{_quoted(after)} is not a cursor of a decision listing") from None
            # The first condition is the index's range; the second drops the rows of the cursor's own instant
            # up to and including the cursor's row.
            clauses.append(" AND created_at <= %s AND (created_at < %s OR elicitation_id > %s)")
            values.extend((created, created, elicitation_id))
        return "".join(clauses), values

    async def transition(
        self,
        snapshot: Decision,
        to: DecisionStatus,
        *,
        caller: Caller,
        reason: str = "",
        content: JSONObject | None = None,
        expires_at: datetime | None = None,
    ) -> Decision:
        move = functools.partial(
            self._transition, snapshot, to, caller=caller, reason=reason, content=content, expires_at=expires_at
        )
        observer = hooks.installed()
        if observer is None:
            return await move()
        moved = await observer.transitioning(snapshot, to, move)
        if moved.is_terminal:
            _committed(hooks.DecisionEnded(moved))
        return moved

    async def _transition(
        self,
        snapshot: Decision,
        to: DecisionStatus,
        *,
        caller: Caller,
        reason: str,
        content: JSONObject | None,
        expires_at: datetime | None,
    ) -> Decision:
        if to is DecisionStatus.EXPIRED:
            raise ValueError("expiry is decided by the clock: it happens in sweeps and on late signals")
        check_decision_transition(snapshot.mode, snapshot.status, to)
        if (content is not None) != (to is DecisionStatus.ACCEPTED):
            raise ValueError("content goes with an accepted form decision, and only there")
        if expires_at is not None and to in TERMINAL_DECISION_STATUSES:
            raise ValueError(f"a TTL is for a waiting state, and {to} is terminal")
        now = self._clock()
        version = snapshot.completion_version + 1
        new_expiry = snapshot.expires_at if expires_at is None else expires_at
        new_content = snapshot.content if content is None else content
        details: JSONObject = {"version": version}
        if content is not None:
            details["content"] = redact_content(content, snapshot.sensitive_fields)
        if expires_at is not None:
            details["expires_at"] = expires_at.isoformat()
        where, params = _binding(caller)
        stamp = self._to_time(now)
        failure: StoreError
        sql = (
            "UPDATE elicit_decisions SET status = %s, completion_version = %s, content = %s, updated_at = %s,"
            " expires_at = %s WHERE elicitation_id = %s AND status = %s AND completion_version = %s"
            f" AND expires_at > %s{where}"
        )
        values = (
            to.value, version, self._optional_json(new_content), stamp, self._to_time(new_expiry),
            snapshot.elicitation_id, snapshot.status.value, snapshot.completion_version, stamp, *params,
        )  # fmt: skip
        async with self._write() as tx:
            changed = await tx.execute(sql, values)
            if changed == 1:
                self._audit(
                    tx, SubjectKind.DECISION, snapshot.elicitation_id, snapshot.status, to, caller.actor, reason,
                    details, now,
                )  # fmt: skip
                if to in TERMINAL_DECISION_STATUSES:
                    self._outbox(tx, _ENDED, [snapshot.elicitation_id], now)
                self._moved(snapshot.elicitation_id)
                moved = replace(
                    snapshot, status=to, completion_version=version, content=new_content, updated_at=now,
                    expires_at=new_expiry,
                )  # fmt: skip
            else:
                moved = None
                failure = await self._why_not(tx, snapshot, to, caller, now)
        if moved is None:
            raise failure
        return moved

    def _announce(self, tx: Tx, subjects: Sequence[str]) -> None:  # noqa: B027 (engines that cannot, need not)
        """Tell other processes, inside the changes' transaction, that `subjects` moved."""

    async def _why_not(
        self, tx: Tx, snapshot: Decision, to: DecisionStatus, caller: Caller, now: datetime
    ) -> StoreError:
        """The error for a lost compare-and-set, expiring an overdue record on the way."""
        failure: StoreError
        current = await self._select_decision(tx, snapshot.elicitation_id, caller)
        if current is None:
            raise NotFound(f"no decision {snapshot.elicitation_id}")
        if current.is_overdue(now):
            await self._expire_decisions(tx, [(current.elicitation_id, current.status, current.completion_version)],
                                   now, f"late {to} after the TTL")  # fmt: skip
            expired = replace(
                current, status=DecisionStatus.EXPIRED, completion_version=current.completion_version + 1,
                updated_at=now,
            )  # fmt: skip
            failure = DecisionExpired(expired, to)
        elif current.status is DecisionStatus.EXPIRED:
            failure = DecisionExpired(current, to)
        else:
            failure = DecisionConflict(current, to)
            _lost(SubjectKind.DECISION)
        return failure

    async def expire_if_overdue(self, elicitation_id: str, caller: Caller, *, reason: str) -> Decision:
        now = self._clock()
        async with self._write() as tx:
            current = await self._select_decision(tx, elicitation_id, caller)
            if current is None:
                raise NotFound(f"no decision {elicitation_id}")
            if current.is_overdue(now):
                await self._expire_decisions(
                    tx, [(elicitation_id, current.status, current.completion_version)], now, reason
                )
                current = replace(
                    current, status=DecisionStatus.EXPIRED, completion_version=current.completion_version + 1,
                    updated_at=now,
                )  # fmt: skip
        return current

    async def note(self, decision: Decision, *, actor: Actor, reason: str) -> None:
        async with self._write() as tx:
            self._audit(
                tx, SubjectKind.DECISION, decision.elicitation_id, decision.status, decision.status, actor.actor,
                reason, {"version": decision.completion_version}, self._clock(),
            )  # fmt: skip

    async def _expire_decisions(self, tx: Tx, rows: Sequence[tuple[str, str, int]], now: datetime, reason: str) -> None:
        """Expire these decisions by compare-and-set; only those this transaction moved are audited."""
        stamp = self._to_time(now)
        moved = [
            (elicitation_id, status, version + 1)
            for elicitation_id, status, version in rows
            if await tx.execute(
                "UPDATE elicit_decisions SET status = 'expired', completion_version = completion_version + 1,"
                " updated_at = %s WHERE elicitation_id = %s AND status = %s AND completion_version = %s",
                (stamp, elicitation_id, status, version),
            )
        ]
        await self._audit_many(tx, SubjectKind.DECISION, moved, "expired", reason, now)
        if moved:
            _committed(hooks.Expired(SubjectKind.DECISION, len(moved)))
            self._outbox(tx, _ENDED, [row[0] for row in moved], now)
        for elicitation_id, _, _ in moved:
            self._moved(elicitation_id)

    async def sweep_expired(self) -> SweepResult:
        observer = hooks.installed()
        return await (self._sweep_expired() if observer is None else observer.sweeping(self._sweep_expired))

    async def _sweep_expired(self) -> SweepResult:
        counts = [await self._sweep(sweepable) for sweepable in (DECISIONS, OPERATIONS)]
        async with self._write() as tx:
            stamp = self._to_time(self._clock())
            tokens = await tx.execute("DELETE FROM elicit_tokens WHERE expires_at <= %s", (stamp,))
            keys = await tx.execute("DELETE FROM elicit_idempotency_keys WHERE expires_at <= %s", (stamp,))
        return SweepResult(decisions=counts[0], operations=counts[1], tokens=tokens, keys=keys)

    async def _sweep(self, sweepable: Sweepable) -> int:
        """Expire the table's overdue rows in batches, announcing each so that calls waiting on one wake now.

        An expired operation's claims go with it: nothing can take or renew a claim of an operation that is
        no longer open. A batch that finds another sweep under way (`_sweep_turn`) leaves the rest to it.
        """
        total = 0
        while True:
            async with self._write() as tx:
                if not await self._sweep_turn(tx):
                    return total
                now = self._clock()
                expired = await self._expire_due(tx, sweepable, now, SWEEP_BATCH)
                if expired:
                    _committed(hooks.Expired(sweepable.kind, len(expired)))
                if expired and sweepable is DECISIONS:
                    self._outbox(tx, _ENDED, expired, now)
                if expired and sweepable is OPERATIONS:
                    await tx.execute(
                        f"DELETE FROM elicit_claims WHERE operation_id IN ({_marks(len(expired))})", expired
                    )
                for subject in expired:
                    self._moved(subject)
            total += len(expired)
            if len(expired) < SWEEP_BATCH:
                return total

    async def _sweep_turn(self, tx: Tx) -> bool:
        """Whether this transaction may sweep now; an engine whose write lock does not serialize sweeps says
        no while another one sweeps."""
        return True

    @abstractmethod
    async def _expire_due(self, tx: Tx, sweepable: Sweepable, now: datetime, batch: int) -> list[str]:
        """Expire up to `batch` overdue rows with one audit row each, set-based; return their ids."""

    # -- audit ---------------------------------------------------------------------------------

    async def audit_trail(
        self, subject_id: str, caller: Caller, *, on_unreadable: Callable[[UnreadableRow], None] | None = None
    ) -> list[AuditEntry]:
        where, params = _binding(caller)
        async with self._read() as tx:
            visible = await tx.one(
                f"SELECT 1 FROM elicit_decisions WHERE elicitation_id = %s{where}"
                f" UNION ALL SELECT 1 FROM elicit_operations WHERE operation_id = %s{where}",
                (subject_id, *params, subject_id, *params),
            )
            if visible is None:
                raise NotFound(f"no decision or operation {subject_id}")
            unit = _unit_of(tx)
            if unit is not None:
                _write_audits(unit)
            await tx.flush()
            rows = await tx.all(
                f"SELECT {AUDIT_COLUMNS} FROM elicit_audit WHERE subject_id = %s ORDER BY seq", (subject_id,)
            )
        return _decoded(rows, self._audit_entry, on_unreadable)

    # -- journal and token ledger ---------------------------------------------------------------

    async def journal_record(
        self, operation_id: str, name: str, value: JSONValue, *, caller: Principal, fence: Claim | None = None
    ) -> JournalEntry:
        now = self._clock()
        fenced, fence_params = _fenced(fence)
        async with self._write() as tx:
            inserted = await tx.execute(
                "INSERT INTO elicit_journal (operation_id, name, value, recorded_at) SELECT %s, %s, %s, %s"
                f" WHERE EXISTS (SELECT 1 FROM elicit_operations WHERE operation_id = %s{BINDING}){fenced}"
                " ON CONFLICT (operation_id, name) DO NOTHING",
                (operation_id, name, self._to_json(value), self._to_time(now), operation_id, caller.principal_id,
                 caller.client_id, *fence_params),
            )  # fmt: skip
            if inserted == 1:
                self._moved(operation_id)
                entry: JournalEntry | None = JournalEntry(name=name, value=value, recorded_at=now)
            else:
                entry = await self._select_journal(tx, operation_id, name, caller)
                if fence is not None and entry is not None:
                    raise AlreadyExists(f"step {name!r} of operation {operation_id} is recorded already")
                if fence is not None:
                    raise LeaseLost(operation_id, fence.holder, fence.attempt)
        if entry is None:
            raise NotFound(f"no operation {operation_id}")
        return entry

    async def journal(self, operation_id: str, *, caller: Principal) -> list[JournalEntry]:
        async with self._read() as tx:
            rows = await tx.all(
                "SELECT j.name, j.value, j.recorded_at FROM elicit_journal j JOIN elicit_operations o"
                " USING (operation_id) WHERE j.operation_id = %s AND o.principal_id = %s AND o.client_id = %s",
                (operation_id, caller.principal_id, caller.client_id),
            )
        entries = []
        for row in rows:
            c = _Cells("journal entry", ("name", *_JOURNAL_NAMES), row, row_id=f"of operation {operation_id}")
            entries.append(JournalEntry(c.text(0), c.read(1, self._from_json), c.read(2, self._from_time)))
        return entries

    async def _select_journal(self, tx: Tx, operation_id: str, name: str, caller: Principal) -> JournalEntry | None:
        row = await tx.one(
            "SELECT j.value, j.recorded_at FROM elicit_journal j JOIN elicit_operations o USING (operation_id)"
            " WHERE j.operation_id = %s AND j.name = %s AND o.principal_id = %s AND o.client_id = %s",
            (operation_id, name, caller.principal_id, caller.client_id),
        )
        if row is None:
            return None
        c = _Cells("journal entry", _JOURNAL_NAMES, row, row_id=f"{name!r} of operation {operation_id}")
        return JournalEntry(name, c.read(0, self._from_json), c.read(1, self._from_time))

    async def journal_get(self, operation_id: str, name: str, *, caller: Principal) -> JournalEntry | None:
        async with self._read() as tx:
            return await self._select_journal(tx, operation_id, name, caller)

    # -- claims -------------------------------------------------------------------------------

    async def claim(
        self,
        operation_id: str,
        name: str,
        *,
        holder: str,
        lease_until: datetime,
        caller: Principal,
        succeeding: str | None = None,
    ) -> Claim:
        now = self._clock()
        mine = {holder} if succeeding is None else {holder, succeeding}
        stamp = self._to_time(now)
        async with self._write() as tx:
            # One statement inserts the claim or locks the one there, for an open operation of the caller's
            # only: no gap for others' claims and releases, and no lock on the operation's row (whose journal
            # and end other transactions write meanwhile).
            row = await tx.one(
                "INSERT INTO elicit_claims (operation_id, name, holder, attempt, claimed_at, lease_until)"
                " SELECT %s, %s, %s, 1, %s, %s WHERE EXISTS (SELECT 1 FROM elicit_operations"
                f" WHERE operation_id = %s AND status = 'open'{BINDING})"
                " ON CONFLICT (operation_id, name) DO UPDATE SET holder = elicit_claims.holder"
                " RETURNING holder, attempt, claimed_at, lease_until",
                (operation_id, name, holder, stamp, self._to_time(lease_until), operation_id, caller.principal_id,
                 caller.client_id),
            )  # fmt: skip
            if row is None:
                operation = await self._select_operation(tx, operation_id, caller)
                if operation is None:
                    raise NotFound(f"no operation {operation_id}")
                raise OperationConflict(operation, f"claim {name}")
            current = Claim(operation_id, name, row[0], row[1], self._from_time(row[3]))
            if current.holder == holder and row[1] == 1 and self._from_time(row[2]) == now:
                return current
            if current.holder not in mine and current.lease_until > now:
                return current
            taken_over = current.holder not in mine
            attempt = current.attempt + 1 if taken_over else current.attempt
            await tx.execute(
                "UPDATE elicit_claims SET holder = %s, attempt = %s, claimed_at = %s, lease_until = %s"
                " WHERE operation_id = %s AND name = %s",
                (holder, attempt, stamp, self._to_time(lease_until), operation_id, name),
            )
            if taken_over:
                self._audit(
                    tx, SubjectKind.OPERATION, operation_id, OperationStatus.OPEN, OperationStatus.OPEN, caller.actor,
                    f"claim on {name} lapsed at {current.lease_until.isoformat()}; taken over",
                    {"claim": name, "attempt": attempt}, now,
                )  # fmt: skip
        return Claim(operation_id, name, holder, attempt, lease_until)

    async def claims(self, operation_id: str, *, caller: Principal) -> list[Claim]:
        async with self._read() as tx:
            rows = await tx.all(
                "SELECT c.name, c.holder, c.attempt, c.lease_until FROM elicit_claims c"
                " JOIN elicit_operations o USING (operation_id)"
                " WHERE c.operation_id = %s AND o.principal_id = %s AND o.client_id = %s ORDER BY c.name",
                (operation_id, caller.principal_id, caller.client_id),
            )
        return [Claim(operation_id, row[0], row[1], row[2], self._from_time(row[3])) for row in rows]

    async def renew_claim(
        self, operation_id: str, name: str, *, holder: str, lease_until: datetime, caller: Principal
    ) -> bool:
        async with self._write() as tx:
            renewed = await tx.execute(
                "UPDATE elicit_claims SET lease_until = %s WHERE operation_id = %s AND name = %s AND holder = %s"
                f" AND EXISTS (SELECT 1 FROM elicit_operations WHERE operation_id = %s{BINDING})",
                (self._to_time(lease_until), operation_id, name, holder, operation_id, caller.principal_id,
                 caller.client_id),
            )  # fmt: skip
        return renewed == 1

    async def release_claim(
        self, operation_id: str, name: str, *, caller: Principal, holder: str | None = None
    ) -> None:
        whose, params = ("", ()) if holder is None else (" AND holder = %s", (holder,))
        sql = (
            f"DELETE FROM elicit_claims WHERE operation_id = %s AND name = %s{whose}"
            f" AND EXISTS (SELECT 1 FROM elicit_operations WHERE operation_id = %s{BINDING})"
        )
        values = (operation_id, name, *params, operation_id, caller.principal_id, caller.client_id)
        async with self._write() as tx:
            if await tx.execute(sql, values):
                self._moved(operation_id)

    async def consume_token(self, token_id: str, *, expires_at: datetime) -> Consumption:
        async with self._write() as tx:
            inserted = await tx.execute(
                "INSERT INTO elicit_tokens (token_id, expires_at) VALUES (%s, %s) ON CONFLICT (token_id) DO NOTHING",
                (token_id, self._to_time(expires_at)),
            )
        return Consumption.FIRST if inserted == 1 else Consumption.ALREADY_USED

    async def token_consumed(self, token_id: str) -> bool:
        async with self._read() as tx:
            row = await tx.one("SELECT 1 FROM elicit_tokens WHERE token_id = %s", (token_id,))
        return row is not None

    # -- OAuth client registrations ---------------------------------------------------------------

    async def oauth_client_put(self, client_id: str, metadata: JSONObject) -> None:
        if not client_id:
            raise ValueError("an OAuth client id is a non-empty string")
        try:
            async with self._write() as tx:
                await tx.execute(
                    "INSERT INTO elicit_oauth_clients (client_id, metadata, created_at) VALUES (%s, %s, %s)",
                    (client_id, self._to_json(_object(metadata)), self._to_time(self._clock())),
                )
        except UniqueViolation:
            raise AlreadyExists(f"OAuth client {client_id} is already registered") from None

    async def oauth_client_get(self, client_id: str) -> JSONObject | None:
        async with self._read() as tx:
            row = await tx.one("SELECT metadata FROM elicit_oauth_clients WHERE client_id = %s", (client_id,))
        return None if row is None else self._stored_object(row[0])

    # -- token vault ----------------------------------------------------------------------------

    def _vault_record(self, row: Sequence[Any]) -> VaultRecord:
        return VaultRecord(
            principal_id=row[0], name=row[1], key_id=row[2], sealed=bytes(row[3]),
            created_at=self._from_time(row[4]), updated_at=self._from_time(row[5]),
        )  # fmt: skip

    def _audit_vault(
        self, tx: Tx, principal_id: str, name: str, from_status: str | None, to_status: str, actor: str, reason: str,
        key_id: str, at: datetime,
    ) -> None:  # fmt: skip
        # The key id is the only detail: the blob, even sealed, never goes to the audit trail.
        self._audit(
            tx, SubjectKind.VAULT, f"{principal_id}/{name}", from_status, to_status, actor, reason, {"key_id": key_id},
            at,
        )  # fmt: skip

    async def vault_put(
        self, principal_id: str, name: str, key_id: str, sealed: bytes, *, actor: str | None = None
    ) -> None:
        now = self._clock()
        stamp = self._to_time(now)
        who = actor if actor is not None else f"principal:{principal_id}"
        blob = bytes(sealed)
        async with self._write() as tx:
            # UPDATE first, then INSERT ... DO NOTHING: each outcome says whether the entry existed, so the
            # audit row gets the right `from_status`. A concurrent insert or delete between the two makes
            # both miss; trying again settles it (each attempt sees the other's commit).
            for _ in range(_VAULT_PUT_ATTEMPTS):
                if await tx.execute(
                    f"UPDATE elicit_vault SET key_id = %s, sealed = %s, updated_at = %s WHERE {VAULT_KEY}",
                    (key_id, blob, stamp, principal_id, name),
                ):
                    self._audit_vault(tx, principal_id, name, VAULT_STORED, VAULT_STORED, who, "replaced", key_id, now)
                    return
                if await tx.execute(
                    f"INSERT INTO elicit_vault ({VAULT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (principal_id, name) DO NOTHING",
                    (principal_id, name, key_id, blob, stamp, stamp),
                ):
                    self._audit_vault(tx, principal_id, name, None, VAULT_STORED, who, "stored", key_id, now)
                    return
        raise StoreError(f"vault entry {principal_id}/{name} kept changing under concurrent writers; not stored")

    async def vault_get(self, principal_id: str, name: str) -> VaultRecord | None:
        async with self._read() as tx:
            row = await tx.one(f"SELECT {VAULT_COLUMNS} FROM elicit_vault WHERE {VAULT_KEY}", (principal_id, name))
        return None if row is None else self._vault_record(row)

    async def vault_delete(self, principal_id: str, name: str, *, actor: str | None = None) -> bool:
        now = self._clock()
        who = actor if actor is not None else f"principal:{principal_id}"
        async with self._write() as tx:
            row = await tx.one(
                f"SELECT key_id FROM elicit_vault WHERE {VAULT_KEY}{self._lock_row}", (principal_id, name)
            )
            if row is None:
                return False
            await tx.execute(f"DELETE FROM elicit_vault WHERE {VAULT_KEY}", (principal_id, name))
            self._audit_vault(tx, principal_id, name, VAULT_STORED, VAULT_DELETED, who, "deleted", row[0], now)
        return True

    async def vault_reseal(
        self, snapshot: VaultRecord, key_id: str, sealed: bytes, *, actor: str | None = None
    ) -> bool:
        now = self._clock()
        stamp = self._to_time(now)
        async with self._write() as tx:
            moved = await tx.execute(
                f"UPDATE elicit_vault SET key_id = %s, sealed = %s, updated_at = %s WHERE {VAULT_KEY}"
                " AND key_id = %s AND sealed = %s",
                (key_id, bytes(sealed), stamp, snapshot.principal_id, snapshot.name, snapshot.key_id, snapshot.sealed),
            )
            if moved:
                self._audit_vault(
                    tx, snapshot.principal_id, snapshot.name, VAULT_STORED, VAULT_STORED,
                    actor if actor is not None else VAULT_ROTATION.actor, f"re-sealed (was {snapshot.key_id})",
                    key_id, now,
                )  # fmt: skip
        return bool(moved)

    async def vault_entries(
        self, key_id_not: str | None = None, limit: int = 1000, *, after: tuple[str, str] | None = None
    ) -> list[VaultRecord]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        clauses: list[str] = []
        values: list[object] = []
        if key_id_not is not None:
            clauses.append(" AND key_id <> %s")
            values.append(key_id_not)
        if after is not None:
            clauses.append(" AND (principal_id > %s OR (principal_id = %s AND name > %s))")
            values.extend((after[0], after[0], after[1]))
        async with self._read() as tx:
            rows = await tx.all(
                f"SELECT {VAULT_COLUMNS} FROM elicit_vault WHERE 1 = 1{''.join(clauses)}"
                " ORDER BY principal_id, name LIMIT %s",
                (*values, limit),
            )
        return [self._vault_record(row) for row in rows]

    # -- notification outbox --------------------------------------------------------------------

    def _outbox(
        self, tx: Tx, events: Sequence[NotificationEvent], elicitation_ids: Sequence[str], at: datetime
    ) -> None:
        """Announce `events` of these decisions in the outbox, with the commit of the transaction under way."""
        unit = UNIT.get()
        assert unit is not None, "an outbox row is written inside a write transaction"
        unit.notices.append((events, elicitation_ids, at))

    async def _subscribed(self, tx: Tx) -> bool:
        """Whether any webhook subscription exists, looked up at most once a `SUBSCRIPTIONS_RECHECK`: without
        one, a transition writes no outbox statement at all (the common case costs nothing)."""
        checked, found = self._subscriptions_seen
        now = time.monotonic()
        if now - checked < SUBSCRIPTIONS_RECHECK:
            return found
        found = await tx.one("SELECT 1 FROM elicit_subscriptions LIMIT 1") is not None
        self._subscriptions_seen = (now, found)
        return found

    def _write_outbox(
        self, tx: Tx, events: Sequence[NotificationEvent], elicitation_ids: Sequence[str], at: datetime
    ) -> None:
        """One outbox row per subscription taking one of `events`, for each decision, just before the commit
        of the transition that causes it: one statement, which finds nothing to write where nothing is subscribed.

        Read off the rows as the whole unit leaves them (status, deadline, the operation's method and target),
        never the message or an answer, the same on every engine: a decision created and answered in one unit
        (an answer given with the call) was never waiting, and only its end is announced. The event id is the
        event and the decision's id: an event happens once per decision, so every retry and every subscription
        carries the same id.
        """
        task = NotificationEvent.TASK_INPUT_REQUIRED in events
        stamp = self._to_time(at)
        tx.defer(
            f"INSERT INTO elicit_outbox ({OUTBOX_COLUMNS}) SELECT s.event_type || ':' || d.elicitation_id, s.name,"
            " s.event_type, d.elicitation_id, d.operation_id, d.principal_id, d.status, o.method, o.target,"
            " d.expires_at, %s, 'pending', 0, %s, NULL FROM elicit_subscriptions s"
            f" JOIN elicit_decisions d ON d.elicitation_id IN ({_marks(len(elicitation_ids))})"
            " JOIN elicit_operations o ON o.operation_id = d.operation_id"
            f" WHERE s.event_type IN ({_marks(len(events))})"
            f" AND (s.event_type = '{NotificationEvent.DECISION_ENDED.value}' OR d.status IN {WAITING_SQL})"
            + (
                f" AND (s.event_type <> '{NotificationEvent.TASK_INPUT_REQUIRED.value}' OR EXISTS (SELECT 1 FROM"
                " elicit_journal j WHERE j.operation_id = d.operation_id AND j.name = %s))"
                if task
                else ""
            )
            + " ON CONFLICT DO NOTHING",
            (stamp, stamp, *elicitation_ids, *(event.value for event in events), *((TASK_JOURNAL,) if task else ())),
        )

    def _delivery(self, row: Sequence[Any], claimed_at: datetime | None = None) -> Delivery:
        c, t = _Cells("outbox row", OUTBOX_NAMES, row), self._from_time
        return Delivery(
            event_id=c.text(0), subscription=c.text(1), event=c.choice(2, NotificationEvent), elicitation_id=c.text(3),
            operation_id=c.text(4), principal_id=c.text(5), status=c.choice(6, DecisionStatus), method=c.text(7),
            target=c.text(8), deadline=c.read(9, t), occurred_at=c.read(10, t), state=c.choice(11, DeliveryState),
            attempts=c.integer(12), next_attempt_at=c.read(13, t), last_error=c.optional_text(14),
            claimed_at=claimed_at,
        )  # fmt: skip

    async def outbox_subscribe(
        self, subscriptions: Mapping[str, frozenset[NotificationEvent]], *, renamed: Mapping[str, str] | None = None
    ) -> frozenset[str]:
        self._subscriptions_seen = (-SUBSCRIPTIONS_RECHECK, False)  # look again at the next transition
        async with self._write() as tx:
            held: set[str] = set()
            if renamed:
                # Compared here, not in SQL: a former name (a URL's path) is never sent to a store that lacks it.
                names = "SELECT name FROM elicit_subscriptions UNION SELECT subscription FROM elicit_outbox"
                held = {row[0] for row in await tx.all(names)}
            found = {former: name for former, name in (renamed or {}).items() if former in held and former != name}
            for former, name in found.items():
                await tx.execute("DELETE FROM elicit_subscriptions WHERE name = %s", (former,))
                # An event under both names (instances of both kinds ran) keeps one row: a settled one if any.
                await tx.execute(
                    "DELETE FROM elicit_outbox WHERE subscription = %s AND state = 'pending' AND event_id IN"
                    " (SELECT event_id FROM elicit_outbox WHERE subscription = %s AND state <> 'pending')",
                    (name, former),
                )
                await tx.execute(
                    "DELETE FROM elicit_outbox WHERE subscription = %s"
                    " AND event_id IN (SELECT event_id FROM elicit_outbox WHERE subscription = %s)",
                    (former, name),
                )
                await tx.execute("UPDATE elicit_outbox SET subscription = %s WHERE subscription = %s", (name, former))
            for name, events in subscriptions.items():
                kept = sorted(NotificationEvent(event).value for event in events)
                if kept:
                    # DO NOTHING, not delete-then-insert: instances starting together subscribe the same names.
                    await tx.executemany(
                        "INSERT INTO elicit_subscriptions (name, event_type) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                        [(name, event) for event in kept],
                    )
                await tx.execute(
                    "DELETE FROM elicit_subscriptions WHERE name = %s"
                    + (f" AND event_type NOT IN ({_marks(len(kept))})" if kept else ""),
                    (name, *kept),
                )
        return frozenset(found)

    async def outbox_claim(self, subscriptions: Sequence[str], *, limit: int, lease: timedelta) -> list[Delivery]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if lease <= timedelta(0):
            raise ValueError(f"a claim's lease must be positive, got {lease}")
        if not subscriptions:
            return []
        now = self._clock()
        until = now + lease
        async with self._write() as tx:
            rows = await tx.all(
                f"SELECT {OUTBOX_COLUMNS} FROM elicit_outbox WHERE state = 'pending' AND next_attempt_at <= %s"
                f" AND subscription IN ({_marks(len(subscriptions))}) ORDER BY next_attempt_at, event_id, subscription"
                f" LIMIT %s{self._for_update}",
                (self._to_time(now), *subscriptions, limit),
            )
            due = [self._delivery(row, now) for row in rows]
            if due:
                await tx.executemany(
                    "UPDATE elicit_outbox SET attempts = attempts + 1, next_attempt_at = %s"
                    " WHERE event_id = %s AND subscription = %s",
                    [(self._to_time(until), d.event_id, d.subscription) for d in due],
                )
        return [replace(d, attempts=d.attempts + 1, next_attempt_at=until) for d in due]

    async def outbox_delivered(self, delivery: Delivery) -> bool:
        async with self._write() as tx:
            settled = await tx.execute(
                f"UPDATE elicit_outbox SET state = 'delivered', settled_at = %s, last_error = NULL WHERE {OUTBOX_KEY}",
                (self._to_time(self._clock()), delivery.event_id, delivery.subscription),
            )
        return settled == 1

    async def outbox_failed(self, delivery: Delivery, *, retry_after: timedelta | None, error: str) -> bool:
        now = self._clock()
        reason = redact_text(error)[:_OUTBOX_ERROR_LENGTH]
        if retry_after is None:
            change, values = "state = 'dead', settled_at = %s", (self._to_time(now),)
        else:
            change, values = "next_attempt_at = %s", (self._to_time(now + max(retry_after, timedelta(0))),)
        async with self._write() as tx:
            moved = await tx.execute(
                f"UPDATE elicit_outbox SET {change}, last_error = %s WHERE {OUTBOX_KEY} AND attempts = %s",
                (*values, reason, delivery.event_id, delivery.subscription, delivery.attempts),
            )
        return moved == 1

    async def outbox_deliveries(
        self, *, elicitation_id: str | None = None, state: DeliveryState | None = None, limit: int = 100
    ) -> list[Delivery]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        clauses, values = "", []
        if elicitation_id is not None:
            clauses, values = " AND elicitation_id = %s", [elicitation_id]
        if state is not None:
            clauses += " AND state = %s"
            values.append(DeliveryState(state).value)
        async with self._read() as tx:
            rows = await tx.all(
                f"SELECT {OUTBOX_COLUMNS} FROM elicit_outbox WHERE 1 = 1{clauses}"
                " ORDER BY occurred_at, event_id, subscription LIMIT %s",
                (*values, limit),
            )
        return [self._delivery(row) for row in rows]

    async def outbox_purge(self, settled_before: datetime, *, stale_before: datetime | None = None) -> int:
        stale, values = ("", ()) if stale_before is None else (" OR occurred_at < %s", (self._to_time(stale_before),))
        async with self._write() as tx:
            return await tx.execute(
                f"DELETE FROM elicit_outbox WHERE (state <> 'pending' AND settled_at < %s){stale}",
                (self._to_time(settled_before), *values),
            )


def _blocking(
    program: Callable[Concatenate[SQLCore, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SQLStore, P], R]:
    @functools.wraps(program)
    def call(self: SQLStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return run_now(program(self._core, *args, **kwargs))

    return call


class SQLStore(ABC):
    """The `Store` protocol over `SQLCore`, run synchronously on an engine that never waits.

    An engine with an async driver offers the same core as `asynchronous` while `serving` holds it open;
    `AsyncStore` then awaits the core's coroutine of the same name instead of calling here.
    """

    def __init__(self, core: SQLCore, listeners: list[Callable[[str], None]]) -> None:
        self._core = core
        self._change_listeners = listeners

    @property
    @abstractmethod
    def display_url(self) -> str: ...

    @abstractmethod
    def schema_version(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    @property
    def runs_inline(self) -> bool:
        return False

    @property
    def asynchronous(self) -> SQLCore | None:
        """The core on an async engine, open on the running event loop; `None` when there is none."""
        return None

    def serving(self) -> AbstractAsyncContextManager[None]:
        """Hold the async engine open on this event loop for as long as the block runs (where there is one)."""
        return nullcontext()

    async def listen(self, on_change: Callable[[str], None], interest: Interest | None = None) -> None:
        return None

    def add_change_listener(self, listener: Callable[[str], None]) -> None:
        """Called after each commit that moved something a call may wait on, with its subject: a decision's
        id for its transitions, an operation's id for its journal, its claims and its end."""
        self._change_listeners.append(listener)

    def atomically(self, work: Callable[[], R]) -> R:
        """Run `work`'s calls to this store (on this thread) in one transaction: all commit, or none do."""
        return run_now(self._core.atomically(functools.partial(_returning, work)))

    verify_schema = _blocking(SQLCore.verify_schema)
    create_operation = _blocking(SQLCore.create_operation)
    get_operation = _blocking(SQLCore.get_operation)
    get_operation_records = _blocking(SQLCore.get_operation_records)
    begin_operation = _blocking(SQLCore.begin_operation)
    find_operations = _blocking(SQLCore.find_operations)
    finish_operation = _blocking(SQLCore.finish_operation)
    create_decision = _blocking(SQLCore.create_decision)
    get_decision = _blocking(SQLCore.get_decision)
    list_decisions = _blocking(SQLCore.list_decisions)
    decision_page = _blocking(SQLCore.decision_page)
    count_decisions = _blocking(SQLCore.count_decisions)
    transition = _blocking(SQLCore.transition)
    expire_if_overdue = _blocking(SQLCore.expire_if_overdue)
    note = _blocking(SQLCore.note)
    sweep_expired = _blocking(SQLCore.sweep_expired)
    audit_trail = _blocking(SQLCore.audit_trail)
    journal_record = _blocking(SQLCore.journal_record)
    journal_get = _blocking(SQLCore.journal_get)
    journal = _blocking(SQLCore.journal)
    claim = _blocking(SQLCore.claim)
    claims = _blocking(SQLCore.claims)
    renew_claim = _blocking(SQLCore.renew_claim)
    release_claim = _blocking(SQLCore.release_claim)
    consume_token = _blocking(SQLCore.consume_token)
    token_consumed = _blocking(SQLCore.token_consumed)
    oauth_client_put = _blocking(SQLCore.oauth_client_put)
    oauth_client_get = _blocking(SQLCore.oauth_client_get)
    vault_put = _blocking(SQLCore.vault_put)
    vault_get = _blocking(SQLCore.vault_get)
    vault_delete = _blocking(SQLCore.vault_delete)
    vault_reseal = _blocking(SQLCore.vault_reseal)
    vault_entries = _blocking(SQLCore.vault_entries)
    outbox_subscribe = _blocking(SQLCore.outbox_subscribe)
    outbox_claim = _blocking(SQLCore.outbox_claim)
    outbox_delivered = _blocking(SQLCore.outbox_delivered)
    outbox_failed = _blocking(SQLCore.outbox_failed)
    outbox_deliveries = _blocking(SQLCore.outbox_deliveries)
    outbox_purge = _blocking(SQLCore.outbox_purge)


async def _returning(work: Callable[[], R]) -> R:
    return work()


@dataclass(frozen=True, slots=True)
class Sweepable:
    """What a sweep needs to know of a table whose waiting rows expire."""

    kind: SubjectKind
    table: str
    id_column: str
    version_column: str
    waiting: str

    def due(self, mark: str = "%s") -> str:
        """The ids of the oldest overdue waiting rows (parameters: now, batch)."""
        return (
            f"SELECT {self.id_column} FROM {self.table} WHERE {self.waiting} AND expires_at <= {mark}"
            f" ORDER BY expires_at, {self.id_column} LIMIT {mark}"
        )


DECISIONS = Sweepable(
    SubjectKind.DECISION, "elicit_decisions", "elicitation_id", "completion_version", f"status IN {WAITING_SQL}"
)
OPERATIONS = Sweepable(SubjectKind.OPERATION, "elicit_operations", "operation_id", "version", "status = 'open'")
SWEEP_REASON = "TTL passed (sweep)"


def _kind(method: str) -> str:
    return {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}.get(method, method)


def _marks(count: int) -> str:
    return ", ".join(["%s"] * count)


_SHAPES: dict[type, str] = {
    str: "text", int: "an integer", float: "a real number", bytes: "a blob", memoryview: "a blob", bool: "a boolean",
    datetime: "a timestamp", type(None): "NULL",
}  # fmt: skip
_JSON_SHAPES: dict[type, str] = {
    dict: "a JSON object", list: "a JSON list", str: "a JSON string", int: "a JSON number", float: "a JSON number",
    bool: "a JSON boolean", type(None): "JSON null",
}  # fmt: skip


def shape(value: object) -> str:
    """What kind of stored value this is, in words; never the value, which may be an answer."""
    return _SHAPES.get(type(value), f"a {type(value).__name__} value")


def _json_shape(value: object) -> str:
    return _JSON_SHAPES.get(type(value), f"a {type(value).__name__} value")


def _quoted(value: object) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."
    return shape(value)


def _object(value: JSONValue) -> JSONObject:
    if not isinstance(value, dict):
        raise StoreError(f"expected a JSON object in the store, found {type(value).__name__}")
    return value


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def json_text(value: JSONValue) -> str:
    return _ENCODER.encode(value)


def utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_CREATED = DECISION_NAMES.index("created_at")


def _cursor(created: Any, elicitation_id: Any) -> str:
    """A listing cursor: the sort key of a page's last row as stored, so an unreadable row has one too.

    Usually `<microseconds since 1970>.<id>`, short enough to give on a command line. A key no healthy row
    holds (only a corrupt SQLite row can: text where the time belongs, an id of another kind) is kept as
    stored instead, `~` and base64 JSON, so the next page resumes past that row in the engine's own order.
    """
    time: JSONValue
    if type(created) is int:
        time = created
    elif isinstance(created, datetime):
        time = ((created if created.tzinfo else created.replace(tzinfo=UTC)) - _EPOCH) // _MICROSECOND
    else:
        time = _raw_key(created)
    if type(time) is int and isinstance(elicitation_id, str) and _PLAIN_ID.fullmatch(elicitation_id):
        return f"{time}.{elicitation_id}"
    key = [time, elicitation_id if isinstance(elicitation_id, str) else _raw_key(elicitation_id)]
    return "~" + base64.urlsafe_b64encode(json_text(key).encode()).decode().rstrip("=")


_PLAIN_ID = re.compile(r"[0-9A-Za-z_-]+")
_MICROSECONDS = re.compile(r"-?[0-9]{1,20}")


def _raw_key(value: Any) -> JSONValue:
    if isinstance(value, bytes | memoryview):
        return {"blob": bytes(value).hex()}
    return {"raw": value}


def _parse_cursor(token: str) -> tuple[object, object]:
    """The (time, id) key of a cursor; the time still in microseconds when it is one."""
    if not token.startswith("~"):
        time, dot, elicitation_id = token.partition(".")
        if dot and _MICROSECONDS.fullmatch(time) and _PLAIN_ID.fullmatch(elicitation_id):
            return int(time), elicitation_id
        raise ValueError(f"{_quoted(token)} is not a cursor of a decision listing")
    try:
        key = json.loads(base64.urlsafe_b64decode(token[1:] + "=" * (-len(token[1:]) % 4)))
    except ValueError:
        key = None
    if isinstance(key, list) and len(key) == 2:
        created = key[0] if type(key[0]) is int else _raw_value(key[0])
        identity = key[1] if isinstance(key[1], str) else _raw_value(key[1])
        if created is not _NOT_A_KEY and identity is not _NOT_A_KEY:
            return created, identity
    raise ValueError(f"{_quoted(token)} is not a cursor of a decision listing")


_NOT_A_KEY = object()


def _raw_value(key: object) -> object:
    if isinstance(key, dict) and len(key) == 1:
        if "raw" in key and (key["raw"] is None or type(key["raw"]) in (str, int, float)):
            return key["raw"]
        if "blob" in key and isinstance(key["blob"], str):
            try:
                return bytes.fromhex(key["blob"])
            except ValueError:
                return _NOT_A_KEY
    return _NOT_A_KEY
