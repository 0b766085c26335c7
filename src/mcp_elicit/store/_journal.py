"""An operation's journal (each step's result, recorded once) and its claims (leases on running it).

A claim lapses unless its holder renews it; taking over a lapsed one counts an attempt. A write fenced on a
run lease (`_fenced`) counts only while the same holder and attempt hold it, so a lapsed holder's late
write finds another holder, or its own next attempt, and changes nothing.
"""

from __future__ import annotations

from datetime import datetime

from mcp_elicit.model import JSONValue, OperationStatus, Principal, SubjectKind
from mcp_elicit.store._core import BINDING, Core, _Cells
from mcp_elicit.store._engine import Tx
from mcp_elicit.store.errors import AlreadyExists, LeaseLost, NotFound, OperationConflict
from mcp_elicit.store.protocol import Claim, JournalEntry

_JOURNAL_NAMES = ("value", "recorded_at")


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


class JournalCore(Core):
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
