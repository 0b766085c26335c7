"""The audit trail's tamper evidence on both engines: chains, checkpoints, verify naming each kind of tampering."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mcp_elicit.model import DecisionStatus, System
from mcp_elicit.model.audit_chain import GENESIS, ChainedRow
from mcp_elicit.model.audit_keys import AuditKeyError, AuditPublicKeys, AuditSigningKeys, key_id
from mcp_elicit.store import SCHEMA_VERSION, Store, open_store, utc_now
from mcp_elicit.store.audit import (
    DEFAULT_MAX_EXPOSURE,
    NAMED_UNREADABLE,
    Anchor,
    AuditReport,
    AuditSealRefused,
    BreakKind,
    EarlierRows,
    SealResult,
)
from mcp_elicit.store.postgres import SEAL_LOCK
from tests.helpers.audit_tamper import Statement, chain_rows, cut_back, rehashed, run_sql
from tests.helpers.clock import FakeClock
from tests.helpers.migrations import SINCE_SCHEMA_10, take_back
from tests.helpers.records import ALICE, Records

KEYS = AuditSigningKeys([bytes(range(32))])
PUBLIC = KEYS.public()


@dataclass(frozen=True)
class Trail:
    """A sealed store: one decision whose chain has five rows, another decision, their operations."""

    store: Store
    url: str
    chain: str
    other: str
    checkpoints: int


def seal_all(store: Store, keys: AuditSigningKeys = KEYS) -> int:
    checkpoints = 0
    while store.seal_audit(keys).rows:
        checkpoints += 1
    return checkpoints


def long_chain(records: Records, notes: int = 3) -> str:
    decision = records.form()
    for number in range(notes):
        records.store.note(decision, actor=System("checker"), reason=f"looked at it ({number})")
    records.store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})
    return decision.elicitation_id


@pytest.fixture
def trail(store_url: str, clock: FakeClock) -> Iterator[Trail]:
    store = open_store(store_url, clock=clock)
    try:
        records = Records(store, clock)
        chain = long_chain(records)
        first = seal_all(store)
        other = records.form().elicitation_id
        yield Trail(store, store_url, chain, other, first + seal_all(store))
    finally:
        store.close()


def only_break(report: AuditReport) -> tuple[BreakKind, str | None, int | None, int | None]:
    assert report.breaks, "verify found nothing"
    first = report.breaks[0]
    return first.kind, first.chain, first.chain_seq, first.checkpoint_id


def test_a_sealed_trail_verifies_and_names_what_is_not_covered_yet(trail: Trail, clock: FakeClock) -> None:
    store = trail.store
    report = store.verify_audit(PUBLIC)
    assert report.sound, report.breaks
    assert trail.checkpoints == 2
    assert report.last_checkpoint is not None and report.last_checkpoint.checkpoint_id == 2
    assert report.last_key_id == PUBLIC.ids()[0]
    assert report.rows_sealed == 5 + 1 + 1 + 1 and report.chains == 4 and report.unsealed == 0
    assert [row.chain_seq for row in chain_rows(store, trail.chain)] == [1, 2, 3, 4, 5]
    Records(store, clock).form()
    later = store.verify_audit(PUBLIC)
    assert later.sound and later.unsealed == 2, "rows written since the last seal are the exposure, not a break"
    assert store.seal_audit(KEYS).checkpoint_id == 3
    assert store.verify_audit(PUBLIC).unsealed == 0


def test_each_row_links_to_the_one_before_in_its_own_subjects_chain(trail: Trail) -> None:
    rows = chain_rows(trail.store, trail.chain)
    assert rows[0].prev_hash == GENESIS
    for before, row in itertools.pairwise(rows):
        assert row.prev_hash == before.row_hash
        assert row.chained().digest() == row.row_hash
    other = chain_rows(trail.store, trail.other)
    assert [row.chain_seq for row in other] == [1] and other[0].prev_hash == GENESIS


def _row(trail: Trail, place: int, chain: str | None = None) -> ChainedRow:
    [row] = [r for r in chain_rows(trail.store, chain or trail.chain) if r.chain_seq == place]
    return row.chained()


def _hash(trail: Trail, place: int) -> str:
    return _row(trail, place).digest()


def _moved(chain: str, places: dict[int, int]) -> list[Statement]:
    """Renumber rows in two steps, so that no two rows share a place on the way (the unique index)."""
    where = "WHERE subject_id = %s AND chain_seq = %s"
    parked: list[Statement] = [
        (f"UPDATE elicit_audit SET chain_seq = %s {where}", (1000 + to, chain, at)) for at, to in places.items()
    ]
    back: list[Statement] = [
        (f"UPDATE elicit_audit SET chain_seq = %s {where}", (to, chain, 1000 + to)) for to in places.values()
    ]
    return parked + back


def _inserted(trail: Trail) -> list[Statement]:
    """A row forged at place 3 with a hash of its own (over the `seq` it was given) linked to place 2, the rows
    after it moved one place on."""
    forged = dataclasses.replace(_row(trail, 2), chain_seq=3, prev_hash=_hash(trail, 2), reason="approved by mallory")
    copy = (
        "INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at,"
        " chain_seq, prev_hash) SELECT subject_kind, subject_id, from_status, to_status, actor, %s, details,"
        " at, 3, %s FROM elicit_audit WHERE subject_id = %s AND chain_seq = 2 RETURNING seq"
    )
    *_, [(seq,)] = run_sql(
        trail.url, [*_moved(trail.chain, {5: 6, 4: 5, 3: 4}), (copy, (forged.reason, forged.prev_hash, trail.chain))]
    )
    digest = dataclasses.replace(forged, seq=seq).digest()
    return [("UPDATE elicit_audit SET row_hash = %s WHERE seq = %s", (digest, seq))]


def _truncated(trail: Trail) -> list[Statement]:
    return [
        ("DELETE FROM elicit_audit WHERE subject_id = %s AND chain_seq > 3", (trail.chain,)),
        ("UPDATE elicit_audit_heads SET chain_seq = 3, row_hash = %s WHERE chain = %s", (_hash(trail, 3), trail.chain)),
    ]


def _resigned(trail: Trail) -> list[Statement]:
    """Checkpoint 2 signed again, as it stands, with a key the verifier does not know."""
    intruder = AuditSigningKeys([secrets.token_bytes(32)])
    report = trail.store.verify_audit(PUBLIC)
    assert report.last_checkpoint is not None
    signature = intruder.sign(report.last_checkpoint.message())
    update = "UPDATE elicit_audit_checkpoints SET key_id = %s, signature = %s WHERE checkpoint_id = 2"
    return [(update, (signature.key_id, signature.value))]


def _forged_root(trail: Trail) -> list[Statement]:
    """Checkpoint 1's root and heads replaced to fit a rewritten chain, its signature left (no key to make one)."""
    return [
        ("UPDATE elicit_audit_checkpoint_heads SET row_hash = %s WHERE chain = %s", ("f" * 64, trail.chain)),
        ("UPDATE elicit_audit_checkpoints SET root = %s WHERE checkpoint_id = 1", ("e" * 64,)),
    ]


