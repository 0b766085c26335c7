"""Tamper evidence of the audit trail: what a seal did, what verify found, and how it judges the evidence.

`Store.seal_audit` chains the audit rows written since the last seal and signs a checkpoint over the heads of
the chains it moved, linked to the checkpoint before (see `mcp_elicit.model.audit_chain`). `Store.verify_audit`
reads the checkpoints, the heads and then the rows one chain at a time, in one snapshot, and hands them to an
`AuditJudge`, which recomputes everything and names each break it finds.

Guarantee, relative to a checkpoint recorded outside the database (an anchor: the `ID:ROOT` verify prints, the
sealer's log line): every row that checkpoint covered is as it was when sealed. A row edited, deleted,
inserted or moved inside a chain, a head edited, a chain deleted or truncated or rewritten with recomputed
hashes, a checkpoint not signed by one of the public keys verify is given, and the anchored checkpoint gone or
changed are found. Exposure: the rows not sealed yet and every row sealed after the last anchor, since
whoever can write to the database can delete the latest checkpoints (back to any of them, or all) with what
they sealed, edit the rows left unsealed, and have them signed again. The running sealer refuses to (it
remembers the last checkpoint it signed, and checks the heads it extends against the checkpoints), a seal given
`written_after` signs no row from before its caller's mark, and verify fails when a row stays covered by no
checkpoint longer than `max_exposure`, whatever the checkpoints say: nothing stored in the database, which that
writer controls, loosens a check. That window runs from the time a row says it was written, which the same
writer can set: a rewrite sealed again, or dated to look recent, is what only an anchor finds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from mcp_elicit.model import AuditEntry
from mcp_elicit.model.audit_chain import EMPTY_ROOT, GENESIS, ChainedRow, CheckpointClaim, Head, checkpoint_root
from mcp_elicit.model.audit_keys import AuditPublicKeys, Signature
from mcp_elicit.store.errors import StoreCorrupt

SEAL_BATCH = 5000
"""Rows a seal chains at most in one transaction (and one checkpoint)."""
DEFAULT_MAX_EXPOSURE = timedelta(minutes=10)
"""How long verify lets a row stay covered by no checkpoint, by default, before it calls that a break. A served
app seals every few seconds and once more as it stops, and the commands that write audit rows seal what they
wrote, so a healthy trail stays far inside it; a trail sealed only by hand needs a window at its cadence."""
FUTURE_SLACK = timedelta(minutes=5)
"""How far ahead of verify's clock an unsealed row may be dated (clocks of other hosts) before it is a break."""
NAMED_UNREADABLE = 5
"""Unsealed rows the store cannot read that verify names one by one (it counts them all)."""


