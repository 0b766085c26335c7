"""Tamper evidence of the audit trail: what a seal did, what verify found, and how it judges the evidence.

`Store.seal_audit` chains the audit rows written since the last seal and signs a checkpoint over every chain's
head (see `mcp_elicit.model.audit_chain`). `Store.verify_audit` reads the rows, the heads and the checkpoints in
one snapshot and hands them to `judge`, which recomputes everything and names each break it finds.

Guarantee: a row edited, deleted, inserted or moved inside a chain, a head edited, and a chain deleted or
truncated, or rewritten with recomputed hashes, after a checkpoint covered it, is found, and so is a checkpoint
not signed by one of the public keys verify is given. Exposure: rows not sealed yet (written since the last
seal, a few seconds with the served app's sealer) and an attacker who deletes the latest checkpoints together
with every row they sealed; keep the last checkpoint's id and root that verify prints somewhere the database's
writers cannot reach to close that.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from mcp_elicit.model import AuditEntry
from mcp_elicit.model.audit_chain import GENESIS, ChainedRow, CheckpointClaim, Head, merkle_root
from mcp_elicit.model.audit_keys import AuditPublicKeys, Signature

SEAL_BATCH = 5000
"""Rows a seal chains at most in one transaction (and one checkpoint)."""


@dataclass(frozen=True, slots=True)
class SealResult:
    rows: int
    """Rows chained by this seal."""
    chains: int = 0
    """Chains those rows extended."""
    checkpoint_id: int | None = None
    """The checkpoint this seal signed; None when there was nothing to seal, or another instance was sealing."""
    root: str | None = None


class BreakKind(StrEnum):
    EDITED = "edited"
    DELETED = "deleted"
    INSERTED = "inserted"
    REORDERED = "reordered"
    TRUNCATED = "truncated"
    CHAIN_DELETED = "chain deleted"
    REWRITTEN = "rewritten"
    HEAD_EDITED = "head edited"
    CHECKPOINT_MISSING = "checkpoint missing"
    CHECKPOINT_EDITED = "checkpoint edited"
    CHECKPOINT_FORGED = "checkpoint forged"
    UNKNOWN_KEY = "unknown key"


@dataclass(frozen=True, slots=True)
class AuditBreak:
    """One place where the evidence does not hold, and what it shows."""

    kind: BreakKind
    what: str
    chain: str | None = None
    chain_seq: int | None = None
    checkpoint_id: int | None = None

    def __str__(self) -> str:
        where = []
        if self.checkpoint_id is not None:
            where.append(f"checkpoint {self.checkpoint_id}")
        if self.chain is not None:
            where.append(f"chain {self.chain}")
        if self.chain_seq is not None:
            where.append(f"chain_seq {self.chain_seq}")
        return f"{', '.join(where)}: {self.what} ({self.kind.value})" if where else f"{self.what} ({self.kind.value})"


@dataclass(frozen=True, slots=True, kw_only=True)
class SealedRow:
    """An audit row as stored with its place in its chain; `chain_seq`, `prev_hash` and `row_hash` are None
    until it is sealed."""

    entry: AuditEntry
    chain_seq: int | None
    prev_hash: str | None
    row_hash: str | None

    def chained(self, chain_seq: int | None = None) -> ChainedRow:
        """The row as its hash covers it (at `chain_seq` instead of its own, to see where it came from)."""
        e, place = self.entry, self.chain_seq if chain_seq is None else chain_seq
        return ChainedRow(
            chain=e.subject_id, chain_seq=place or 0,
            prev_hash=self.prev_hash or "", subject_kind=e.subject_kind.value, subject_id=e.subject_id,
            from_status=e.from_status, to_status=e.to_status, actor=e.actor, reason=e.reason, details=e.details,
            at=e.at,
        )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredCheckpoint:
    claim: CheckpointClaim
    signature: Signature
    delta: dict[str, Head]
    """The heads this checkpoint changed (the full set is the replay of every delta up to it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvidence:
    """Everything verify reads, from one snapshot: sealed rows by chain and place, heads, checkpoints in order."""

    rows: Sequence[SealedRow]
    heads: dict[str, Head]
    checkpoints: Sequence[StoredCheckpoint]
    unsealed: int
    migrated_through: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditReport:
    """What verify found: sound when `breaks` is empty (the first one is the one to look at)."""

    breaks: list[AuditBreak]
    chains: int
    rows_sealed: int
    unsealed: int
    """Rows written since the last seal: not covered yet (the exposure window)."""
    last_checkpoint: CheckpointClaim | None
    last_key_id: str | None
    migrated_through: int
    """Rows with `seq` up to this were written before the audit was chained, and chained at migration."""
    migrated_rows: int = 0

    @property
    def sound(self) -> bool:
        return not self.breaks


@dataclass(slots=True)
class _Walk:
    """One chain as its rows give it: its head so far, its first break, and the hash at a place asked about."""

    head: Head | None = None
    broken: AuditBreak | None = None
    hashes: dict[int, str] = field(default_factory=dict)


def judge(evidence: AuditEvidence, keys: AuditPublicKeys) -> AuditReport:
    """Recompute every chain, the heads, every checkpoint's root and signature, and the last checkpoint's coverage.

    Breaks come in that order: checkpoints first (nothing a forged checkpoint says counts), then each chain's
    rows, its head, and what the last checkpoint covered of it; one break per chain, the first found.
    """
    breaks: list[AuditBreak] = []
    covered = _replay(evidence.checkpoints, evidence.migrated_through, keys, breaks)
    by_chain: dict[str, list[SealedRow]] = {}
    for row in evidence.rows:
        by_chain.setdefault(row.entry.subject_id, []).append(row)
    migrated = 0
    for chain in sorted(set(by_chain) | set(evidence.heads) | set(covered)):
        rows = by_chain.get(chain, [])
        migrated += sum(1 for row in rows if row.entry.seq <= evidence.migrated_through)
        wanted = covered[chain].chain_seq if chain in covered else None
        walk = _walk(chain, rows, wanted)
        found = walk.broken or _head_break(chain, walk.head, evidence.heads.get(chain))
        found = found or _coverage_break(chain, walk, covered.get(chain), len(evidence.checkpoints))
        if found is not None:
            breaks.append(found)
    last = evidence.checkpoints[-1] if evidence.checkpoints else None
    return AuditReport(
        breaks=breaks, chains=len(by_chain), rows_sealed=len(evidence.rows), unsealed=evidence.unsealed,
        last_checkpoint=None if last is None else last.claim,
        last_key_id=None if last is None else last.signature.key_id,
        migrated_through=evidence.migrated_through, migrated_rows=migrated,
    )  # fmt: skip


def _replay(
    checkpoints: Sequence[StoredCheckpoint], migrated_through: int, keys: AuditPublicKeys, breaks: list[AuditBreak]
) -> dict[str, Head]:
    """The full head set at the last checkpoint, checking each checkpoint on the way."""
    heads: dict[str, Head] = {}
    prev_root = merkle_root({})
    for expected, checkpoint in enumerate(checkpoints, start=1):
        claim = checkpoint.claim
        number = claim.checkpoint_id
        heads.update(checkpoint.delta)
        if number != expected:
            missing = f"checkpoint {expected}" if number == expected + 1 else f"checkpoints {expected} to {number - 1}"
            breaks.append(
                AuditBreak(BreakKind.CHECKPOINT_MISSING, f"{missing} before it are gone", checkpoint_id=number)
            )
            return heads
        if checkpoint.signature.key_id not in keys:
            what = f"signed by key {checkpoint.signature.key_id}, which is not among the public keys given"
            breaks.append(AuditBreak(BreakKind.UNKNOWN_KEY, what, checkpoint_id=number))
            return heads
        if not keys.verifies(checkpoint.signature, claim.message()):
            what = f"its signature does not verify with key {checkpoint.signature.key_id}"
            breaks.append(AuditBreak(BreakKind.CHECKPOINT_FORGED, what, checkpoint_id=number))
            return heads
        problem = None
        if claim.prev_root != prev_root:
            problem = "it does not follow the checkpoint before it (previous root differs)"
        elif merkle_root(heads) != claim.root or claim.chains != len(heads):
            problem = "its stored heads, replayed, do not give the root it signed"
        elif claim.migrated_through != migrated_through:
            signed = claim.migrated_through
            problem = f"it signed rows up to seq {signed} as chained at migration; the store says {migrated_through}"
        if problem is not None:
            breaks.append(AuditBreak(BreakKind.CHECKPOINT_EDITED, problem, checkpoint_id=number))
            return heads
        prev_root = claim.root
    return heads


def _walk(chain: str, rows: Sequence[SealedRow], wanted: int | None) -> _Walk:
    walk = _Walk()
    previous = GENESIS
    hashes = {row.row_hash for row in rows}
    for place, row in enumerate(rows, start=1):
        seq = row.chain_seq
        if seq is None or row.row_hash is None or row.prev_hash is None:
            walk.broken = AuditBreak(BreakKind.EDITED, "a row partly sealed", chain, seq)
            return walk
        if seq < place:
            walk.broken = AuditBreak(BreakKind.INSERTED, "two rows at this place", chain, seq)
            return walk
        if seq > place:
            gone = "missing" if seq == place + 1 else f"missing, and every place up to chain_seq {seq - 1}"
            walk.broken = AuditBreak(BreakKind.DELETED, f"{gone}: the rows there were deleted", chain, place)
            return walk
        if row.chained().digest() != row.row_hash:
            walk.broken = _misplaced(chain, row, place, len(rows), hashes)
            return walk
        if row.prev_hash != previous:
            what = "it does not link to the row before it (a row inserted or deleted there)"
            walk.broken = AuditBreak(
                BreakKind.INSERTED if row.prev_hash in hashes else BreakKind.DELETED, what, chain, seq
            )
            return walk
        previous = row.row_hash
        if seq == wanted:
            walk.hashes[seq] = row.row_hash
        walk.head = Head(seq, row.row_hash)
    return walk


def _misplaced(chain: str, row: SealedRow, place: int, length: int, hashes: Iterable[str | None]) -> AuditBreak:
    """A row whose hash does not match: sealed at another place (moved, or shifted by an insert or a delete), or
    edited."""
    for other in range(1, length + 2):
        if other != place and row.chained(other).digest() == row.row_hash:
            if other == place - 1 and row.prev_hash in hashes:
                return AuditBreak(
                    BreakKind.INSERTED, "it was sealed one place earlier: a row inserted before it", chain, place
                )
            if other == place + 1 and row.prev_hash not in hashes:
                return AuditBreak(
                    BreakKind.DELETED, "it was sealed one place later: the row before it deleted", chain, place
                )
            return AuditBreak(BreakKind.REORDERED, f"it was sealed at chain_seq {other}", chain, place)
    return AuditBreak(BreakKind.EDITED, "its contents do not match its hash", chain, place)


def _head_break(chain: str, computed: Head | None, stored: Head | None) -> AuditBreak | None:
    if computed == stored:
        return None
    if stored is None:
        assert computed is not None
        return AuditBreak(BreakKind.HEAD_EDITED, "its head is gone from the heads table", chain, computed.chain_seq)
    if computed is None:
        return AuditBreak(
            BreakKind.CHAIN_DELETED, f"its head says chain_seq {stored.chain_seq}, and no row is left", chain
        )
    if stored.chain_seq > computed.chain_seq:
        what = f"the rows end at chain_seq {computed.chain_seq}, its head says {stored.chain_seq}"
        return AuditBreak(BreakKind.TRUNCATED, what, chain, computed.chain_seq + 1)
    if stored.chain_seq < computed.chain_seq:
        what = f"rows go on past its head (chain_seq {stored.chain_seq})"
        return AuditBreak(BreakKind.INSERTED, what, chain, stored.chain_seq + 1)
    return AuditBreak(BreakKind.HEAD_EDITED, "its head's hash is not its last row's", chain, stored.chain_seq)


def _coverage_break(chain: str, walk: _Walk, covered: Head | None, last: int) -> AuditBreak | None:
    computed = walk.head
    if covered is None:
        if computed is None:
            return None
        what = "sealed, but covered by no checkpoint (rows added by hand, or the latest checkpoints deleted)"
        return AuditBreak(BreakKind.INSERTED, what, chain, 1)
    if computed is None:
        what = f"covered up to chain_seq {covered.chain_seq}, and no row is left"
        return AuditBreak(BreakKind.CHAIN_DELETED, what, chain, checkpoint_id=last)
    if computed.chain_seq < covered.chain_seq:
        what = f"covered up to chain_seq {covered.chain_seq}, the rows end at {computed.chain_seq}"
        return AuditBreak(BreakKind.TRUNCATED, what, chain, computed.chain_seq + 1, last)
    if walk.hashes.get(covered.chain_seq) != covered.row_hash:
        what = "the chain up to here is not the one the checkpoint signed (rewritten with recomputed hashes)"
        return AuditBreak(BreakKind.REWRITTEN, what, chain, covered.chain_seq, last)
    if computed.chain_seq > covered.chain_seq:
        what = "sealed after the last checkpoint, and covered by none (added by hand, or checkpoints deleted)"
        return AuditBreak(BreakKind.INSERTED, what, chain, covered.chain_seq + 1)
    return None
