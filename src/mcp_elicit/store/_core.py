"""What every aggregate of the store's logic shares: transactions, row codecs and the audit trail.

Every write runs in one transaction through `_write()`: the change, its audit rows and its outbox rows
commit together or not at all, and what it moved is announced with the commit. An engine supplies the
transactions and the value codecs (`Core`'s abstract members); each aggregate's module adds its calls.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from enum import Enum
from types import TracebackType
from typing import Any, TypeVar

from mcp_elicit.model import (
    ApproverRule,
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
    redact_text,
)
from mcp_elicit.store import hooks
from mcp_elicit.store._engine import BadValue, NotUTF8, Transaction, Tx
from mcp_elicit.store._schema import LATEST_VERSION
from mcp_elicit.store._unit import UNIT, Unit, after_commit
from mcp_elicit.store.errors import MigrationPending, NotFound, SchemaTooNew, StoreCorrupt, UnreadableRow
from mcp_elicit.store.protocol import Clock, NotificationEvent

R = TypeVar("R")
E = TypeVar("E", bound=Enum)
CLOCK = System("clock")
DECISION_COLUMNS = (
    "elicitation_id, operation_id, key, principal_id, client_id, origin_method, origin_request_digest, mode, "
    "status, resume_policy, message, requested_schema, url, sensitive_fields, content, completion_version, "
    "created_at, updated_at, expires_at, about, approvers"
)
OPERATION_COLUMNS = (
    "operation_id, principal_id, client_id, method, target, request_digest, idempotency_key, status, result, "
    "version, created_at, updated_at, expires_at"
)
AUDIT_COLUMNS = "seq, subject_kind, subject_id, from_status, to_status, actor, reason, details, at"
DECISION_NAMES = tuple(DECISION_COLUMNS.split(", "))
OPERATION_NAMES = tuple(OPERATION_COLUMNS.split(", "))
AUDIT_NAMES = tuple(AUDIT_COLUMNS.split(", "))
BINDING = " AND principal_id = %s AND client_id = %s"


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

    def __init__(self, core: Core) -> None:
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


class Core(ABC):
    """The store's logic shared by its aggregates, as coroutines; an engine supplies transactions and value
    codecs, and `SQLCore` composes the aggregates' calls over it."""

    def __init__(self, clock: Clock, listeners: list[Callable[[str], None]]) -> None:
        self._clock = clock
        self._change_listeners = listeners

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

    async def _lock_name(self, tx: Tx, name: str) -> None:  # noqa: B027 (SQLite writes hold the database lock)
        """Hold a lock on `name` until the transaction ends, for writes that must not interleave with another's of
        the same name though they share no row (two grants of one key)."""

    def _announce(self, tx: Tx, subjects: Sequence[str]) -> None:  # noqa: B027 (engines that cannot, need not)
        """Tell other processes, inside the changes' transaction, that `subjects` moved."""

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
            d.about, None if d.approvers is None else self._to_json(d.approvers.dumped()),
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
            expires_at=c.read(18, t), about=c.text(19), approvers=c.read(20, self._approver_rule),
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

    def _approver_rule(self, value: Any) -> ApproverRule | None:
        if value is None:
            return None
        try:
            return ApproverRule.loaded(self._from_json(value))
        except (ValueError, TypeError) as error:
            raise BadValue(f"a JSON value that is not an approver rule ({error})") from None

    def _optional_value(self, value: Any) -> JSONValue:
        return None if value is None else self._from_json(value)

    def _names(self, value: Any) -> tuple[str, ...]:
        decoded = self._from_json(value)
        if isinstance(decoded, list):
            names = tuple(name for name in decoded if isinstance(name, str))
            if len(names) == len(decoded):
                return names
            raise BadValue("a JSON list holding something other than field names")
        raise BadValue(f"{_json_shape(decoded)} where a JSON list of field names belongs")

    # -- audit ---------------------------------------------------------------------------------

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

    async def audit_trail(
        self, subject_id: str, caller: Caller, *, on_unreadable: Callable[[UnreadableRow], None] | None = None
    ) -> list[AuditEntry]:
        where, params = _binding(caller)
        async with self._read() as tx:
            visible = await tx.one(
                f"SELECT 1 FROM elicit_decisions WHERE elicitation_id = %s{where}"
                f" UNION ALL SELECT 1 FROM elicit_operations WHERE operation_id = %s{where}"
                f" UNION ALL SELECT 1 FROM elicit_grants WHERE grant_id = %s{where}",
                (subject_id, *params, subject_id, *params, subject_id, *params),
            )
            if visible is None:
                raise NotFound(f"no decision, operation or grant {subject_id}")
            unit = _unit_of(tx)
            if unit is not None:
                _write_audits(unit)  # held back by the engine, they go out ahead of the read
            rows = await tx.all(
                f"SELECT {AUDIT_COLUMNS} FROM elicit_audit WHERE subject_id = %s ORDER BY seq", (subject_id,)
            )
        return _decoded(rows, self._audit_entry, on_unreadable)

    # -- what one aggregate needs of another -----------------------------------------------------

    def _outbox(
        self, tx: Tx, events: Sequence[NotificationEvent], elicitation_ids: Sequence[str], at: datetime
    ) -> None:
        """Announce `events` of these decisions in the outbox, with the commit of the transaction under way."""
        unit = UNIT.get()
        assert unit is not None, "an outbox row is written inside a write transaction"
        unit.notices.append((events, elicitation_ids, at))

    @abstractmethod
    async def _subscribed(self, tx: Tx) -> bool:
        """Whether any webhook subscription exists (the outbox's)."""

    @abstractmethod
    def _write_outbox(
        self, tx: Tx, events: Sequence[NotificationEvent], elicitation_ids: Sequence[str], at: datetime
    ) -> None:
        """The outbox rows of queued events, just before the commit (the outbox's)."""

    @abstractmethod
    async def _select_operation(self, tx: Tx, operation_id: str, caller: Caller) -> Operation | None:
        """The operation as the caller may see it, in `tx` (the operations')."""


def _marks(count: int) -> str:
    return ", ".join(["%s"] * count)


_SHAPES: dict[type, str] = {
    str: "text", int: "an integer", float: "a real number", bytes: "a blob", memoryview: "a blob", bool: "a boolean",
    datetime: "a timestamp", type(None): "NULL", NotUTF8: "text that is not UTF-8",
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


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def json_text(value: JSONValue) -> str:
    return _ENCODER.encode(value)
