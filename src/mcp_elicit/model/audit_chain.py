"""The audit trail's hash chains and checkpoints, as pure functions: what the sealer writes and verify recomputes.

A chain is one subject's audit rows (an operation's, a decision's, a grant's, a vault entry's), in the order the
sealer appended them: per-subject chains need no mapping of a decision to its operation, and two writers of
different subjects never touch the same chain. Each row's hash covers its contents, its chain, its place in the
chain and the hash of the row before it, so editing, deleting, inserting or moving a row inside a chain breaks
the chain from there on.

A checkpoint signs, with Ed25519, a root that hashes the previous checkpoint's root together with the Merkle
root over the heads (last place and hash) of the chains this checkpoint moved, sorted by chain: the roots form
a chain of their own, so one checkpoint's root commits to every head any checkpoint up to it signed, while a
seal costs only what it seals (not every chain ever written). Whoever can rewrite rows and recompute their
hashes still cannot delete, truncate or rewrite a chain a checkpoint covered without the signing key, because
the recomputed root would differ from the signed one; and whoever deletes the latest checkpoints to rewrite what
they covered is caught by a checkpoint's id and root kept outside the database (an anchor).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from mcp_elicit.model.digest import canonical_json
from mcp_elicit.model.json import JSONObject

GENESIS = "0" * 64
"""The `prev_hash` of a chain's first row."""
EMPTY_ROOT = hashlib.sha256(b"").hexdigest()
"""The root over no chains (and the previous root of the first checkpoint)."""
_LEAF = b"\x00"
_NODE = b"\x01"
_LINK = b"\x02"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainedRow:
    """An audit row as its hash covers it: its chain (the subject's id), place and link, and its contents."""

    chain: str
    chain_seq: int
    prev_hash: str
    seq: int
    """The row's place among all audit rows: covered, so that the export's order and paging cannot be changed."""
    subject_kind: str
    subject_id: str
    from_status: str | None
    to_status: str
    actor: str
    reason: str
    details: JSONObject
    at: datetime

    def digest(self) -> str:
        """SHA-256 (hex) of the row's canonical encoding; `at` in UTC to the microsecond, as both engines keep it."""
        encoded = canonical_json(
            [
                "mcp-elicit audit row v1", self.chain, self.chain_seq, self.prev_hash, self.seq, self.subject_kind,
                self.subject_id, self.from_status, self.to_status, self.actor, self.reason, self.details,
                self.at.astimezone(UTC).isoformat(timespec="microseconds"),
            ]
        )  # fmt: skip
        return hashlib.sha256(encoded.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Head:
    """Where a chain ends: its last row's place and hash."""

    chain_seq: int
    row_hash: str


def merkle_root(heads: dict[str, Head]) -> str:
    """The Merkle root (hex) over the given chains' heads, sorted by chain; leaves and nodes are domain-separated
    (RFC 6962's 0x00 and 0x01 prefixes), an odd node is carried up as it is."""
    level = [_leaf(chain, heads[chain]) for chain in sorted(heads)]
    if not level:
        return EMPTY_ROOT
    while len(level) > 1:
        pairs = [hashlib.sha256(_NODE + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        level = [*pairs, level[-1]] if len(level) % 2 else pairs
    return level[0].hex()


def checkpoint_root(prev_root: str, delta: dict[str, Head]) -> str:
    """A checkpoint's root: the previous root linked to the Merkle root over the heads this checkpoint moved."""
    return hashlib.sha256(_LINK + prev_root.encode() + merkle_root(delta).encode()).hexdigest()


def _leaf(chain: str, head: Head) -> bytes:
    return hashlib.sha256(_LEAF + canonical_json([chain, head.chain_seq, head.row_hash]).encode()).digest()


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointClaim:
    """What a checkpoint's signature covers: its number, time, root, the root before it, and its counts (`chains`:
    the chains it moved)."""

    checkpoint_id: int
    sealed_at: datetime
    prev_root: str
    root: str
    chains: int
    rows_sealed: int
    migrated_through: int
    """The highest audit `seq` written before the store chained its audit (schema 11): rows up to it were chained
    at migration, not within seconds of being written."""
    sealer_running: bool
    """Whether a served app's sealer, which seals every few seconds, runs on the store: True from that sealer while
    it runs, False from it as it stops; a seal by hand repeats what the checkpoint before it said. Information
    verify prints, never a reason to check less: whoever can write to the database can delete the checkpoints
    back to one that says False."""

    def message(self) -> bytes:
        """The bytes signed: a canonical JSON object, labelled so that no other signed document can pass for it."""
        return canonical_json(
            {
                "type": "mcp-elicit audit checkpoint v1",
                "checkpoint_id": self.checkpoint_id,
                "sealed_at": self.sealed_at.astimezone(UTC).isoformat(timespec="microseconds"),
                "prev_root": self.prev_root,
                "root": self.root,
                "chains": self.chains,
                "rows_sealed": self.rows_sealed,
                "migrated_through": self.migrated_through,
                "sealer_running": self.sealer_running,
            }
        ).encode()
