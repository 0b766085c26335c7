"""The sealer of the audit trail's hash chains, its snapshot for verify, and the export's pages.

Writers insert audit rows as they always did (`Core._audit`), unsealed, so chaining costs a transition nothing
and unrelated writers never wait on a chain. A seal is one transaction: it takes the oldest unsealed rows (by
`seq`), appends each to its subject's chain (place, previous hash, own hash), moves the chains' heads, and signs
a checkpoint over all heads with the newest key of the ring, storing only the heads it changed. One sealer at a
time (the engine's `_seal_turn`). On PostgreSQL a row with a lower `seq` may commit after higher ones were
sealed: it is sealed by the next seal, appended to its chain then (a chain's order is its sealing order).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mcp_elicit.model.audit_chain import GENESIS, CheckpointClaim, Head, merkle_root
from mcp_elicit.model.audit_keys import AuditPublicKeys, AuditSigningKeys, Signature
from mcp_elicit.store._core import AUDIT_COLUMNS, Core, _marks
from mcp_elicit.store._engine import Transaction, Tx
from mcp_elicit.store.audit import (
    SEAL_BATCH,
    AuditEvidence,
    AuditReport,
    SealedRow,
    SealResult,
    StoredCheckpoint,
    judge,
)

_CHAINED_COLUMNS = f"{AUDIT_COLUMNS}, chain_seq, prev_hash, row_hash"
_CHECKPOINT_COLUMNS = (
    "checkpoint_id, sealed_at, prev_root, root, chains, rows_sealed, migrated_through, key_id, signature"
)
_UPSERT_HEAD = (
    "INSERT INTO elicit_audit_heads (chain, chain_seq, row_hash) VALUES (%s, %s, %s)"
    " ON CONFLICT (chain) DO UPDATE SET chain_seq = excluded.chain_seq, row_hash = excluded.row_hash"
)
_IN_CHUNK = 500


class AuditChainCore(Core):
    async def seal_audit(self, keys: AuditSigningKeys, *, batch: int = SEAL_BATCH) -> SealResult:
        if batch < 1:
            raise ValueError(f"a seal chains at least one row, not {batch}")
        async with self._write() as tx:
            if not await self._seal_turn(tx):
                return SealResult(rows=0)
            found = await tx.all(
                f"SELECT {AUDIT_COLUMNS} FROM elicit_audit WHERE row_hash IS NULL ORDER BY seq LIMIT %s", (batch,)
            )
            if not found:
                return SealResult(rows=0)
            entries = [self._audit_entry(row) for row in found]
            chains = list(dict.fromkeys(entry.subject_id for entry in entries))
            heads = await self._heads(tx, chains)
            sealed: list[tuple[object, ...]] = []
            for entry in entries:
                head = heads.get(entry.subject_id)
                place, previous = (1, GENESIS) if head is None else (head.chain_seq + 1, head.row_hash)
                row = SealedRow(entry=entry, chain_seq=place, prev_hash=previous, row_hash=None)
                digest = row.chained().digest()
                heads[entry.subject_id] = Head(place, digest)
                sealed.append((place, previous, digest, entry.seq))
            await tx.executemany(
                "UPDATE elicit_audit SET chain_seq = %s, prev_hash = %s, row_hash = %s WHERE seq = %s", sealed
            )
            delta = {chain: heads[chain] for chain in chains}
            await tx.executemany(_UPSERT_HEAD, [(c, h.chain_seq, h.row_hash) for c, h in delta.items()])
            everything = {
                row[0]: Head(row[1], row[2])
                for row in await tx.all("SELECT chain, chain_seq, row_hash FROM elicit_audit_heads")
            }
            last = await tx.one(
                "SELECT checkpoint_id, root FROM elicit_audit_checkpoints ORDER BY checkpoint_id DESC LIMIT 1"
            )
            origin = await tx.one("SELECT migrated_through FROM elicit_audit_origin")
            claim = CheckpointClaim(
                checkpoint_id=1 if last is None else int(last[0]) + 1, sealed_at=self._clock(),
                prev_root=merkle_root({}) if last is None else str(last[1]), root=merkle_root(everything),
                chains=len(everything), rows_sealed=len(entries), migrated_through=int(origin[0]),
            )  # fmt: skip
            signature = keys.sign(claim.message())
            await tx.execute(
                f"INSERT INTO elicit_audit_checkpoints ({_CHECKPOINT_COLUMNS}) VALUES ({_marks(9)})",
                (claim.checkpoint_id, self._to_time(claim.sealed_at), claim.prev_root, claim.root, claim.chains,
                 claim.rows_sealed, claim.migrated_through, signature.key_id, signature.value),
            )  # fmt: skip
            await tx.executemany(
                "INSERT INTO elicit_audit_checkpoint_heads (checkpoint_id, chain, chain_seq, row_hash)"
                " VALUES (%s, %s, %s, %s)",
                [(claim.checkpoint_id, c, h.chain_seq, h.row_hash) for c, h in delta.items()],
            )
        return SealResult(rows=len(entries), chains=len(chains), checkpoint_id=claim.checkpoint_id, root=claim.root)

    async def _heads(self, tx: Tx, chains: Sequence[str]) -> dict[str, Head]:
        heads: dict[str, Head] = {}
        for start in range(0, len(chains), _IN_CHUNK):
            chunk = chains[start : start + _IN_CHUNK]
            rows = await tx.all(
                f"SELECT chain, chain_seq, row_hash FROM elicit_audit_heads WHERE chain IN ({_marks(len(chunk))})",
                chunk,
            )
            heads.update({row[0]: Head(int(row[1]), str(row[2])) for row in rows})
        return heads

    async def verify_audit(self, keys: AuditPublicKeys) -> AuditReport:
        async with self._snapshot() as tx:
            rows = await tx.all(
                f"SELECT {_CHAINED_COLUMNS} FROM elicit_audit"
                " WHERE chain_seq IS NOT NULL OR prev_hash IS NOT NULL OR row_hash IS NOT NULL"
                " ORDER BY subject_id, chain_seq, seq"
            )
            unsealed = await tx.one("SELECT count(*) FROM elicit_audit WHERE row_hash IS NULL")
            heads = await tx.all("SELECT chain, chain_seq, row_hash FROM elicit_audit_heads")
            checkpoints = await tx.all(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM elicit_audit_checkpoints ORDER BY checkpoint_id"
            )
            deltas = await tx.all(
                "SELECT checkpoint_id, chain, chain_seq, row_hash FROM elicit_audit_checkpoint_heads"
                " ORDER BY checkpoint_id, chain"
            )
            origin = await tx.one("SELECT migrated_through FROM elicit_audit_origin")
        by_checkpoint: dict[int, dict[str, Head]] = {}
        for number, chain, place, digest in deltas:
            by_checkpoint.setdefault(int(number), {})[chain] = Head(int(place), str(digest))
        evidence = AuditEvidence(
            rows=[self._sealed_row(row) for row in rows],
            heads={row[0]: Head(int(row[1]), str(row[2])) for row in heads},
            checkpoints=[self._checkpoint(row, by_checkpoint.get(int(row[0]), {})) for row in checkpoints],
            unsealed=int(unsealed[0]),
            migrated_through=int(origin[0]) if origin is not None else 0,
        )
        return judge(evidence, keys)

    def _sealed_row(self, row: Sequence[Any]) -> SealedRow:
        return SealedRow(entry=self._audit_entry(row[:9]), chain_seq=row[9], prev_hash=row[10], row_hash=row[11])

    def _checkpoint(self, row: Sequence[Any], delta: dict[str, Head]) -> StoredCheckpoint:
        claim = CheckpointClaim(
            checkpoint_id=int(row[0]), sealed_at=self._from_time(row[1]), prev_root=row[2], root=row[3],
            chains=int(row[4]), rows_sealed=int(row[5]), migrated_through=int(row[6]),
        )  # fmt: skip
        return StoredCheckpoint(claim=claim, signature=Signature(row[7], row[8]), delta=delta)

    async def audit_export(
        self, *, after: int = 0, limit: int = 1000, since: datetime | None = None, operation_id: str | None = None
    ) -> list[SealedRow]:
        where: list[str] = ["seq > %s"]
        params: list[object] = [after]
        if since is not None:
            where.append("at >= %s")
            params.append(self._to_time(since))
        if operation_id is not None:
            where.append(
                "(subject_id = %s"
                " OR subject_id IN (SELECT elicitation_id FROM elicit_decisions WHERE operation_id = %s)"
                " OR subject_id IN (SELECT g.grant_id FROM elicit_grants g JOIN elicit_decisions d"
                " ON d.elicitation_id = g.decision_id WHERE d.operation_id = %s))"
            )
            params += [operation_id, operation_id, operation_id]
        async with self._read() as tx:
            rows = await tx.all(
                f"SELECT {_CHAINED_COLUMNS} FROM elicit_audit WHERE {' AND '.join(where)} ORDER BY seq LIMIT %s",
                (*params, limit),
            )
        return [self._sealed_row(row) for row in rows]

    async def _seal_turn(self, tx: Tx) -> bool:
        """Whether this transaction may seal now; an engine whose write lock does not serialize seals says no while
        another one seals."""
        return True

    @abstractmethod
    def _snapshot(self) -> Transaction:
        """A read-only transaction whose statements all see one snapshot of the database."""
