"""The sealer of the audit trail's hash chains, verify's reading of them, and the export's pages.

Writers insert audit rows as they always did (`Core._audit`), unsealed, so chaining costs a transition nothing
and unrelated writers never wait on a chain. A seal takes the oldest unsealed rows (by `seq`; past any it cannot
read, which stay unsealed for verify to name), appends each to its subject's chain (place, previous hash, own
hash), moves the chains' heads, and signs a checkpoint over the heads it moved, linked to the previous
checkpoint's root, with the newest key of the ring: its cost follows what it seals, not how many chains exist.
It reads, checks, hashes and signs in a read-only snapshot, then stores the result in a write transaction that
holds the write lock only for that, and only if the checkpoints still end where the snapshot saw them end
(compare-and-set: otherwise another seal came between, and nothing is written). One sealer at a time (the
engine's `_seal_turn`). On PostgreSQL a row with a lower `seq` may commit after higher ones were sealed: it is
sealed by the next seal, appended to its chain then (a chain's order is its sealing order).

Before it signs, a seal checks that each head it extends is the one the checkpoints last signed for that chain,
and, given the checkpoint the caller signed last, that it is still there as signed: a seal never signs over
heads edited by hand or checkpoints cut back (`AuditSealRefused`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mcp_elicit.model import AuditEntry
from mcp_elicit.model.audit_chain import EMPTY_ROOT, GENESIS, CheckpointClaim, Head, checkpoint_root
from mcp_elicit.model.audit_keys import AuditPublicKeys, AuditSigningKeys, Signature
from mcp_elicit.store._core import AUDIT_COLUMNS, Core, _Cells, _marks
from mcp_elicit.store._engine import Transaction, Tx
from mcp_elicit.store.audit import (
    DEFAULT_MAX_EXPOSURE,
    SEAL_BATCH,
    Anchor,
    AuditJudge,
    AuditReport,
    AuditSealRefused,
    EarlierRows,
    SealedRow,
    SealResult,
    StoredCheckpoint,
    UnreadableAuditRow,
)
from mcp_elicit.store.errors import StoreCorrupt

_CHAINED_COLUMNS = f"{AUDIT_COLUMNS}, chain_seq, prev_hash, row_hash"
_CHECKPOINT_COLUMNS = (
    "checkpoint_id, sealed_at, prev_root, root, chains, rows_sealed, migrated_through, sealer_running, key_id,"
    " signature"
)
_CHECKPOINT_NAMES = tuple(_CHECKPOINT_COLUMNS.split(", "))
_LAST_CHECKPOINT = (
    "SELECT checkpoint_id, root, sealer_running FROM elicit_audit_checkpoints ORDER BY checkpoint_id DESC LIMIT 1"
)
_UPSERT_HEAD = (
    "INSERT INTO elicit_audit_heads (chain, chain_seq, row_hash) VALUES (%s, %s, %s)"
    " ON CONFLICT (chain) DO UPDATE SET chain_seq = excluded.chain_seq, row_hash = excluded.row_hash"
)
_STORED_HEADS = "SELECT chain, chain_seq, row_hash FROM elicit_audit_heads WHERE chain IN ({marks})"
_SIGNED_HEADS = (
    "SELECT h.chain, h.chain_seq, h.row_hash FROM elicit_audit_checkpoint_heads h WHERE h.chain IN ({marks})"
    " AND h.checkpoint_id = (SELECT max(m.checkpoint_id) FROM elicit_audit_checkpoint_heads m"
    " JOIN elicit_audit_checkpoints c ON c.checkpoint_id = m.checkpoint_id WHERE m.chain = h.chain)"
)
_IN_CHUNK = 500
_SEQ, _SUBJECT_ID, _CHAIN_SEQ = 0, 2, 9
_HEAD = 10
"""Where a checkpoint's head starts in a row of `_feed_checkpoints`, after the checkpoint's columns."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """A seal as read and signed outside the write lock: what the write transaction stores, if the checkpoints
    still end where they ended when it was read."""

    after: Anchor | None
    claim: CheckpointClaim
    signature: Signature
    sealed: list[tuple[object, ...]]
    delta: dict[str, Head]
    unreadable: tuple[int, ...]
    more: bool


class AuditChainCore(Core):
    async def seal_audit(
        self,
        keys: AuditSigningKeys,
        *,
        batch: int = SEAL_BATCH,
        extends: Anchor | None = None,
        running: bool | None = None,
        written_after: int | None = None,
    ) -> SealResult:
        if batch < 1:
            raise ValueError(f"a seal chains at least one row, not {batch}")
        plan = await self._plan_seal(keys, batch, extends, running, written_after)
        if isinstance(plan, SealResult):
            return plan
        claim, unreadable = plan.claim, plan.unreadable
        async with self._write() as tx:
            if not await self._seal_turn(tx):
                return SealResult(rows=0, unreadable=unreadable, turn=False)
            if _anchor(await tx.one(_LAST_CHECKPOINT)) != plan.after:
                return SealResult(rows=0, unreadable=unreadable, more=True)
            await tx.executemany(
                "UPDATE elicit_audit SET chain_seq = %s, prev_hash = %s, row_hash = %s WHERE seq = %s", plan.sealed
            )
            await tx.executemany(_UPSERT_HEAD, [(c, h.chain_seq, h.row_hash) for c, h in plan.delta.items()])
            await tx.execute(
                f"INSERT INTO elicit_audit_checkpoints ({_CHECKPOINT_COLUMNS}) VALUES ({_marks(10)})",
                (claim.checkpoint_id, self._to_time(claim.sealed_at), claim.prev_root, claim.root, claim.chains,
                 claim.rows_sealed, claim.migrated_through, claim.sealer_running, plan.signature.key_id,
                 plan.signature.value),
            )  # fmt: skip
            await tx.executemany(
                "INSERT INTO elicit_audit_checkpoint_heads (checkpoint_id, chain, chain_seq, row_hash)"
                " VALUES (%s, %s, %s, %s)",
                [(claim.checkpoint_id, c, h.chain_seq, h.row_hash) for c, h in plan.delta.items()],
            )
        return SealResult(
            rows=claim.rows_sealed, chains=claim.chains, checkpoint_id=claim.checkpoint_id, root=claim.root,
            unreadable=unreadable, more=plan.more,
        )  # fmt: skip

    async def _plan_seal(
        self, keys: AuditSigningKeys, batch: int, extends: Anchor | None, running: bool | None, after: int | None
    ) -> _Plan | SealResult:
        """The next seal, read from one snapshot and signed: every read, check and hash of a seal, so that the
        write lock is held only to store it; or the result of a seal with nothing to sign."""
        entries: list[AuditEntry] = []
        unreadable: list[int] = []
        more = False
        async with self._snapshot() as tx:
            last = await tx.one(_LAST_CHECKPOINT)
            number = 1 if last is None else int(last[0]) + 1
            await self._check_signed(tx, extends, number)
            if after is not None:
                earlier = await self._earlier(tx, after)
                if earlier is not None:
                    return SealResult(rows=0, earlier=earlier)
            async with tx.stream(
                f"SELECT {AUDIT_COLUMNS} FROM elicit_audit WHERE row_hash IS NULL ORDER BY seq", size=batch
            ) as pages:
                async for page in pages:
                    for row in page:
                        try:
                            entries.append(self._audit_entry(row))
                        except StoreCorrupt:
                            unreadable.append(int(row[_SEQ]))
                    more = len(page) == batch
                    if entries:
                        break
            said = last is not None and bool(last[2])
            sealer_running = said if running is None else running
            if not entries and sealer_running == said:
                return SealResult(rows=0, unreadable=tuple(unreadable))
            chains = list(dict.fromkeys(entry.subject_id for entry in entries))
            heads = await self._heads(tx, chains, _STORED_HEADS)
            signed = await self._heads(tx, chains, _SIGNED_HEADS)
            for chain in chains:
                if heads.get(chain) != signed.get(chain):
                    raise AuditSealRefused(
                        f"the head of chain {chain} is not the one the checkpoints signed for it"
                        f" ({_said(heads.get(chain))} stored, {_said(signed.get(chain))} signed): not sealing over it"
                    )
            origin = await tx.one("SELECT migrated_through FROM elicit_audit_origin")
        sealed: list[tuple[object, ...]] = []
        for entry in entries:
            head = heads.get(entry.subject_id)
            place, previous = (1, GENESIS) if head is None else (head.chain_seq + 1, head.row_hash)
            digest = SealedRow(entry=entry, chain_seq=place, prev_hash=previous, row_hash=None).chained().digest()
            heads[entry.subject_id] = Head(place, digest)
            sealed.append((place, previous, digest, entry.seq))
        delta = {chain: heads[chain] for chain in chains}
        prev_root = EMPTY_ROOT if last is None else _text(last[1], f"the root of checkpoint {last[0]}")
        claim = CheckpointClaim(
            checkpoint_id=number, sealed_at=self._clock(), prev_root=prev_root, root=checkpoint_root(prev_root, delta),
            chains=len(delta), rows_sealed=len(entries), migrated_through=int(origin[0]),
            sealer_running=sealer_running,
        )  # fmt: skip
        return _Plan(_anchor(last), claim, keys.sign(claim.message()), sealed, delta, tuple(unreadable), more)

    async def _check_signed(self, tx: Tx, extends: Anchor | None, number: int) -> None:
        """Refuse to sign checkpoint `number` when the checkpoint the caller signed last is gone or changed, or
        when deltas of checkpoints from `number` on are left (their checkpoints deleted)."""
        if extends is not None:
            found = await tx.one(
                "SELECT root FROM elicit_audit_checkpoints WHERE checkpoint_id = %s", (extends.checkpoint_id,)
            )
            if found is None or str(found[0]) != extends.root:
                now = "is gone" if found is None else f"now has root {found[0]}"
                raise AuditSealRefused(
                    f"checkpoint {extends.checkpoint_id}, signed by this sealer with root {extends.root}, {now}:"
                    " the trail was rewritten; not signing over it"
                )
        orphan = await tx.one(
            "SELECT checkpoint_id FROM elicit_audit_checkpoint_heads WHERE checkpoint_id >= %s LIMIT 1", (number,)
        )
        if orphan is not None:
            raise AuditSealRefused(
                f"the heads of checkpoint {orphan[0]} are stored without it: checkpoints were deleted; not signing"
            )

    async def _earlier(self, tx: Tx, after: int) -> EarlierRows | None:
        found = await tx.one(
            "SELECT count(*), min(seq), min(at) FROM elicit_audit WHERE row_hash IS NULL AND seq <= %s", (after,)
        )
        if not found[0]:
            return None
        try:
            oldest: datetime | None = self._from_time(found[2])
        except StoreCorrupt:
            oldest = None
        return EarlierRows(int(found[0]), int(found[1]), oldest)

    async def last_audit_seq(self) -> int:
        async with self._read() as tx:
            found = await tx.one("SELECT coalesce(max(seq), 0) FROM elicit_audit")
        return int(found[0])

    async def _heads(self, tx: Tx, chains: Sequence[str], sql: str) -> dict[str, Head]:
        """The heads a seal extends, as stored: one whose hash is not text (edited by hand) refuses the seal."""
        heads: dict[str, Head] = {}
        for start in range(0, len(chains), _IN_CHUNK):
            chunk = chains[start : start + _IN_CHUNK]
            rows = await tx.all(sql.format(marks=_marks(len(chunk))), chunk)
            heads.update({row[0]: Head(int(row[1]), _text(row[2], f"the head of chain {row[0]}")) for row in rows})
        return heads

    async def verify_audit(
        self,
        keys: AuditPublicKeys,
        *,
        anchors: Sequence[Anchor] = (),
        max_exposure: timedelta | None = DEFAULT_MAX_EXPOSURE,
    ) -> AuditReport:
        async with self._snapshot() as tx:
            origin = await tx.one("SELECT migrated_through FROM elicit_audit_origin")
            judge = AuditJudge(
                keys, migrated_through=int(origin[0]) if origin is not None else 0, anchors=anchors,
                now=self._clock(), max_exposure=max_exposure,
            )  # fmt: skip
            await self._feed_checkpoints(tx, judge)
            judge.heads(
                {row[0]: Head(int(row[1]), str(row[2])) for row in
                 await tx.all("SELECT chain, chain_seq, row_hash FROM elicit_audit_heads")}
            )  # fmt: skip
            chain: str | None = None
            rows: list[SealedRow | UnreadableAuditRow] = []
            async with tx.stream(
                f"SELECT {_CHAINED_COLUMNS} FROM elicit_audit"
                " WHERE chain_seq IS NOT NULL OR prev_hash IS NOT NULL OR row_hash IS NOT NULL"
                " ORDER BY subject_id, chain_seq, seq"
            ) as pages:
                async for page in pages:
                    for row in page:
                        if row[_SUBJECT_ID] != chain:
                            if chain is not None:
                                judge.chain(chain, rows)
                            chain, rows = str(row[_SUBJECT_ID]), []
                        rows.append(self._stored_row(row))
            if chain is not None:
                judge.chain(chain, rows)
            async with tx.stream(
                f"SELECT {_CHAINED_COLUMNS} FROM elicit_audit WHERE row_hash IS NULL ORDER BY seq"
            ) as pages:
                async for page in pages:
                    for row in page:
                        judge.unsealed(self._stored_row(row))
        return judge.report()

    async def _feed_checkpoints(self, tx: Tx, judge: AuditJudge) -> None:
        """The checkpoints in order, each with its delta, streamed (one checkpoint's delta in memory at a time)."""
        current: Sequence[Any] | None = None
        delta: dict[str, Head] = {}
        columns = ", ".join(f"c.{name}" for name in _CHECKPOINT_COLUMNS.split(", "))
        async with tx.stream(
            f"SELECT {columns}, h.chain, h.chain_seq, h.row_hash FROM elicit_audit_checkpoints c"
            " LEFT JOIN elicit_audit_checkpoint_heads h ON h.checkpoint_id = c.checkpoint_id"
            " ORDER BY c.checkpoint_id, h.chain"
        ) as pages:
            async for page in pages:
                for row in page:
                    if current is not None and row[0] != current[0]:
                        self._judge_checkpoint(judge, current, delta)
                        delta = {}
                    current = row
                    if row[_HEAD] is not None:
                        delta[str(row[_HEAD])] = Head(int(row[_HEAD + 1]), str(row[_HEAD + 2]))
        if current is not None:
            self._judge_checkpoint(judge, current, delta)

    def _judge_checkpoint(self, judge: AuditJudge, row: Sequence[Any], delta: dict[str, Head]) -> None:
        try:
            checkpoint = self._checkpoint(row, delta)
        except StoreCorrupt as error:
            judge.unreadable_checkpoint(row[0] if type(row[0]) is int else None, str(error))
        else:
            judge.checkpoint(checkpoint)

    def _stored_row(self, row: Sequence[Any]) -> SealedRow | UnreadableAuditRow:
        """The row as stored, or what makes it unreadable: a chain_seq that is not a number is as bad as any."""
        place = row[_CHAIN_SEQ]
        try:
            if place is not None and (isinstance(place, bool) or not isinstance(place, int)):
                raise StoreCorrupt(f"audit row {row[_SEQ]}: its chain_seq is not a number")
            return self._sealed_row(row)
        except StoreCorrupt as error:
            return UnreadableAuditRow(
                chain=str(row[_SUBJECT_ID]), seq=row[_SEQ], chain_seq=place if isinstance(place, int) else None,
                why=str(error),
            )  # fmt: skip

    def _sealed_row(self, row: Sequence[Any]) -> SealedRow:
        return SealedRow(entry=self._audit_entry(row[:9]), chain_seq=row[9], prev_hash=row[10], row_hash=row[11])

    def _checkpoint(self, row: Sequence[Any], delta: dict[str, Head]) -> StoredCheckpoint:
        c = _Cells("audit checkpoint", _CHECKPOINT_NAMES, row)
        claim = CheckpointClaim(
            checkpoint_id=c.integer(0), sealed_at=c.read(1, self._from_time), prev_root=c.text(2), root=c.text(3),
            chains=c.integer(4), rows_sealed=c.integer(5), migrated_through=c.integer(6), sealer_running=bool(row[7]),
        )  # fmt: skip
        return StoredCheckpoint(claim=claim, signature=Signature(c.text(8), c.text(9)), delta=delta)

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


def _anchor(last: Sequence[Any] | None) -> Anchor | None:
    return None if last is None else Anchor(int(last[0]), str(last[1]))


def _said(head: Head | None) -> str:
    return "none" if head is None else f"chain_seq {head.chain_seq}"


def _text(value: object, what: str) -> str:
    """A hash a seal builds on, refused unless it reads back as text: signing on top of `str()` of bytes would
    sign over an edit."""
    if not isinstance(value, str):
        raise AuditSealRefused(f"{what} cannot be read as text (edited by hand?): not sealing over it")
    return value