class AuditSealRefused(StoreCorrupt):
    """A seal would sign over a trail that is not the one the checkpoints signed (heads edited, the checkpoint
    the sealer signed last gone or changed): nothing was sealed, and nothing will be until someone looks."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """A checkpoint's id and root kept outside the database: verify requires that checkpoint to be there, as it
    was. Written `ID:ROOT`, as verify prints it and `--anchor` takes it."""

    checkpoint_id: int
    root: str

    def __str__(self) -> str:
        return f"{self.checkpoint_id}:{self.root}"

    @classmethod
    def parse(cls, text: str) -> Anchor:
        number, colon, root = text.strip().partition(":")
        root = root.lower()
        if not colon or not number.isdigit() or int(number) < 1 or len(root) != 64 or not _is_hex(root):
            raise ValueError(f"{text!r} is not an anchor: expected ID:ROOT, a checkpoint number and its 64-hex root")
        return cls(int(number), root)


def _is_hex(text: str) -> bool:
    return all(char in "0123456789abcdef" for char in text)


@dataclass(frozen=True, slots=True)
class SealResult:
    rows: int
    """Rows chained by this seal."""
    chains: int = 0
    """Chains those rows extended."""
    checkpoint_id: int | None = None
    """The checkpoint this seal signed; None when there was nothing to seal, or another instance was sealing."""
    root: str | None = None
    unreadable: tuple[int, ...] = ()
    """The `seq` of unsealed rows the store cannot read (edited by hand) that this seal read past: left unsealed,
    so verify flags them."""
    more: bool = False
    """Whether unsealed rows may be left that this seal did not take (a full batch, or another seal came between
    its reading and its writing): seal again."""
    earlier: EarlierRows | None = None
    """Given `written_after`, the unsealed rows written before that mark, when there are any: this seal signed
    nothing."""
    turn: bool = True
    """False when another seal held the turn (on PostgreSQL, another instance, or a seal just cancelled whose
    session still holds the lock): this seal signed nothing, and a caller that must seal now tries again."""

    @property
    def anchor(self) -> Anchor | None:
        return None if self.checkpoint_id is None or self.root is None else Anchor(self.checkpoint_id, self.root)


@dataclass(frozen=True, slots=True)
class EarlierRows:
    """Unsealed rows a seal was not asked to vouch for: written before the mark its caller took."""

    rows: int
    seq: int
    """The first of them."""
    oldest_at: datetime | None
    """When the oldest of them says it was written; None when that cannot be read."""


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
    ANCHOR_BROKEN = "anchor broken"
    EXPOSED = "not covered in time"


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
            chain=e.subject_id, chain_seq=place or 0, prev_hash=self.prev_hash or "", seq=e.seq,
            subject_kind=e.subject_kind.value, subject_id=e.subject_id, from_status=e.from_status,
            to_status=e.to_status, actor=e.actor, reason=e.reason, details=e.details, at=e.at,
        )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class UnreadableAuditRow:
    """A stored audit row the store cannot decode (edited by hand): a break where it stands in its chain."""

    chain: str
    seq: object
    chain_seq: int | None
    """Its place as stored, when that at least is a number."""
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredCheckpoint:
    claim: CheckpointClaim
    signature: Signature
    delta: dict[str, Head]
    """The heads this checkpoint moved (the full set is the replay of every delta up to it)."""


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
    anchors: int = 0
    """Anchors checked (and found as they were, when the report is sound)."""
    oldest_unsealed_at: datetime | None = None
    unreadable_unsealed: int = 0
    """Unsealed rows the store cannot read (each a break; the first `NAMED_UNREADABLE` are named)."""

    @property
    def sound(self) -> bool:
        return not self.breaks

    @property
    def anchor(self) -> Anchor | None:
        """The last checkpoint as an anchor, to keep outside the database and give the next verify."""
        last = self.last_checkpoint
        return None if last is None else Anchor(last.checkpoint_id, last.root)


@dataclass(slots=True)
class _Walk:
    """One chain as its rows give it: its head so far, its first break, and the hash at a place asked about."""

    head: Head | None = None
    broken: AuditBreak | None = None
    hashes: dict[int, str] = field(default_factory=dict)


class AuditJudge:
    """Recomputes the evidence fed to it in order: checkpoints (`checkpoint`, in id order), then the heads
    (`heads`), then each chain's rows (`chain`, any chain order), then each unsealed row (`unsealed`, by `seq`).

    Checkpoints come first (nothing a forged checkpoint says counts); one break per chain, the first found; a
    broken anchor is named before anything else. Memory holds one chain's rows, and a head per chain.
    """

    def __init__(
        self,
        keys: AuditPublicKeys,
        *,
        migrated_through: int,
        anchors: Sequence[Anchor] = (),
        now: datetime | None = None,
        max_exposure: timedelta | None = None,
    ) -> None:
        self._keys = keys
        self._migrated_through = migrated_through
        self._anchors = {anchor.checkpoint_id: anchor.root for anchor in anchors}
        self._anchor_count = len(self._anchors)
        self._now = now
        self._max_exposure = max_exposure
        self._anchor_breaks: list[AuditBreak] = []
        self._breaks: list[AuditBreak] = []
        self._covered: dict[str, Head] = {}
        self._prev_root = EMPTY_ROOT
        self._expected = 1
        self._replaying = True
        self._last: StoredCheckpoint | None = None
        self._heads: dict[str, Head] = {}
        self._seen: set[str] = set()
        self._rows = self._migrated = self._unsealed = self._unreadable = 0
        self._oldest: SealedRow | None = None
        self._future = 0
        self._first_future: SealedRow | None = None

    def checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        claim = checkpoint.claim
        number = claim.checkpoint_id
        self._last = checkpoint
        anchored = self._anchors.pop(number, None)
        if anchored is not None and anchored != claim.root:
            what = f"its root is {claim.root}, the anchor kept outside the store says {anchored}"
            self._anchor_breaks.append(AuditBreak(BreakKind.ANCHOR_BROKEN, what, checkpoint_id=number))
        if not self._replaying:
            return
        self._covered.update(checkpoint.delta)
        problem = self._checkpoint_break(checkpoint)
        if problem is not None:
            self._breaks.append(problem)
            self._replaying = False
            return
        self._prev_root = claim.root
        self._expected += 1

    def unreadable_checkpoint(self, number: int | None, why: str) -> None:
        """A checkpoint the store cannot read (edited by hand), in its place: nothing after it counts."""
        anchored = None if number is None else self._anchors.pop(number, None)
        if anchored is not None:
            what = f"it cannot be read ({why}); the anchor kept outside the store says its root is {anchored}"
            self._anchor_breaks.append(AuditBreak(BreakKind.ANCHOR_BROKEN, what, checkpoint_id=number))
        if self._replaying:
            what = f"it cannot be read: {why}"
            self._breaks.append(AuditBreak(BreakKind.CHECKPOINT_EDITED, what, checkpoint_id=number))
            self._replaying = False

    def _checkpoint_break(self, checkpoint: StoredCheckpoint) -> AuditBreak | None:
        claim, signature, expected = checkpoint.claim, checkpoint.signature, self._expected
        number = claim.checkpoint_id
        if number != expected:
            missing = f"checkpoint {expected}" if number == expected + 1 else f"checkpoints {expected} to {number - 1}"
            return AuditBreak(BreakKind.CHECKPOINT_MISSING, f"{missing} before it are gone", checkpoint_id=number)
        if signature.key_id not in self._keys:
            what = f"signed by key {signature.key_id}, which is not among the public keys given"
            return AuditBreak(BreakKind.UNKNOWN_KEY, what, checkpoint_id=number)
        if not self._keys.verifies(signature, claim.message()):
            what = f"its signature does not verify with key {signature.key_id}"
            return AuditBreak(BreakKind.CHECKPOINT_FORGED, what, checkpoint_id=number)
        problem = None
        if claim.prev_root != self._prev_root:
            problem = "it does not follow the checkpoint before it (previous root differs)"
        elif checkpoint_root(self._prev_root, checkpoint.delta) != claim.root or claim.chains != len(checkpoint.delta):
            problem = "its stored heads do not give the root it signed"
        elif claim.migrated_through != self._migrated_through:
            signed, stored = claim.migrated_through, self._migrated_through
            problem = f"it signed rows up to seq {signed} as chained at migration; the store says {stored}"
        return None if problem is None else AuditBreak(BreakKind.CHECKPOINT_EDITED, problem, checkpoint_id=number)

    def heads(self, heads: dict[str, Head]) -> None:
        self._heads = heads

    def chain(self, chain: str, rows: Sequence[SealedRow | UnreadableAuditRow]) -> None:
        """One chain's sealed rows, in chain order; each chain once."""
        self._seen.add(chain)
        self._rows += len(rows)
        self._migrated += sum(
            1 for row in rows if isinstance(row, SealedRow) and row.entry.seq <= self._migrated_through
        )
        covered = self._covered.get(chain)
        walk = _walk(chain, rows, None if covered is None else covered.chain_seq)
        self._judged(chain, walk)

    def _judged(self, chain: str, walk: _Walk) -> None:
        found = walk.broken or _head_break(chain, walk.head, self._heads.get(chain))
        last = self._last.claim.checkpoint_id if self._last is not None else 0
        found = found or _coverage_break(chain, walk, self._covered.get(chain), last)
        if found is not None:
            self._breaks.append(found)

    def unsealed(self, row: SealedRow | UnreadableAuditRow) -> None:
        """Each row no seal chained yet, in `seq` order: the exposure runs from the earliest time any of them
        says (a row with a lower `seq` may say a later time), and one dated ahead of the clock is a break."""
        self._unsealed += 1
        if isinstance(row, SealedRow):
            if self._oldest is None or row.entry.at < self._oldest.entry.at:
                self._oldest = row
            if self._now is not None and row.entry.at > self._now + FUTURE_SLACK:
                self._future += 1
                if self._future == 1:
                    self._first_future = row
            return
        self._unreadable += 1
        if self._unreadable <= NAMED_UNREADABLE:
            what = f"an unsealed row (seq {row.seq}) cannot be read: {row.why}"
            self._breaks.append(AuditBreak(BreakKind.EDITED, what, row.chain))

    def _exposed(self) -> AuditBreak | None:
        oldest, limit = self._oldest, self._max_exposure
        if oldest is None or self._now is None or limit is None or self._now - oldest.entry.at <= limit:
            return None
        entry, last = oldest.entry, self._last
        why = (
            "no sealer ran, it refused to sign, or every checkpoint was deleted and the rows unsealed"
            if last is None
            else f"no sealer ran since checkpoint {last.claim.checkpoint_id}, it refused to sign, or the checkpoints "
            f"after {last.claim.checkpoint_id} were deleted and their rows unsealed"
        )
        what = (
            f"{self._unsealed:,} rows are covered by no checkpoint, the oldest (seq {entry.seq}, written "
            f"{entry.at.isoformat(timespec='seconds')}) for longer than {limit}, the max exposure: {why}"
        )
        return AuditBreak(BreakKind.EXPOSED, what, entry.subject_id)

    def _dated_ahead(self) -> AuditBreak | None:
        """An unsealed row dated ahead of the clock would stay inside any max exposure for as long as it says."""
        row = self._first_future
        if row is None or self._now is None:
            return None
        entry = row.entry
        more = "" if self._future == 1 else f" (and {self._future - 1:,} more unsealed rows)"
        what = (
            f"an unsealed row (seq {entry.seq}) says it was written {entry.at.isoformat(timespec='seconds')}, later "
            f"than now ({self._now.isoformat(timespec='seconds')}) by more than {FUTURE_SLACK}{more}: dated ahead, it "
            "would escape the max exposure"
        )
        return AuditBreak(BreakKind.EDITED, what, entry.subject_id)

    def report(self) -> AuditReport:
        for chain in sorted((set(self._heads) | set(self._covered)) - self._seen):
            self._judged(chain, _Walk())
        last = self._last
        end = last.claim.checkpoint_id if last is not None else 0
        for number, root in sorted(self._anchors.items()):
            what = (
                f"gone: the anchor kept outside the store names it (root {root}); the store's checkpoints end at {end}"
            )
            self._anchor_breaks.append(AuditBreak(BreakKind.ANCHOR_BROKEN, what, checkpoint_id=number))
        if self._unreadable > NAMED_UNREADABLE:
            what = f"and {self._unreadable - NAMED_UNREADABLE:,} more unsealed rows cannot be read"
            self._breaks.append(AuditBreak(BreakKind.EDITED, what))
        exposed = self._exposed()
        if exposed is not None:
            self._breaks.append(exposed)
        future = self._dated_ahead()
        if future is not None:
            self._breaks.append(future)
        oldest = self._oldest
        return AuditReport(
            breaks=[*self._anchor_breaks, *self._breaks], chains=len(self._seen), rows_sealed=self._rows,
            unsealed=self._unsealed, last_checkpoint=None if last is None else last.claim,
            last_key_id=None if last is None else last.signature.key_id, migrated_through=self._migrated_through,
            migrated_rows=self._migrated, anchors=self._anchor_count,
            oldest_unsealed_at=None if oldest is None else oldest.entry.at, unreadable_unsealed=self._unreadable,
        )  # fmt: skip


def _walk(chain: str, rows: Sequence[SealedRow | UnreadableAuditRow], wanted: int | None) -> _Walk:
    walk = _Walk()
    previous = GENESIS
    hashes = {row.row_hash for row in rows if isinstance(row, SealedRow)}
    unreadable = next((row for row in rows if isinstance(row, UnreadableAuditRow)), None)
    if unreadable is not None:
        places = {row.chain_seq for row in rows if isinstance(row, SealedRow)}
        where = unreadable.chain_seq or next(place for place in itertools.count(1) if place not in places)
        what = f"the row (seq {unreadable.seq}) cannot be read: {unreadable.why}"
        walk.broken = AuditBreak(BreakKind.EDITED, what, chain, where)
        return walk
    for place, row in enumerate(rows, start=1):
        assert isinstance(row, SealedRow)
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