TAMPERING: dict[str, tuple[Callable[[Trail], list[Statement]], BreakKind, int | None]] = {
    "edit a field": (
        lambda t: [("UPDATE elicit_audit SET reason = 'fine' WHERE subject_id = %s AND chain_seq = 3", (t.chain,))],
        BreakKind.EDITED, 3,
    ),
    "edit the details": (
        lambda t: [("UPDATE elicit_audit SET actor = 'principal:mallory' WHERE subject_id = %s AND chain_seq = 5",
                    (t.chain,))],
        BreakKind.EDITED, 5,
    ),
    "delete a row": (
        lambda t: [("DELETE FROM elicit_audit WHERE subject_id = %s AND chain_seq = 3", (t.chain,))],
        BreakKind.DELETED, 3,
    ),
    "delete a row, renumber the rest": (
        lambda t: [("DELETE FROM elicit_audit WHERE subject_id = %s AND chain_seq = 3", (t.chain,)),
                   *_moved(t.chain, {4: 3, 5: 4})],
        BreakKind.DELETED, 3,
    ),
    "insert a row": (_inserted, BreakKind.INSERTED, 4),
    "reorder (swap chain_seq)": (lambda t: _moved(t.chain, {2: 3, 3: 2}), BreakKind.REORDERED, 2),
    "move a row in the export's order (its seq)": (
        lambda t: [(f"UPDATE elicit_audit SET seq = {'seq + 1000' if t.url.startswith('sqlite') else 'DEFAULT'}"
                    " WHERE subject_id = %s AND chain_seq = 3", (t.chain,))],
        BreakKind.EDITED, 3,
    ),
    "details made unreadable": (
        lambda t: [("UPDATE elicit_audit SET details = '[]' WHERE subject_id = %s AND chain_seq = 4", (t.chain,))],
        BreakKind.EDITED, 4,
    ),
    "an unknown subject kind": (
        lambda t: [("UPDATE elicit_audit SET subject_kind = 'planet' WHERE subject_id = %s AND chain_seq = 2",
                    (t.chain,))],
        BreakKind.EDITED, 2,
    ),
    "truncate the tail": (_truncated, BreakKind.TRUNCATED, 4),
    "truncate the tail, head left": (
        lambda t: [("DELETE FROM elicit_audit WHERE subject_id = %s AND chain_seq > 3", (t.chain,))],
        BreakKind.TRUNCATED, 4,
    ),
    "delete a whole chain": (
        lambda t: [("DELETE FROM elicit_audit WHERE subject_id = %s", (t.chain,)),
                   ("DELETE FROM elicit_audit_heads WHERE chain = %s", (t.chain,))],
        BreakKind.CHAIN_DELETED, None,
    ),
    "edit a head": (
        lambda t: [("UPDATE elicit_audit_heads SET row_hash = %s WHERE chain = %s", ("0" * 64, t.chain))],
        BreakKind.HEAD_EDITED, 5,
    ),
    "recompute the hashes": (lambda t: rehashed(chain_rows(t.store, t.chain), 3, "fine"), BreakKind.REWRITTEN, 5),
    "forge a checkpoint without the key": (_forged_root, BreakKind.CHECKPOINT_FORGED, None),
    "re-sign a checkpoint with another key": (_resigned, BreakKind.UNKNOWN_KEY, None),
    "delete a checkpoint": (
        lambda t: [("DELETE FROM elicit_audit_checkpoints WHERE checkpoint_id = 1", ())],
        BreakKind.CHECKPOINT_MISSING, None,
    ),
    "edit a checkpoint's heads": (
        lambda t: [("UPDATE elicit_audit_checkpoint_heads SET chain_seq = 4 WHERE chain = %s", (t.chain,))],
        BreakKind.CHECKPOINT_EDITED, None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(TAMPERING))
def test_verify_names_the_first_break_of_each_kind_of_tampering(trail: Trail, name: str) -> None:
    tamper, kind, place = TAMPERING[name]
    run_sql(trail.url, tamper(trail))
    report = trail.store.verify_audit(PUBLIC)
    assert not report.sound
    found_kind, chain, found_place, checkpoint = only_break(report)
    assert found_kind is kind, str(report.breaks[0])
    if kind in (BreakKind.CHECKPOINT_FORGED, BreakKind.UNKNOWN_KEY, BreakKind.CHECKPOINT_MISSING):
        assert checkpoint is not None and chain is None
    elif kind is not BreakKind.CHECKPOINT_EDITED:
        assert chain == trail.chain and found_place == place, str(report.breaks[0])
    assert trail.chain in str(report.breaks[0]) or checkpoint is not None


def test_verify_never_trusts_a_key_it_was_not_given(trail: Trail) -> None:
    stranger = AuditSigningKeys([secrets.token_bytes(32)]).public()
    report = trail.store.verify_audit(stranger)
    assert only_break(report)[0] is BreakKind.UNKNOWN_KEY
    assert str(report.breaks[0]).startswith("checkpoint 1: signed by key ")


def test_a_rotated_ring_still_verifies_what_the_older_key_signed(store_url: str, clock: FakeClock) -> None:
    old, new = bytes(range(32)), bytes(range(1, 33))
    store = open_store(store_url, clock=clock)
    try:
        records = Records(store, clock)
        long_chain(records)
        store.seal_audit(AuditSigningKeys([old]))
        long_chain(records)
        rotated = AuditSigningKeys([new, old])
        store.seal_audit(rotated)
        published = AuditPublicKeys.from_document(rotated.public().document())
        report = store.verify_audit(published)
        assert report.sound, report.breaks
        assert report.last_key_id == key_id(Ed25519PrivateKey.from_private_bytes(new).public_key())
        newest_only = AuditSigningKeys([new]).public()
        kind, _, _, checkpoint = only_break(store.verify_audit(newest_only))
        assert (kind, checkpoint) == (BreakKind.UNKNOWN_KEY, 1)
    finally:
        store.close()


def test_a_published_keys_document_is_checked_before_it_is_trusted() -> None:
    document = PUBLIC.document()
    [entry] = document["keys"]
    assert entry["alg"] == "Ed25519" and len(base64.urlsafe_b64decode(entry["x"] + "=")) == 32
    assert (entry["kty"], entry["crv"]) == ("OKP", "Ed25519"), "a JWK set, as JOSE libraries read one"
    legacy = {"keys": [{name: value for name, value in entry.items() if name not in ("kty", "crv")}]}
    assert AuditPublicKeys.from_document(legacy).ids() == PUBLIC.ids()
    as_jose_writes_it = {"keys": [{**entry, "alg": "EdDSA"}]}  # RFC 8037's name of the JWS algorithm
    assert AuditPublicKeys.from_document(as_jose_writes_it).ids() == PUBLIC.ids()
    for bad, message in (
        ({"keys": [{**entry, "kty": "EC"}]}, 'a JWK.s "kty" is "OKP"'),
        ({"keys": [{**entry, "crv": "X25519"}]}, 'its "crv" "Ed25519"'),
        ({"keys": [{**entry, "kid": "0" * 16}]}, "is not its key's id"),
        ({"keys": [{**entry, "x": "not base64!"}]}, "not a base64url Ed25519 public key"),
        ({"keys": [{**entry, "alg": "RS256"}]}, "not an Ed25519 key"),
        ({"keys": []}, "not an audit keys document"),
        ([], "not an audit keys document"),
    ):
        with pytest.raises(AuditKeyError, match=message):
            AuditPublicKeys.from_document(bad)
    with pytest.raises(AuditKeyError, match="an Ed25519 seed has 32"):
        AuditSigningKeys([bytes(31)])


def test_a_backlog_is_sealed_in_batches_each_with_its_checkpoint(store: Store, records: Records) -> None:
    for _ in range(4):
        long_chain(records, notes=1)
    assert store.seal_audit(KEYS, batch=5).rows == 5
    assert store.seal_audit(KEYS, batch=5).rows == 5
    rest = seal_all(store)
    report = store.verify_audit(PUBLIC)
    assert report.sound and report.rows_sealed == 4 * 4 and report.last_checkpoint is not None
    assert report.last_checkpoint.checkpoint_id == 2 + rest
    with pytest.raises(ValueError, match="at least one row"):
        store.seal_audit(KEYS, batch=0)


def test_nothing_to_seal_makes_no_checkpoint(store: Store) -> None:
    assert store.seal_audit(KEYS).checkpoint_id is None
    report = store.verify_audit(PUBLIC)
    assert report.sound and report.last_checkpoint is None and report.rows_sealed == 0


def test_export_pages_filters_by_time_and_operation(store: Store, records: Records, clock: FakeClock) -> None:
    first = records.form()
    clock.advance(timedelta(minutes=5))
    since = clock()
    second = records.form()
    store.transition(second, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})
    seal_all(store)
    everything = store.audit_export()
    assert [row.entry.seq for row in everything] == sorted(row.entry.seq for row in everything)
    assert {row.entry.subject_id for row in store.audit_export(since=since)} == {
        second.elicitation_id,
        second.operation_id,
    }
    ops = store.audit_export(operation_id=first.operation_id)
    assert {row.entry.subject_id for row in ops} == {first.elicitation_id, first.operation_id}
    page = store.audit_export(limit=2)
    assert store.audit_export(after=page[-1].entry.seq, limit=1)[0].entry.seq > page[-1].entry.seq
    assert all(row.row_hash is not None for row in everything)


