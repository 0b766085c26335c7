"""Operations: one per tool call, begun or attached to, ended by compare-and-set on `(status, version)`.

A call is its caller, method, target and request digest, or its caller and idempotency key: at most one
operation of a call is open (a unique index, so a racing creator attaches), an overdue one is expired on the
way, and a completed one may be replayed. An end made under a run lease counts only while that lease holds.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime

from mcp_elicit.model import (
    Caller,
    JSONValue,
    Operation,
    OperationStatus,
    Principal,
    SubjectKind,
    check_operation_transition,
)
from mcp_elicit.store import hooks
from mcp_elicit.store._core import (
    BINDING,
    DECISION_NAMES,
    OPERATION_COLUMNS,
    OPERATION_NAMES,
    Core,
    _binding,
    _committed,
    _lost,
    _marks,
)
from mcp_elicit.store._engine import Tx, UniqueViolation
from mcp_elicit.store._journal import _fenced
from mcp_elicit.store.errors import (
    AlreadyExists,
    IdempotencyKeyConflict,
    LeaseLost,
    NotFound,
    OperationConflict,
    OperationExpired,
    StoreError,
)
from mcp_elicit.store.protocol import OPERATION_DECISIONS_READ, Claim, OperationRecords, OperationStart

_OPERATION_OF_JOIN = ", ".join(f"o.{name}" for name in OPERATION_NAMES)
_DECISION_OF_JOIN = ", ".join(f"d.{name}" for name in DECISION_NAMES)
KEY_COLUMNS = "principal_id, client_id, idempotency_key, method, target, request_digest, expires_at"
KEY_OF_CALLER = "principal_id = %s AND client_id = %s AND idempotency_key = %s"
"""An idempotency key is its caller's own: another caller's use of the same key is another key."""
_CREATE_ATTEMPTS = 3


class OperationsCore(Core):
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
            inserted = await tx.execute(*self._first_of_call(candidate, replay_since))
            if inserted == 1 and not await self._overtaken(tx, candidate, replay_since):
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
            if inserted == 1 and not await self._overtaken(tx, candidate, replay_since):
                self._audit_created(tx, candidate)
                return OperationStart(candidate, created=True)
        raise StoreError(f"operation for {candidate.method} {candidate.target} kept changing; not started")

    def _first_of_call(self, candidate: Operation, replay_since: datetime | None) -> tuple[str, tuple[object, ...]]:
        """The operation inserted in one statement when nothing of the call stands in its way: no open operation
        (lapsed or not) and no result to replay. Anything else is for the careful path to sort out."""
        where, params = self._in_the_way(candidate, replay_since)
        return (
            f"INSERT INTO elicit_operations ({OPERATION_COLUMNS}) SELECT {_marks(13)}"
            f" WHERE NOT EXISTS (SELECT 1 FROM elicit_operations WHERE {where}) ON CONFLICT DO NOTHING",
            (*self._operation_row(candidate), *params),
        )

    def _in_the_way(self, candidate: Operation, replay_since: datetime | None) -> tuple[str, tuple[object, ...]]:
        """Which operations of the call keep a new one from being created: an open one, or a result to replay."""
        where, params = self._of_call(candidate)
        if replay_since is None:
            return f"{where} AND status = 'open'", params
        return (
            f"{where} AND (status = 'open' OR (status = 'completed' AND updated_at >= %s))",
            (*params, self._to_time(replay_since)),
        )

    async def _overtaken(self, tx: Tx, candidate: Operation, replay_since: datetime | None) -> bool:
        """Whether the operation just inserted was overtaken by another creator of the call, and so taken back.

        Never on an engine whose write lock serialises creators (SQLite): the insert's own look at the call
        saw every operation of it there is.
        """
        return False

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

    async def count_open_operations(
        self, principal_id: str, *, method: str, targets: Collection[str], now: datetime
    ) -> int:
        if not targets:
            return 0
        names = sorted(set(targets))
        async with self._read() as tx:
            row = await tx.one(
                "SELECT count(*) FROM elicit_operations WHERE principal_id = %s AND method = %s"
                f" AND target IN ({_marks(len(names))}) AND status = 'open' AND expires_at > %s",
                (principal_id, method, *names, self._to_time(now)),
            )
        return 0 if row is None else int(row[0])

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


def _kind(method: str) -> str:
    return {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}.get(method, method)
