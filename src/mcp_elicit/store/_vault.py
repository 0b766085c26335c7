"""The vault's rows: blobs sealed by a caller under a key id, opaque to the store, every write audited.

The audit rows name the key id alone: neither a blob, sealed as it is, nor any key reaches the trail.
A re-seal is a compare-and-set on the key id and the blob, so a concurrent `vault_put` always wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mcp_elicit.model import SubjectKind, System
from mcp_elicit.store._core import Core
from mcp_elicit.store._engine import Tx
from mcp_elicit.store.errors import StoreError
from mcp_elicit.store.protocol import VaultRecord

VAULT_COLUMNS = "principal_id, name, key_id, sealed, created_at, updated_at"
VAULT_KEY = "principal_id = %s AND name = %s"
VAULT_STORED = "stored"
VAULT_DELETED = "deleted"
VAULT_ROTATION = System("vault-rotation")
_VAULT_PUT_ATTEMPTS = 5


class VaultCore(Core):
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