def test_rows_written_before_schema_11_are_chained_at_migration_and_marked(store_url: str, clock: FakeClock) -> None:
    store = open_store(store_url, clock=clock)
    try:
        records = Records(store, clock)
        long_chain(records)
        written = len(store.audit_export())
    finally:
        store.close()
    take_back(store_url, SINCE_SCHEMA_10)
    store = open_store(store_url, clock=clock)
    try:
        assert store.schema_version() == SCHEMA_VERSION == 11
        before = store.verify_audit(PUBLIC)
        assert before.sound and before.unsealed == written and before.migrated_through == written
        long_chain(Records(store, clock))
        seal_all(store)
        report = store.verify_audit(PUBLIC)
        assert report.sound, report.breaks
        assert report.migrated_through == written and report.migrated_rows == written
        assert report.rows_sealed == 2 * written
        run_sql(store_url, [("UPDATE elicit_audit_origin SET migrated_through = 0", ())])
        kind, _, _, checkpoint = only_break(store.verify_audit(PUBLIC))
        assert (kind, checkpoint) == (BreakKind.CHECKPOINT_EDITED, 1)
    finally:
        store.close()


def test_a_fresh_store_marks_no_row_as_migrated(store: Store, records: Records) -> None:
    long_chain(records)
    seal_all(store)
    report = store.verify_audit(PUBLIC)
    assert report.migrated_through == 0 and report.migrated_rows == 0


def test_one_instance_seals_at_a_time(pg_schema_url: str, clock: FakeClock) -> None:
    store = open_store(pg_schema_url, clock=clock)
    try:
        Records(store, clock).form()
        with psycopg.connect(pg_schema_url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (SEAL_LOCK,))
            assert store.seal_audit(KEYS).rows == 0, "another instance holds the seal: this one leaves it"
            other.execute("SELECT pg_advisory_unlock(%s)", (SEAL_LOCK,))
        assert store.seal_audit(KEYS).rows == 2
    finally:
        store.close()


@pytest.mark.engines("sqlite", "postgres")
def test_verify_stays_green_under_concurrent_writers_while_the_sealer_runs(store_url: str) -> None:
    """Four writer threads, a sealer thread and a verifier thread on one store: every verify, taken from one
    snapshot while rows are written and sealed, is sound; at the end every row is sealed and covered."""
    store = open_store(store_url)
    stop = threading.Event()
    failures: list[BaseException] = []
    reports: list[AuditReport] = []

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                while not stop.is_set():
                    work()
            except BaseException as error:
                failures.append(error)
                stop.set()

        return run

    def write() -> None:
        decision = Records(store, utc_now).form()
        store.note(decision, actor=System("writer"), reason="noted")
        store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True})

    def seal() -> None:
        store.seal_audit(KEYS, batch=50)
        time.sleep(0.005)

    def verify() -> None:
        reports.append(store.verify_audit(PUBLIC))
        assert reports[-1].sound, reports[-1].breaks

    threads = [threading.Thread(target=guarded(work)) for work in (write, write, write, write, seal, verify)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(3)
        stop.set()
        for thread in threads:
            thread.join()
        assert not failures, failures
        seal_all(store)
        final = store.verify_audit(PUBLIC)
        assert final.sound and final.unsealed == 0
        assert final.rows_sealed == len(store.audit_export(limit=1_000_000))
        sealed_during = [report for report in reports if report.rows_sealed and report.unsealed]
        assert len(reports) >= 3 and sealed_during, "verify ran while rows were being written and sealed"
    finally:
        store.close()


def test_a_checkpoint_signs_only_the_heads_it_moved(trail: Trail) -> None:
    report = trail.store.verify_audit(PUBLIC)
    assert report.last_checkpoint is not None
    assert (report.last_checkpoint.chains, report.last_checkpoint.rows_sealed) == (2, 2), "the other decision alone"
    assert report.anchor == Anchor(2, report.last_checkpoint.root)


def test_rewriting_recent_history_without_the_key_is_caught_by_an_anchor(trail: Trail) -> None:
    """Checkpoint 2 deleted with its heads, the rows it sealed unsealed and edited, the heads put back as
    checkpoint 1 left them: a sealer that remembers checkpoint 2 refuses to sign; one that does not (a restart)
    signs a new checkpoint 2, and only the anchor kept outside the store tells."""
    store = trail.store
    anchor = store.verify_audit(PUBLIC).anchor
    assert anchor is not None and anchor.checkpoint_id == 2
    moved = cut_back(trail.url, 2)
    assert trail.other in moved
    run_sql(trail.url, [("UPDATE elicit_audit SET actor = 'principal:mallory' WHERE subject_id = %s", (trail.other,))])
    with pytest.raises(AuditSealRefused, match=f"checkpoint 2, signed by this sealer with root {anchor.root}, is gone"):
        store.seal_audit(KEYS, extends=anchor)
    assert store.verify_audit(PUBLIC).unsealed == 2, "the refused seal changed nothing"
    resealed = store.seal_audit(KEYS)
    assert resealed.checkpoint_id == 2 and resealed.root != anchor.root
    assert store.verify_audit(PUBLIC).sound, "without an anchor, the rewrite is out of sight"
    report = store.verify_audit(PUBLIC, anchors=[Anchor(1, _root(trail.url, 1)), anchor])
    kind, chain, _, checkpoint = only_break(report)
    assert (kind, chain, checkpoint) == (BreakKind.ANCHOR_BROKEN, None, 2)
    assert f"the anchor kept outside the store says {anchor.root}" in str(report.breaks[0])
    gone = store.verify_audit(PUBLIC, anchors=[Anchor(7, anchor.root)])
    assert only_break(gone)[::3] == (BreakKind.ANCHOR_BROKEN, 7)
    assert "gone" in str(gone.breaks[0]) and "the store's checkpoints end at 2" in str(gone.breaks[0])
    kept = store.verify_audit(PUBLIC, anchors=[Anchor(1, _root(trail.url, 1))])
    assert kept.sound and kept.anchors == 1


def _root(url: str, checkpoint_id: int) -> str:
    [[(root,)]] = run_sql(
        url, [("SELECT root FROM elicit_audit_checkpoints WHERE checkpoint_id = %s", (checkpoint_id,))]
    )
    return str(root)


def test_a_seal_refuses_to_extend_a_head_the_checkpoints_did_not_sign(trail: Trail, clock: FakeClock) -> None:
    run_sql(trail.url, rehashed(chain_rows(trail.store, trail.chain), 3, "fine"))
    run_sql(trail.url, [_one_more(trail.chain)])
    with pytest.raises(AuditSealRefused, match=f"the head of chain {trail.chain} is not the one the checkpoints"):
        trail.store.seal_audit(KEYS)
    report = trail.store.verify_audit(PUBLIC)
    assert report.unsealed == 1 and report.last_checkpoint is not None and report.last_checkpoint.checkpoint_id == 2


def test_a_seal_refuses_when_checkpoints_were_deleted_and_their_heads_left(trail: Trail, clock: FakeClock) -> None:
    run_sql(trail.url, [("DELETE FROM elicit_audit_checkpoints WHERE checkpoint_id = 2", ())])
    Records(trail.store, clock).form()
    with pytest.raises(AuditSealRefused, match="the heads of checkpoint 2 are stored without it"):
        trail.store.seal_audit(KEYS)


def _one_more(chain: str) -> Statement:
    """A row written to the chain since (a copy of its last row, unsealed)."""
    return (
        "INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)"
        " SELECT subject_kind, subject_id, from_status, to_status, actor, 'one more', details, at FROM elicit_audit"
        " WHERE subject_id = %s AND chain_seq = 5",
        (chain,),
    )


def test_rows_left_uncovered_past_the_max_exposure_are_a_break(
    store: Store, records: Records, clock: FakeClock
) -> None:
    decision = records.form()
    window = timedelta(minutes=10)
    assert store.verify_audit(PUBLIC, max_exposure=window).sound, "no checkpoint yet, but the rows are recent"
    clock.advance(timedelta(minutes=11))
    report = store.verify_audit(PUBLIC, max_exposure=window)
    kind, chain, _, _ = only_break(report)
    assert kind is BreakKind.EXPOSED and chain in (decision.elicitation_id, decision.operation_id)
    assert "2 rows are covered by no checkpoint" in str(report.breaks[0])
    assert store.verify_audit(PUBLIC, max_exposure=None).sound, "no max exposure, none checked"
    assert only_break(store.verify_audit(PUBLIC))[0] is BreakKind.EXPOSED, f"{DEFAULT_MAX_EXPOSURE} by default"
    seal_all(store)
    assert store.verify_audit(PUBLIC, max_exposure=window).sound


def test_an_unsealed_row_the_store_cannot_read_is_left_unsealed_and_named(
    store_url: str, store: Store, records: Records
) -> None:
    bad = records.form()
    good = records.form()
    [[(seq,)]] = run_sql(
        store_url,
        [("UPDATE elicit_audit SET details = '[]' WHERE subject_id = %s RETURNING seq", (bad.elicitation_id,))],
    )
    result = store.seal_audit(KEYS)
    assert result.unreadable == (seq,) and result.rows == 3 and result.checkpoint_id == 1
    report = store.verify_audit(PUBLIC)
    kind, chain, _, _ = only_break(report)
    assert (kind, chain) == (BreakKind.EDITED, bad.elicitation_id)
    assert f"an unsealed row (seq {seq}) cannot be read" in str(report.breaks[0])
    assert good.elicitation_id not in str(report.breaks)


def _unreadable(store_url: str, subjects: list[str], details: str = "[]") -> list[int]:
    """The audit rows of `subjects` edited by hand into something the store cannot read; their `seq`."""
    where = f"subject_id IN ({', '.join(['%s'] * len(subjects))})"
    [rows] = run_sql(store_url, [(f"UPDATE elicit_audit SET details = '{details}' WHERE {where} RETURNING seq",
                                  tuple(subjects))])  # fmt: skip
    return sorted(seq for (seq,) in rows)


def test_a_seal_reads_past_more_unreadable_rows_than_its_batch(store_url: str, store: Store, records: Records) -> None:
    """The oldest unsealed rows, more than a batch, cannot be read: the seal reads on past them and chains the
    rows after, and sealing again and again ends, every readable row sealed and the unreadable ones named."""
    _reads_past(store_url, store, records, "[]")


@pytest.mark.engines("sqlite")  # PostgreSQL's jsonb holds none of these
@pytest.mark.parametrize("details", ['{"x": NaN}', '{"x": 1e400}', '{"x": "\\ud800"}'])
def test_details_with_no_canonical_json_are_unreadable_to_a_seal(
    store_url: str, store: Store, records: Records, details: str
) -> None:
    """JSON mcp-elicit never writes, which has no canonical encoding to hash: unreadable, not a crash."""
    _reads_past(store_url, store, records, details)


def _reads_past(store_url: str, store: Store, records: Records, details: str) -> None:
    bad = [records.form() for _ in range(3)]
    good = [records.form() for _ in range(2)]
    seqs = _unreadable(store_url, [d.elicitation_id for d in bad] + [d.operation_id for d in bad], details)
    assert len(seqs) == 6
    first = store.seal_audit(KEYS, batch=4)
    assert first.rows == 2 and first.more and first.checkpoint_id == 1, first
    assert set(first.unreadable) == set(seqs), "two pages of unreadable rows read past"
    results = [first]
    while results[-1].more:
        results.append(store.seal_audit(KEYS, batch=4))
        assert len(results) < 10, results
    report = store.verify_audit(PUBLIC)
    assert report.rows_sealed == 2 * len(good) and report.unsealed == 6
    kind, chain, _, _ = only_break(report)
    assert kind is BreakKind.EDITED and chain in {d.elicitation_id for d in bad} | {d.operation_id for d in bad}
    assert f"an unsealed row (seq {seqs[0]}) cannot be read" in str(report.breaks[0])


def test_streams_past_a_page_follow_one_another_and_one_left_midway_is_closed(
    store_url: str, store: Store, clock: FakeClock
) -> None:
    """Verify streams the checkpoints, then the rows, in one snapshot, each longer than a page of the stream (1000
    rows); a seal streams the unsealed rows and leaves the stream after its batch, more rows left. Over and
    over on one store (one pool on PostgreSQL, the async engine's too): no cursor of one is in another's way."""
    insert = (
        "INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)"
        " VALUES ('operation', %s, NULL, 'open', 'system:test', 'written', '{}', %s)"
    )
    at = clock() if not store_url.startswith("sqlite") else int(clock().timestamp() * 1_000_000)
    run_sql(store_url, [(insert, (f"chain-{n % 1250}", at)) for n in range(2500)])
    for sealed in range(1, 4):
        result = store.seal_audit(KEYS, batch=700)
        assert (result.rows, result.more) == (700, True)
        report = store.verify_audit(PUBLIC)
        assert report.sound and report.rows_sealed == 700 * sealed, report.breaks
    assert seal_all(store) == 1
    report = store.verify_audit(PUBLIC)
    assert report.sound and report.rows_sealed == 2500 and report.chains == 1250 and report.unsealed == 0


class Overtaking(FakeClock):
    """A clock that, read once armed, first lets another seal run: as if it came between a seal's reading and
    its writing."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Callable[[], object] | None = None

    def __call__(self) -> datetime:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        return super().__call__()


def test_a_seal_overtaken_between_its_reading_and_its_writing_writes_nothing(store_url: str) -> None:
    clock = Overtaking()
    store, other = open_store(store_url, clock=clock), open_store(store_url)
    try:
        records = Records(store, clock)
        long_chain(records)
        overtaking: list[SealResult] = []
        clock.meanwhile = lambda: overtaking.append(other.seal_audit(KEYS))
        overtaken = store.seal_audit(KEYS)
        assert overtaking[0].checkpoint_id == 1 and overtaking[0].rows == 6
        assert overtaken.checkpoint_id is None and overtaken.rows == 0 and overtaken.more, "seal again, it says"
        records.form()
        again = store.seal_audit(KEYS)
        assert (again.checkpoint_id, again.rows, again.more) == (2, 2, False)
        report = store.verify_audit(PUBLIC)
        assert report.sound and report.unsealed == 0 and report.rows_sealed == 8, report.breaks
    finally:
        other.close()
        store.close()


def test_checkpoints_say_whether_a_served_apps_sealer_runs(store: Store, records: Records) -> None:
    def said() -> tuple[int, bool] | None:
        last = store.verify_audit(PUBLIC).last_checkpoint
        return None if last is None else (last.checkpoint_id, last.sealer_running)

    assert store.seal_audit(KEYS, running=False).checkpoint_id is None, "nothing to seal, nothing to say"
    started = store.seal_audit(KEYS, running=True)
    assert (started.checkpoint_id, started.rows) == (1, 0) and said() == (1, True), "it says it runs, no row"
    assert store.seal_audit(KEYS, running=True).checkpoint_id is None, "said already"
    records.form()
    assert store.seal_audit(KEYS).rows == 2 and said() == (2, True), "a seal by hand repeats what was said"
    records.form()
    stopped = store.seal_audit(KEYS, running=False)
    assert stopped.rows == 2 and said() == (3, False)
    assert store.seal_audit(KEYS, running=False).checkpoint_id is None
    records.form()
    assert store.seal_audit(KEYS).rows == 2 and said() == (4, False)
    assert store.seal_audit(KEYS, running=True).rows == 0 and said() == (5, True)
    assert store.verify_audit(PUBLIC).sound


def test_rows_unsealed_by_a_rollback_to_any_checkpoint_are_a_break_past_the_max_exposure(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    """A served app's sealer ran, stopped (its checkpoint says so), ran again and sealed a decision. Whoever can
    write to the database deletes the checkpoints back to the one written as the sealer stopped, or every one,
    and edits the rows left unsealed: nothing the checkpoints say loosens the default max exposure, so verify
    calls the rows a break once they are older than it. Within it, only an anchor tells."""
    records.form()
    store.seal_audit(KEYS, running=True)
    records.form()
    stopped = store.seal_audit(KEYS, running=False)
    assert stopped.anchor is not None
    started = store.seal_audit(KEYS, running=True)
    victim = records.form()
    last = store.seal_audit(KEYS, running=True, extends=started.anchor).anchor
    assert last is not None and store.verify_audit(PUBLIC).sound
    cut_back(store_url, stopped.anchor.checkpoint_id + 1)
    edit = "UPDATE elicit_audit SET actor = 'principal:mallory' WHERE subject_id = %s"
    run_sql(store_url, [(edit, (victim.elicitation_id,))])
    oldest = min(row.entry.seq for row in store.audit_export() if row.row_hash is None)
    recent = store.verify_audit(PUBLIC)
    assert recent.sound and recent.last_checkpoint is not None and not recent.last_checkpoint.sealer_running
    assert only_break(store.verify_audit(PUBLIC, anchors=[last]))[0] is BreakKind.ANCHOR_BROKEN
    clock.advance(DEFAULT_MAX_EXPOSURE + timedelta(seconds=1))
    report = store.verify_audit(PUBLIC)
    kind, chain, _, _ = only_break(report)
    assert (kind, chain) == (BreakKind.EXPOSED, victim.operation_id), str(report.breaks[0])
    assert f"2 rows are covered by no checkpoint, the oldest (seq {oldest}, written " in str(report.breaks[0])
    assert f"or the checkpoints after {stopped.anchor.checkpoint_id} were deleted" in str(report.breaks[0])
    cut_back(store_url, 1)
    wiped = store.verify_audit(PUBLIC)
    assert wiped.last_checkpoint is None and only_break(wiped)[0] is BreakKind.EXPOSED
    assert "6 rows are covered by no checkpoint, the oldest (seq 1," in str(wiped.breaks[0])
    assert "or every checkpoint was deleted and the rows unsealed" in str(wiped.breaks[0])


def test_a_seal_after_a_mark_signs_nothing_while_an_unsealed_row_from_before_it_waits(
    store: Store, records: Records, clock: FakeClock
) -> None:
    """What a command that wrote audit rows seals: only with every unsealed row written after the mark it took
    before writing. An older one may be a row a checkpoint covered, unsealed and edited by hand."""
    assert store.last_audit_seq() == 0
    before = records.form()
    written_at = clock()
    clock.advance(timedelta(minutes=3))
    mark = store.last_audit_seq()
    assert mark == 2
    records.form()
    held = store.seal_audit(KEYS, written_after=mark)
    assert (held.checkpoint_id, held.rows, held.more) == (None, 0, False)
    assert held.earlier == EarlierRows(rows=2, seq=1, oldest_at=written_at), before
    assert store.verify_audit(PUBLIC).unsealed == 4, "nothing was sealed"
    assert seal_all(store) == 1, "a seal by hand, the operator's word, seals them all"
    mark = store.last_audit_seq()
    records.form()
    sealed = store.seal_audit(KEYS, written_after=mark)
    assert (sealed.checkpoint_id, sealed.rows, sealed.earlier) == (2, 2, None)
    assert store.seal_audit(KEYS, written_after=mark).earlier is None


def test_verify_names_the_unreadable_unsealed_rows_behind_a_readable_one(
    store_url: str, store: Store, records: Records
) -> None:
    """The oldest unsealed row reads well; rows after it do not: each is a break, the first few named, all
    counted, whatever stands before them."""
    records.form()
    bad = [records.form() for _ in range(4)]
    seqs = _unreadable(store_url, [d.elicitation_id for d in bad] + [d.operation_id for d in bad])
    report = store.verify_audit(PUBLIC)
    assert report.unreadable_unsealed == 8 and report.unsealed == 10 and report.oldest_unsealed_at is not None
    named = [str(b) for b in report.breaks]
    assert len(named) == NAMED_UNREADABLE + 1 and all(b.kind is BreakKind.EDITED for b in report.breaks)
    for seq, said in zip(seqs[:NAMED_UNREADABLE], named, strict=False):
        assert f"an unsealed row (seq {seq}) cannot be read" in said
    assert named[-1] == f"and {8 - NAMED_UNREADABLE} more unsealed rows cannot be read (edited)"


@pytest.mark.engines("sqlite")
@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("chain_seq", "'three'"),
        ("at", "'yesterday'"),
        ("details", "'not json'"),
        ("details", """'{"x": NaN}'"""),
        ("details", """'{"x": "\\udfff"}'"""),
        ("reason", "CAST(X'EDA080' AS TEXT)"),
        ("actor", "CAST(X'FF' AS TEXT)"),
    ],
)
def test_a_sealed_row_the_store_cannot_read_is_an_edited_break(trail: Trail, column: str, value: str) -> None:
    run_sql(trail.url, [(f"UPDATE elicit_audit SET {column} = {value} WHERE subject_id = %s AND chain_seq = 3",
                         (trail.chain,))])  # fmt: skip
    report = trail.store.verify_audit(PUBLIC)
    kind, chain, place, _ = only_break(report)
    assert (kind, chain) == (BreakKind.EDITED, trail.chain), str(report.breaks[0])
    assert "cannot be read" in str(report.breaks[0]) and place == 3


@pytest.mark.engines("sqlite")  # PostgreSQL refuses text that is not in its encoding
@pytest.mark.parametrize("column", ["reason", "subject_id", "details", "from_status"])
def test_a_seal_reads_past_an_unsealed_row_whose_text_is_not_utf8(
    store_url: str, store: Store, records: Records, column: str
) -> None:
    """Bytes that are not UTF-8 stored as text by hand: the row is unreadable where it stands, not the whole
    statement, so sealing goes on past it and verify names it."""
    bad, good = records.form(), records.form()
    [[(seq,)]] = run_sql(
        store_url,
        [(f"UPDATE elicit_audit SET {column} = CAST(X'EDA080' AS TEXT) WHERE subject_id = %s RETURNING seq",
          (bad.elicitation_id,))],
    )  # fmt: skip
    result = store.seal_audit(KEYS)
    assert (result.unreadable, result.rows, result.checkpoint_id) == ((seq,), 3, 1)
    report = store.verify_audit(PUBLIC)
    assert report.rows_sealed == 3 and report.unreadable_unsealed == 1
    [found] = report.breaks
    assert f"an unsealed row (seq {seq}) cannot be read: audit row {seq}: column {column} holds text that is not" in (
        str(found)
    )
    assert good.elicitation_id not in str(found)


@pytest.mark.engines("sqlite")  # PostgreSQL refuses text that is not in its encoding
def test_a_checkpoint_the_store_cannot_read_is_an_edited_break(trail: Trail) -> None:
    run_sql(trail.url, [("UPDATE elicit_audit_checkpoints SET root = CAST(X'EDA080' AS TEXT) WHERE checkpoint_id = 1",
                         ())])  # fmt: skip
    report = trail.store.verify_audit(PUBLIC)
    kind, _, _, checkpoint = only_break(report)
    assert (kind, checkpoint) == (BreakKind.CHECKPOINT_EDITED, 1)
    assert "it cannot be read: audit checkpoint 1: column root holds text that is not UTF-8" in str(report.breaks[0])


@pytest.mark.engines("sqlite")  # PostgreSQL refuses text that is not in its encoding
@pytest.mark.parametrize(
    ("edits", "named"),
    [
        (["UPDATE elicit_audit_checkpoints SET root = CAST(X'EDA080' AS TEXT)"
          " WHERE checkpoint_id = (SELECT max(checkpoint_id) FROM elicit_audit_checkpoints)"],
         "the root of checkpoint 2 cannot be read as text"),
        (["UPDATE elicit_audit_heads SET row_hash = CAST(X'EDA080' AS TEXT) WHERE chain = %s",
          "UPDATE elicit_audit_checkpoint_heads SET row_hash = CAST(X'EDA080' AS TEXT) WHERE chain = %s"],
         "the head of chain {chain} cannot be read as text"),
    ],
    ids=["checkpoint root", "head"],
)  # fmt: skip
def test_a_seal_refuses_to_build_on_a_hash_that_is_not_text(trail: Trail, edits: list[str], named: str) -> None:
    """A root or head edited into bytes that are not UTF-8 reads back as bytes: a seal refuses it rather than
    signing on top of its `str()`."""
    run_sql(trail.url, [(sql, (trail.chain,) if "%s" in sql else ()) for sql in edits])
    trail.store.note(trail.store.get_decision(trail.chain, ALICE), actor=System("checker"), reason="one more")
    with pytest.raises(AuditSealRefused, match=named.format(chain=trail.chain)):
        trail.store.seal_audit(KEYS)


def test_the_exposure_runs_from_the_earliest_unsealed_row_and_a_row_dated_ahead_is_a_break(
    store: Store, records: Records, clock: FakeClock
) -> None:
    """On PostgreSQL a lower `seq` may say a later time than a higher one (and a hand edit can date any row):
    the exposure is measured from the earliest time any unsealed row says, and a row dated ahead of the clock,
    which no max exposure would ever catch, is a break naming it."""
    window = timedelta(minutes=10)
    records.form()
    clock.advance(-timedelta(minutes=11))
    early = records.form()
    clock.advance(timedelta(minutes=11))
    report = store.verify_audit(PUBLIC, max_exposure=window)
    kind, chain, _, _ = only_break(report)
    assert (kind, chain) == (BreakKind.EXPOSED, early.operation_id), str(report.breaks[0])
    assert "4 rows are covered by no checkpoint, the oldest (seq 3, " in str(report.breaks[0])
    assert report.oldest_unsealed_at == clock() - timedelta(minutes=11)
    seal_all(store)
    clock.advance(timedelta(hours=1))
    ahead = records.form()
    clock.advance(-timedelta(hours=1))
    assert not store.verify_audit(PUBLIC, max_exposure=None).sound, "no max exposure, still dated ahead"
    report = store.verify_audit(PUBLIC, max_exposure=window)
    kind, chain, _, _ = only_break(report)
    assert (kind, chain) == (BreakKind.EDITED, ahead.operation_id), str(report.breaks[0])
    assert "an unsealed row (seq 5) says it was written " in str(report.breaks[0])
    assert "by more than 0:05:00 (and 1 more unsealed rows)" in str(report.breaks[0])
    clock.advance(timedelta(minutes=56))
    assert store.verify_audit(PUBLIC, max_exposure=window).sound, "within the slack"
