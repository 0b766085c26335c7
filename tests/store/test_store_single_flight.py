"""Single flight in the store: one open operation per call, idempotency keys bound to one request, claims.

Each rule is checked on both engines, and the ones that rest on the database (unique indexes, row locks)
under real concurrency too: SQLite threads on one file, each with its own connection; PostgreSQL
separate store instances, each with its own pool, as separate server instances would be. A barrier
releases the contenders together. The migration to schema 4 is checked on a database built as schema 3
with the duplicates earlier versions could leave, the one to schema 7 (keys per caller) on one built as
schema 6.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from mcp_elicit.model import Operation, OperationStatus, Operator, Principal
from mcp_elicit.store import (
    SCHEMA_VERSION,
    AlreadyExists,
    Claim,
    IdempotencyKeyConflict,
    NotFound,
    OperationStart,
    Store,
    StoreError,
    open_store,
    schema_statements,
)
from mcp_elicit.store.migrations import Engine
from tests.helpers.clock import START, FakeClock
from tests.helpers.race import race
from tests.helpers.records import ALICE, ALICE_OTHER_CLIENT, BOB
from tests.helpers.single_flight import DIGEST, METHOD, TARGET, TTL, candidate, rows

T = TypeVar("T")

WORKERS = 20
OTHER_DIGEST = "sha256:" + "b" * 64
STEP = "step:plan"
OPERATOR = Operator("test")


def open_rows_of_call(store_url: str, *, digest: str = DIGEST) -> list[str]:
    return [
        row[0]
        for row in rows(
            store_url,
            "SELECT operation_id FROM elicit_operations WHERE status = 'open' AND method = %s AND target = %s"
            " AND request_digest = %s",
            (METHOD, TARGET, digest),
        )
    ]


def created_audit_rows(store_url: str) -> list[str]:
    return [
        row[0]
        for row in rows(
            store_url,
            "SELECT subject_id FROM elicit_audit WHERE subject_kind = 'operation' AND to_status = 'open'"
            " AND reason = 'created'",
        )
    ]


# -- concurrency harness ---------------------------------------------------------------------------


@contextmanager
def contenders(store_url: str, store: Store, clock: FakeClock) -> Iterator[list[Store]]:
    """One store per worker on PostgreSQL (separate pools), the shared store on SQLite (one connection a thread)."""
    if store_url.startswith("sqlite"):
        yield [store] * WORKERS
        return
    opened: list[Store] = []
    try:
        for _ in range(WORKERS):
            opened.append(open_store(store_url, clock=clock))
        yield opened
    finally:
        for each in opened:
            each.close()


def starts(outcomes: Sequence[OperationStart | Exception]) -> list[OperationStart]:
    failures = [o for o in outcomes if isinstance(o, Exception)]
    assert not failures, failures
    return [o for o in outcomes if isinstance(o, OperationStart)]


# -- begin_operation: one open operation per call ---------------------------------------------------


def test_begin_creates_the_operation_when_the_call_has_none(store: Store, clock: FakeClock) -> None:
    fresh = candidate(clock)
    started = store.begin_operation(fresh)
    assert started.created and started.operation == fresh
    assert store.get_operation(fresh.operation_id, ALICE) == fresh
    trail = store.audit_trail(fresh.operation_id, ALICE)
    assert [(e.from_status, e.to_status, e.reason, e.actor) for e in trail] == [(None, "open", "created", ALICE.actor)]


def test_begin_attaches_to_the_open_operation_of_the_same_call(store: Store, clock: FakeClock) -> None:
    first = store.begin_operation(candidate(clock)).operation
    clock.advance(timedelta(minutes=5))
    again = candidate(clock)
    attached = store.begin_operation(again)
    assert not attached.created
    assert attached.operation == first
    with pytest.raises(NotFound):
        store.get_operation(again.operation_id, OPERATOR)  # nothing of the candidate was stored
    assert len(store.audit_trail(first.operation_id, ALICE)) == 1
    assert store.find_operations(ALICE, method=METHOD, target=TARGET, request_digest=DIGEST) == [first]


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"principal": BOB}, id="another-principal"),
        pytest.param({"principal": ALICE_OTHER_CLIENT}, id="another-client"),
        pytest.param({"digest": OTHER_DIGEST}, id="other-arguments"),
        pytest.param({"target": "rollback"}, id="other-target"),
        pytest.param({"key": "key-1"}, id="same-call-with-a-key"),
    ],
)
def test_every_other_call_gets_its_own_operation(store: Store, clock: FakeClock, other: dict[str, Any]) -> None:
    first = store.begin_operation(candidate(clock)).operation
    second = store.begin_operation(candidate(clock, **other))
    assert second.created and second.operation.operation_id != first.operation_id
    assert store.get_operation(first.operation_id, ALICE).status is OperationStatus.OPEN
    assert store.get_operation(second.operation.operation_id, OPERATOR).status is OperationStatus.OPEN


def test_an_overdue_open_operation_is_expired_and_a_new_one_created(store: Store, clock: FakeClock) -> None:
    first = store.begin_operation(candidate(clock)).operation
    clock.advance(TTL)  # at expires_at: overdue
    fresh = candidate(clock)
    started = store.begin_operation(fresh)
    assert started.created and started.operation == fresh
    old = store.get_operation(first.operation_id, ALICE)
    assert old.status is OperationStatus.EXPIRED and old.version == first.version + 1
    last = store.audit_trail(first.operation_id, ALICE)[-1]
    assert (last.from_status, last.to_status, last.actor) == ("open", "expired", "system:clock")
    assert "overdue" in last.reason
    found = store.find_operations(ALICE, method=METHOD, target=TARGET, request_digest=DIGEST)
    assert [o.operation_id for o in found] == [fresh.operation_id, first.operation_id]


def test_an_open_operation_just_before_its_expiry_is_still_attached(store: Store, clock: FakeClock) -> None:
    first = store.begin_operation(candidate(clock)).operation
    clock.advance(TTL - timedelta(microseconds=1))
    attached = store.begin_operation(candidate(clock))
    assert not attached.created and attached.operation == first


def finished(store: Store, clock: FakeClock, to: OperationStatus, *, key: str | None = None) -> Operation:
    started = store.begin_operation(candidate(clock, key=key)).operation
    clock.advance(timedelta(minutes=10))
    return store.finish_operation(started, to, caller=ALICE, result={"deployed": True})


def test_a_completed_operation_within_the_replay_window_is_returned(store: Store, clock: FakeClock) -> None:
    completed = finished(store, clock, OperationStatus.COMPLETED)
    clock.advance(timedelta(minutes=5))
    for since in (clock() - timedelta(minutes=6), completed.updated_at):  # after, and exactly at, its update
        replayed = store.begin_operation(candidate(clock), replay_since=since)
        assert not replayed.created
        assert replayed.operation == store.get_operation(completed.operation_id, ALICE)
        assert replayed.operation.status is OperationStatus.COMPLETED
        assert replayed.operation.result == {"deployed": True}
    assert len(store.find_operations(ALICE, method=METHOD, target=TARGET, request_digest=DIGEST)) == 1


def test_a_completed_operation_older_than_the_replay_window_starts_anew(store: Store, clock: FakeClock) -> None:
    completed = finished(store, clock, OperationStatus.COMPLETED)
    clock.advance(timedelta(minutes=5))
    fresh = candidate(clock)
    started = store.begin_operation(fresh, replay_since=completed.updated_at + timedelta(microseconds=1))
    assert started.created and started.operation == fresh
    assert store.get_operation(completed.operation_id, ALICE).status is OperationStatus.COMPLETED


def test_without_a_replay_window_a_completed_operation_is_never_replayed(store: Store, clock: FakeClock) -> None:
    finished(store, clock, OperationStatus.COMPLETED)
    fresh = candidate(clock)
    started = store.begin_operation(fresh, replay_since=None)
    assert started.created and started.operation == fresh


@pytest.mark.parametrize("to", [OperationStatus.FAILED, OperationStatus.CANCELLED])
def test_a_failed_or_cancelled_operation_is_never_replayed(store: Store, clock: FakeClock, to: OperationStatus) -> None:
    ended = finished(store, clock, to)
    fresh = candidate(clock)
    started = store.begin_operation(fresh, replay_since=ended.updated_at - timedelta(hours=1))
    assert started.created and started.operation == fresh


def test_begin_refuses_a_candidate_that_is_not_open(store: Store, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="created open"):
        store.begin_operation(replace(candidate(clock), status=OperationStatus.COMPLETED))


# -- the database itself refuses a second open operation --------------------------------------------


def test_the_database_refuses_a_second_open_operation_for_one_call(store: Store, clock: FakeClock) -> None:
    first = store.create_operation(candidate(clock))
    with pytest.raises(StoreError) as refused:
        store.create_operation(candidate(clock))
    assert isinstance(refused.value, AlreadyExists)
    assert store.find_operations(ALICE, method=METHOD, target=TARGET, request_digest=DIGEST) == [first]
    store.finish_operation(first, OperationStatus.COMPLETED, caller=ALICE)
    store.create_operation(candidate(clock))  # one open at a time: once it ended, another may open


def test_the_database_refuses_a_second_open_operation_for_one_key(store: Store, clock: FakeClock) -> None:
    store.create_operation(candidate(clock, key="key-1"))
    with pytest.raises(AlreadyExists):
        store.create_operation(candidate(clock, key="key-1", digest=OTHER_DIGEST))
    for other in (BOB, ALICE_OTHER_CLIENT):  # the key's index is per caller
        store.create_operation(candidate(clock, other, key="key-1"))


# -- racing creators --------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "key-race"], ids=["by-digest", "by-key"])
def test_racing_creators_of_one_call_share_one_operation(
    store_url: str, store: Store, clock: FakeClock, key: str | None
) -> None:
    candidates = [candidate(clock, key=key) for _ in range(WORKERS)]
    with contenders(store_url, store, clock) as stores:
        outcomes = starts(race(stores, lambda each, i: each.begin_operation(candidates[i])))
    created = [o for o in outcomes if o.created]
    assert len(created) == 1, outcomes
    winner = created[0].operation
    assert {o.operation.operation_id for o in outcomes} == {winner.operation_id}
    assert open_rows_of_call(store_url) == [winner.operation_id]
    assert created_audit_rows(store_url) == [winner.operation_id]
    if key is None:
        found = store.find_operations(ALICE, method=METHOD, target=TARGET, request_digest=DIGEST)
    else:
        found = store.find_operations(ALICE, method=METHOD, target=TARGET, idempotency_key=key)
    assert found == [winner]


# -- idempotency keys -------------------------------------------------------------------------------


def test_the_same_key_and_request_attach(store: Store, clock: FakeClock) -> None:
    first = store.begin_operation(candidate(clock, key="key-1")).operation
    again = store.begin_operation(candidate(clock, key="key-1"))
    assert not again.created and again.operation == first


@pytest.mark.parametrize(
    ("other", "says"),
    [
        pytest.param({"digest": OTHER_DIGEST}, "the same tool with other arguments", id="other-arguments"),
        pytest.param({"target": "rollback"}, f"another tool ({TARGET})", id="other-target"),
    ],
)
def test_a_key_bound_to_another_request_is_a_conflict(
    store_url: str, store: Store, clock: FakeClock, other: dict[str, Any], says: str
) -> None:
    first = store.begin_operation(candidate(clock, key="key-1")).operation
    intruder = candidate(clock, key="key-1", **other)
    with pytest.raises(IdempotencyKeyConflict) as conflict:
        store.begin_operation(intruder)
    assert conflict.value.key == "key-1" and conflict.value.reason == says
    message = str(conflict.value)
    assert "'key-1'" in message and says in message
    assert "alice" not in message and "bob" not in message and "client-" not in message  # no caller named
    with pytest.raises(NotFound):
        store.get_operation(intruder.operation_id, OPERATOR)
    assert [row[0] for row in rows(store_url, "SELECT operation_id FROM elicit_operations")] == [first.operation_id]
    bound = rows(
        store_url,
        "SELECT principal_id, client_id, method, target, request_digest FROM elicit_idempotency_keys"
        " WHERE idempotency_key = %s",
        ("key-1",),
    )
    assert bound == [("alice", "client-a", METHOD, TARGET, DIGEST)]  # the binding did not move


def test_a_key_stays_bound_after_its_operation_completed_until_the_binding_expires(
    store: Store, clock: FakeClock
) -> None:
    first = store.begin_operation(candidate(clock, key="key-1")).operation
    store.finish_operation(first, OperationStatus.COMPLETED, caller=ALICE, result="done")
    clock.advance(TTL - timedelta(microseconds=1))  # just inside the binding (the operation's expires_at)
    for other in (candidate(clock, key="key-1", digest=OTHER_DIGEST), candidate(clock, key="key-1", target="x")):
        with pytest.raises(IdempotencyKeyConflict):
            store.begin_operation(other)
    clock.advance(timedelta(microseconds=1))  # at first.expires_at: the binding lapsed
    fresh = candidate(clock, key="key-1", digest=OTHER_DIGEST)
    started = store.begin_operation(fresh)
    assert started.created and started.operation == fresh
    with pytest.raises(IdempotencyKeyConflict, match="other arguments"):  # now bound to the new request
        store.begin_operation(candidate(clock, key="key-1"))


@pytest.mark.parametrize(
    ("digest", "why"),
    [(DIGEST, "overdue; call made again"), (OTHER_DIGEST, "overdue; its key was bound anew")],
    ids=["same-request", "another-request"],
)
def test_a_key_whose_operation_was_left_open_past_its_expiry_is_free_again(
    store: Store, clock: FakeClock, digest: str, why: str
) -> None:
    """The earlier operation, never finished nor swept, holds the key's open slot: the new call expires it, says
    why in its audit, and gets an operation of its own."""
    first = store.begin_operation(candidate(clock, key="key-1")).operation
    clock.advance(TTL)  # at first.expires_at: overdue, and the key's binding lapsed with it
    fresh = candidate(clock, key="key-1", digest=digest)
    started = store.begin_operation(fresh)
    assert started.created and started.operation == fresh
    old = store.get_operation(first.operation_id, ALICE)
    assert (old.status, old.version) == (OperationStatus.EXPIRED, first.version + 1)
    last = store.audit_trail(first.operation_id, ALICE)[-1]
    assert (last.from_status, last.to_status, last.actor, last.reason) == ("open", "expired", "system:clock", why)
    assert store.begin_operation(candidate(clock, key="key-1", digest=digest)).operation == fresh  # attaches


@pytest.mark.parametrize("other", [BOB, ALICE_OTHER_CLIENT], ids=["another-principal", "another-client"])
@pytest.mark.parametrize("digest", [DIGEST, OTHER_DIGEST], ids=["same-arguments", "other-arguments"])
def test_the_same_key_from_another_caller_is_another_key(
    store_url: str, store: Store, clock: FakeClock, other: Principal, digest: str
) -> None:
    """Each caller's operation stays open under the key; neither attaches to, replays or hears of the other's."""
    mine = store.begin_operation(candidate(clock, key="turn-42")).operation
    theirs_candidate = candidate(clock, other, key="turn-42", digest=digest)
    started = store.begin_operation(theirs_candidate)
    assert started.created and started.operation == theirs_candidate
    theirs = started.operation
    for caller, own in ((ALICE, mine), (other, theirs)):
        assert store.get_operation(own.operation_id, caller).status is OperationStatus.OPEN
        again = store.begin_operation(candidate(clock, caller, key="turn-42", digest=own.request_digest))
        assert not again.created and again.operation == own
        found = store.find_operations(caller, method=METHOD, target=TARGET, idempotency_key="turn-42")
        assert found == [own]
    with pytest.raises(NotFound):
        store.get_operation(mine.operation_id, other)
    done = store.finish_operation(theirs, OperationStatus.COMPLETED, caller=other, result={"by": "them"})
    store.finish_operation(mine, OperationStatus.COMPLETED, caller=ALICE, result={"by": "alice"})
    replayed = store.begin_operation(candidate(clock, other, key="turn-42", digest=digest), replay_since=clock())
    assert not replayed.created and replayed.operation == done and done.result == {"by": "them"}
    replayed = store.begin_operation(candidate(clock, key="turn-42"), replay_since=clock())
    assert not replayed.created and replayed.operation.result == {"by": "alice"}
    bound = rows(
        store_url,
        "SELECT principal_id, client_id, request_digest FROM elicit_idempotency_keys WHERE idempotency_key = %s"
        " ORDER BY principal_id, client_id",
        ("turn-42",),
    )
    assert bound == sorted([("alice", "client-a", DIGEST), (other.principal_id, other.client_id, digest)])


@pytest.mark.parametrize("other", [BOB, ALICE_OTHER_CLIENT], ids=["another-principal", "another-client"])
def test_a_caller_reusing_its_key_is_refused_without_a_word_of_another_caller(
    store: Store, clock: FakeClock, other: Principal
) -> None:
    store.begin_operation(candidate(clock, key="turn-42"))
    store.begin_operation(candidate(clock, other, key="turn-42", digest=OTHER_DIGEST))
    for caller, digest in ((ALICE, OTHER_DIGEST), (other, DIGEST)):
        with pytest.raises(IdempotencyKeyConflict) as conflict:
            store.begin_operation(candidate(clock, caller, key="turn-42", digest=digest))
        assert conflict.value.reason == "the same tool with other arguments"
        message = str(conflict.value)
        assert "'turn-42'" in message and "caller" not in message
        assert "alice" not in message and "bob" not in message and "client-" not in message


def test_a_completed_keyed_operation_is_replayed_to_the_same_request(store: Store, clock: FakeClock) -> None:
    completed = finished(store, clock, OperationStatus.COMPLETED, key="key-1")
    replayed = store.begin_operation(candidate(clock, key="key-1"), replay_since=completed.updated_at)
    assert not replayed.created and replayed.operation.operation_id == completed.operation_id
    assert replayed.operation.result == {"deployed": True}


@pytest.mark.parametrize(
    "other",
    [pytest.param({"principal": BOB}, id="another-caller"), pytest.param({"digest": OTHER_DIGEST}, id="other-args")],
)
def test_a_rebound_key_never_replays_the_previous_requests_result(
    store: Store, clock: FakeClock, other: dict[str, Any]
) -> None:
    first = store.begin_operation(candidate(clock, key="key-1")).operation
    clock.advance(TTL - timedelta(minutes=5))
    store.finish_operation(first, OperationStatus.COMPLETED, caller=ALICE, result={"secret": "alice's"})
    clock.advance(timedelta(minutes=10))  # the binding lapsed 5 minutes ago; the completion is 10 minutes old
    fresh = candidate(clock, key="key-1", **other)
    started = store.begin_operation(fresh, replay_since=clock() - timedelta(minutes=30))
    assert started.operation.operation_id == fresh.operation_id, started.operation
    assert started.created and started.operation.result is None


def test_sweep_purges_lapsed_key_bindings(store: Store, clock: FakeClock) -> None:
    first = store.begin_operation(candidate(clock, key="key-1")).operation
    store.finish_operation(first, OperationStatus.COMPLETED, caller=ALICE)
    store.begin_operation(candidate(clock, key="key-2", ttl=3 * TTL))
    assert store.sweep_expired().keys == 0
    clock.advance(TTL)
    swept = store.sweep_expired()
    assert swept.keys == 1 and swept.operations == 0
    assert store.sweep_expired().keys == 0
    started = store.begin_operation(candidate(clock, key="key-1", digest=OTHER_DIGEST))  # free for any request
    assert started.created
    with pytest.raises(IdempotencyKeyConflict):
        store.begin_operation(candidate(clock, key="key-2", digest=OTHER_DIGEST))  # still bound


def test_attaching_extends_the_binding_to_the_later_expiry(store: Store, clock: FakeClock) -> None:
    first = store.begin_operation(candidate(clock, key="key-1")).operation
    clock.advance(timedelta(minutes=30))
    assert store.begin_operation(candidate(clock, key="key-1")).operation == first  # its expiry: now + TTL
    clock.advance(TTL - timedelta(minutes=1))  # past first.expires_at, within the attacher's
    with pytest.raises(IdempotencyKeyConflict):
        store.begin_operation(candidate(clock, key="key-1", digest=OTHER_DIGEST))


def test_racing_binders_of_one_key_one_request_wins(store_url: str, store: Store, clock: FakeClock) -> None:
    candidates = [candidate(clock, key="key-race", digest=f"sha256:{i:064x}") for i in range(WORKERS)]
    with contenders(store_url, store, clock) as stores:
        outcomes = race(stores, lambda each, i: each.begin_operation(candidates[i]))
    won = [o for o in outcomes if isinstance(o, OperationStart)]
    lost = [o for o in outcomes if not isinstance(o, OperationStart)]
    assert len(won) == 1 and won[0].created, outcomes
    assert len(lost) == WORKERS - 1 and all(isinstance(o, IdempotencyKeyConflict) for o in lost), lost
    assert all("other arguments" in str(o) for o in lost)
    winner = won[0].operation
    assert [row[0] for row in rows(store_url, "SELECT operation_id FROM elicit_operations")] == [winner.operation_id]
    bound = rows(store_url, "SELECT request_digest FROM elicit_idempotency_keys WHERE idempotency_key = 'key-race'")
    assert bound == [(winner.request_digest,)]


def test_racing_callers_of_one_key_each_get_their_own_operation(store_url: str, store: Store, clock: FakeClock) -> None:
    callers = [Principal(f"user-{i}", "client-a") for i in range(WORKERS)]
    candidates = [candidate(clock, callers[i], key="key-race") for i in range(WORKERS)]
    with contenders(store_url, store, clock) as stores:
        outcomes = starts(race(stores, lambda each, i: each.begin_operation(candidates[i])))
    assert all(o.created for o in outcomes), outcomes
    assert sorted(o.operation.operation_id for o in outcomes) == sorted(c.operation_id for c in candidates)
    assert len(open_rows_of_call(store_url)) == WORKERS
    bound = rows(store_url, "SELECT principal_id FROM elicit_idempotency_keys WHERE idempotency_key = 'key-race'")
    assert sorted(row[0] for row in bound) == sorted(c.principal_id for c in callers)


# -- claims -----------------------------------------------------------------------------------------


def lease(clock: FakeClock, seconds: int = 30) -> datetime:
    return clock() + timedelta(seconds=seconds)


def opened(store: Store, clock: FakeClock) -> Operation:
    return store.begin_operation(candidate(clock)).operation


def takeovers(store: Store, operation: Operation) -> list[str]:
    return [e.reason for e in store.audit_trail(operation.operation_id, ALICE) if e.reason != "created"]


def test_a_free_claim_is_taken(store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    until = lease(clock)
    claim = store.claim(operation.operation_id, STEP, holder="a", lease_until=until, caller=ALICE)
    assert claim == Claim(operation.operation_id, STEP, "a", 1, until)
    assert claim.held_by("a") and not claim.held_by("b")
    other = store.claim(operation.operation_id, "ask:approve", holder="b", lease_until=until, caller=ALICE)
    assert other.held_by("b")  # claims are per name


def test_a_running_lease_keeps_others_out(store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    until = lease(clock)
    store.claim(operation.operation_id, STEP, holder="a", lease_until=until, caller=ALICE)
    clock.advance(timedelta(seconds=29))
    seen = store.claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock), caller=ALICE)
    assert seen == Claim(operation.operation_id, STEP, "a", 1, until)
    assert not seen.held_by("b")
    # `succeeding` someone who does not hold it changes nothing either
    seen = store.claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock), caller=ALICE, succeeding="x")
    assert seen.held_by("a")
    assert takeovers(store, operation) == []


def test_the_holder_claiming_again_keeps_it(store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    store.claim(operation.operation_id, STEP, holder="a", lease_until=lease(clock), caller=ALICE)
    clock.advance(timedelta(seconds=10))
    longer = lease(clock, 60)
    again = store.claim(operation.operation_id, STEP, holder="a", lease_until=longer, caller=ALICE)
    assert again == Claim(operation.operation_id, STEP, "a", 1, longer)
    clock.advance(timedelta(seconds=45))  # past the first lease, within the second
    assert store.claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock), caller=ALICE).held_by("a")


def test_succeeding_the_holder_hands_the_claim_over(store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    store.claim(operation.operation_id, STEP, holder="a", lease_until=lease(clock), caller=ALICE)
    until = lease(clock, 45)
    handed = store.claim(operation.operation_id, STEP, holder="b", lease_until=until, caller=ALICE, succeeding="a")
    assert handed == Claim(operation.operation_id, STEP, "b", 1, until)
    assert store.claim(operation.operation_id, STEP, holder="a", lease_until=lease(clock), caller=ALICE).held_by("b")
    assert takeovers(store, operation) == []


def test_a_lapsed_claim_is_taken_over_and_audited(store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    first = store.claim(operation.operation_id, STEP, holder="a", lease_until=lease(clock), caller=ALICE)
    clock.advance(timedelta(seconds=30))  # at lease_until: lapsed
    until = lease(clock)
    taken = store.claim(operation.operation_id, STEP, holder="b", lease_until=until, caller=ALICE)
    assert taken == Claim(operation.operation_id, STEP, "b", 2, until)
    trail = store.audit_trail(operation.operation_id, ALICE)
    last = trail[-1]
    assert (last.from_status, last.to_status, last.actor, last.at) == ("open", "open", ALICE.actor, clock())
    assert STEP in last.reason and "taken over" in last.reason
    assert first.lease_until.isoformat() in last.reason
    assert last.details == {"claim": STEP, "attempt": 2}
    assert store.get_operation(operation.operation_id, ALICE) == operation  # the operation itself is unchanged
    assert not store.renew_claim(operation.operation_id, STEP, holder="a", lease_until=lease(clock), caller=ALICE)
    clock.advance(timedelta(seconds=30))
    third = store.claim(operation.operation_id, STEP, holder="c", lease_until=lease(clock), caller=ALICE)
    assert third.held_by("c") and third.attempt == 3
    assert len(takeovers(store, operation)) == 2


def test_renewing_extends_only_the_holders_lease(store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    store.claim(operation.operation_id, STEP, holder="a", lease_until=lease(clock), caller=ALICE)
    assert not store.renew_claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock, 600), caller=ALICE)
    assert store.renew_claim(operation.operation_id, STEP, holder="a", lease_until=lease(clock, 120), caller=ALICE)
    assert not store.renew_claim(operation.operation_id, "no-such", holder="a", lease_until=lease(clock), caller=ALICE)
    clock.advance(timedelta(seconds=90))  # past the first lease, within the renewed one
    seen = store.claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock), caller=ALICE)
    assert seen.held_by("a") and seen.lease_until == START + timedelta(seconds=120)
    clock.advance(timedelta(seconds=30))
    assert store.claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock), caller=ALICE).held_by("b")


def test_releasing_with_a_holder_drops_only_that_holders_claim(store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    store.claim(operation.operation_id, STEP, holder="a", lease_until=lease(clock), caller=ALICE)
    store.release_claim(operation.operation_id, STEP, caller=ALICE, holder="b")
    assert store.claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock), caller=ALICE).held_by("a")
    store.release_claim(operation.operation_id, STEP, caller=ALICE, holder="a")
    fresh = store.claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock), caller=ALICE)
    assert fresh.held_by("b") and fresh.attempt == 1
    store.release_claim(operation.operation_id, STEP, caller=ALICE)  # without a holder: whoever holds it
    fresh = store.claim(operation.operation_id, STEP, holder="c", lease_until=lease(clock), caller=ALICE)
    assert fresh.held_by("c") and fresh.attempt == 1
    assert takeovers(store, operation) == []


@pytest.mark.parametrize("intruder", [BOB, ALICE_OTHER_CLIENT], ids=["another-principal", "another-client"])
def test_claims_are_bound_to_the_operations_caller(
    store_url: str, store: Store, clock: FakeClock, intruder: Principal
) -> None:
    operation = opened(store, clock)
    with pytest.raises(NotFound):
        store.claim(operation.operation_id, STEP, holder="x", lease_until=lease(clock), caller=intruder)
    with pytest.raises(NotFound):
        store.claim("no-such-operation", STEP, holder="x", lease_until=lease(clock), caller=ALICE)
    assert rows(store_url, "SELECT holder FROM elicit_claims") == []
    until = lease(clock)
    store.claim(operation.operation_id, STEP, holder="a", lease_until=until, caller=ALICE)
    assert not store.renew_claim(
        operation.operation_id, STEP, holder="a", lease_until=lease(clock, 600), caller=intruder
    )
    store.release_claim(operation.operation_id, STEP, caller=intruder, holder="a")
    store.release_claim(operation.operation_id, STEP, caller=intruder)
    seen = store.claim(operation.operation_id, STEP, holder="b", lease_until=lease(clock), caller=ALICE)
    assert seen == Claim(operation.operation_id, STEP, "a", 1, until)  # untouched: neither renewed nor released


def test_racing_claimers_one_holder(store_url: str, store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    until = lease(clock)
    with contenders(store_url, store, clock) as stores:
        outcomes = race(
            stores,
            lambda each, i: each.claim(operation.operation_id, STEP, holder=f"w{i}", lease_until=until, caller=ALICE),
        )
    claims = [o for o in outcomes if isinstance(o, Claim)]
    assert len(claims) == WORKERS, outcomes
    holders = {c.holder for c in claims}
    assert len(holders) == 1, holders
    assert sum(1 for i, c in enumerate(claims) if c.held_by(f"w{i}")) == 1
    assert {c.attempt for c in claims} == {1}
    assert rows(store_url, "SELECT holder, attempt FROM elicit_claims") == [(holders.pop(), 1)]
    assert takeovers(store, operation) == []


def test_racing_takeovers_of_a_lapsed_claim_one_holder(store_url: str, store: Store, clock: FakeClock) -> None:
    operation = opened(store, clock)
    store.claim(operation.operation_id, STEP, holder="gone", lease_until=lease(clock), caller=ALICE)
    clock.advance(timedelta(minutes=1))
    until = lease(clock)
    with contenders(store_url, store, clock) as stores:
        outcomes = race(
            stores,
            lambda each, i: each.claim(operation.operation_id, STEP, holder=f"w{i}", lease_until=until, caller=ALICE),
        )
    claims = [o for o in outcomes if isinstance(o, Claim)]
    assert len(claims) == WORKERS, outcomes
    assert len({c.holder for c in claims}) == 1 and {c.attempt for c in claims} == {2}
    assert len(takeovers(store, operation)) == 1


# -- migrations from schemas 3 and 6 ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Old:
    """An operation row as an older database could hold it."""

    operation_id: str
    created_at: datetime
    status: str = "open"
    key: str | None = None
    principal: Principal = ALICE
    digest: str = DIGEST
    ttl: timedelta = timedelta(hours=2)


def old_rows() -> list[Old]:
    t = START - timedelta(minutes=30)
    return [
        # three open operations of one unkeyed call (identical calls that raced): the newest stays
        Old("op-call-1", t),
        Old("op-call-3", t + timedelta(minutes=2)),
        Old("op-call-2", t + timedelta(minutes=1)),
        # an unrelated call's single open operation
        Old("op-other", t, digest=OTHER_DIGEST),
        # two open operations under one key, created at the same instant: the larger id stays
        Old("op-key-a", t, key="key-1"),
        Old("op-key-b", t, key="key-1"),
        # a key whose newest operation completed: the binding still comes from it
        Old("op-key2-old", t - timedelta(minutes=20), status="failed", key="key-2", digest=OTHER_DIGEST),
        Old("op-key2-new", t, status="completed", key="key-2"),
    ]


def build_schema(
    version: int,
    execute: Callable[[str, Sequence[object]], object],
    engine: Engine,
    stamp: Callable[[datetime], object],
    operations: Sequence[Old],
) -> None:
    """A database at schema `version` holding `operations`; from schema 4 on, each keyed one binds its key."""
    for statement in schema_statements(engine, until=version):
        execute(statement, ())
    for row in operations:
        caller, expires = (row.principal.principal_id, row.principal.client_id), stamp(row.created_at + row.ttl)
        execute(
            "INSERT INTO elicit_operations (operation_id, principal_id, client_id, method, target, request_digest,"
            " idempotency_key, status, result, version, created_at, updated_at, expires_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, NULL, %s, %s, %s, %s)",
            (row.operation_id, *caller, METHOD, TARGET, row.digest, row.key, row.status,
             0 if row.status == "open" else 1, stamp(row.created_at), stamp(row.created_at), expires),
        )  # fmt: skip
        if version >= 4 and row.key is not None:
            execute(
                "INSERT INTO elicit_idempotency_keys (idempotency_key, principal_id, client_id, method, target,"
                " request_digest, created_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (row.key, *caller, METHOD, TARGET, row.digest, stamp(row.created_at), expires),
            )


OldSchema = Callable[[int, Sequence[Old]], str]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def old_schema(request: pytest.FixtureRequest, tmp_path: Path) -> OldSchema:
    """Builds a database at an older schema holding the given operation rows; returns its URL (not yet opened)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)

    def sqlite_schema(version: int, operations: Sequence[Old]) -> str:
        path = tmp_path / f"v{version}.db"
        with closing(sqlite3.connect(path)) as connection, connection:
            build_schema(
                version,
                lambda sql, params: connection.execute(sql.replace("%s", "?"), params),
                "sqlite",
                lambda at: (at - epoch) // timedelta(microseconds=1),
                operations,
            )
        return f"sqlite://{path}"

    def postgres_schema(version: int, operations: Sequence[Old]) -> str:
        url = str(request.getfixturevalue("pg_schema_url"))
        with psycopg.connect(url, autocommit=True) as connection, connection.transaction():
            build_schema(
                version,
                lambda sql, params: connection.execute(sql, params),
                "postgresql",
                lambda at: at,
                operations,
            )
        return url

    return sqlite_schema if request.param == "sqlite" else postgres_schema


def test_migrating_to_schema_4_expires_duplicate_open_operations_and_binds_keys(
    old_schema: OldSchema, clock: FakeClock
) -> None:
    schema_3_url = old_schema(3, old_rows())
    store = open_store(schema_3_url, clock=clock)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        status = {o.operation_id: store.get_operation(o.operation_id, OPERATOR) for o in old_rows()}
        assert {i: o.status.value for i, o in status.items()} == {
            "op-call-1": "expired",
            "op-call-2": "expired",
            "op-call-3": "open",
            "op-other": "open",
            "op-key-a": "expired",
            "op-key-b": "open",
            "op-key2-old": "failed",
            "op-key2-new": "completed",
        }
        for superseded in ("op-call-1", "op-call-2", "op-key-a"):
            assert status[superseded].version == 1
            trail = store.audit_trail(superseded, OPERATOR)
            assert [(e.from_status, e.to_status, e.actor) for e in trail] == [("open", "expired", "system:migration")]
            assert "superseded" in trail[0].reason and trail[0].details == {}
        for kept in ("op-call-3", "op-other", "op-key-b"):
            assert status[kept].version == 0 and store.audit_trail(kept, OPERATOR) == []

        # the survivors are the call's open operation now, and the unique indexes hold
        attached = store.begin_operation(candidate(clock))
        assert not attached.created and attached.operation.operation_id == "op-call-3"
        attached = store.begin_operation(candidate(clock, key="key-1"))
        assert not attached.created and attached.operation.operation_id == "op-key-b"
        with pytest.raises(AlreadyExists):
            store.create_operation(candidate(clock))

        # each key is bound to the request of its newest operation
        bound = rows(
            schema_3_url,
            "SELECT idempotency_key, principal_id, client_id, method, target, request_digest"
            " FROM elicit_idempotency_keys ORDER BY idempotency_key",
        )
        assert bound == [
            ("key-1", "alice", "client-a", METHOD, TARGET, DIGEST),
            ("key-2", "alice", "client-a", METHOD, TARGET, DIGEST),
        ]
        with pytest.raises(IdempotencyKeyConflict, match="other arguments"):
            store.begin_operation(candidate(clock, key="key-1", digest=OTHER_DIGEST))
        with pytest.raises(IdempotencyKeyConflict, match="other arguments"):
            store.begin_operation(candidate(clock, key="key-2", digest=OTHER_DIGEST))
        assert store.begin_operation(candidate(clock, BOB, key="key-2")).created  # Bob's key-2 is his own
        # the bindings end when their newest operations would have expired (START + 1h30; Bob's START + 1h)
        clock.advance(timedelta(hours=1, minutes=30))
        assert store.sweep_expired().keys == 3
        assert store.begin_operation(candidate(clock, key="key-2", digest=OTHER_DIGEST)).created
    finally:
        store.close()


def test_a_migrated_key_never_attaches_another_caller_to_an_open_operation(
    old_schema: OldSchema, clock: FakeClock
) -> None:
    t = START - timedelta(minutes=30)
    url = old_schema(
        3,
        [
            Old("alice-op", t, key="key-1", ttl=timedelta(hours=24)),  # per-caller keys in schema 3: both legal
            Old("bob-op", t + timedelta(minutes=1), status="completed", key="key-1", principal=BOB, ttl=TTL),
        ],
    )
    store = open_store(url, clock=clock)
    try:
        clock.advance(timedelta(hours=1))  # past bob-op's expiry
        carol = Principal("carol", "client-c")
        started = store.begin_operation(candidate(clock, carol, key="key-1", digest=OTHER_DIGEST))
        assert started.created and started.operation.principal == carol
        attached = store.begin_operation(candidate(clock, key="key-1"))
        assert not attached.created and attached.operation.operation_id == "alice-op"
    finally:
        store.close()


def test_open_operations_of_two_callers_under_one_key_both_survive_the_migration(
    old_schema: OldSchema, clock: FakeClock
) -> None:
    """A store from before schema 4 with Alice's and Bob's open operations under one key: neither is expired as
    a duplicate of the other, and each caller attaches to their own afterwards."""
    t = START - timedelta(minutes=30)
    url = old_schema(
        3,
        [
            Old("alice-open", t, key="turn-42", ttl=timedelta(hours=24)),
            Old("bob-open", t + timedelta(minutes=1), key="turn-42", principal=BOB, ttl=timedelta(hours=24)),
        ],
    )
    store = open_store(url, clock=clock)
    try:
        for principal, operation_id in ((ALICE, "alice-open"), (BOB, "bob-open")):
            assert store.get_operation(operation_id, principal).status is OperationStatus.OPEN
            assert store.audit_trail(operation_id, Operator()) == []
            attached = store.begin_operation(candidate(clock, principal, key="turn-42"))
            assert not attached.created and attached.operation.operation_id == operation_id
    finally:
        store.close()


def test_migrating_to_schema_7_keeps_every_row_and_scopes_keys_per_caller(
    old_schema: OldSchema, clock: FakeClock
) -> None:
    t = START - timedelta(minutes=30)
    url = old_schema(
        6,
        [
            Old("alice-open", t, key="turn-42", ttl=timedelta(hours=24)),
            Old("bob-done", t, status="completed", key="key-2", principal=BOB),
            Old("alice-plain", t, digest=OTHER_DIGEST),
        ],
    )
    operations = "SELECT * FROM elicit_operations ORDER BY operation_id"
    keys = (
        "SELECT principal_id, client_id, idempotency_key, method, target, request_digest, created_at, expires_at"
        " FROM elicit_idempotency_keys ORDER BY idempotency_key"
    )
    before = rows(url, operations), rows(url, keys)
    assert len(before[1]) == 2
    store = open_store(url, clock=clock)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert (rows(url, operations), rows(url, keys)) == before

        attached = store.begin_operation(candidate(clock, key="turn-42"))
        assert not attached.created and attached.operation.operation_id == "alice-open"
        with pytest.raises(IdempotencyKeyConflict, match="other arguments"):
            store.begin_operation(candidate(clock, key="turn-42", digest=OTHER_DIGEST))
        with pytest.raises(IdempotencyKeyConflict, match="other arguments"):  # Bob's binding came along
            store.begin_operation(candidate(clock, BOB, key="key-2", digest=OTHER_DIGEST))
        for other in (BOB, ALICE_OTHER_CLIENT):  # an open operation each under the one key
            started = store.begin_operation(candidate(clock, other, key="turn-42", digest=OTHER_DIGEST))
            assert started.created and started.operation.principal == other
        assert store.begin_operation(candidate(clock, key="key-2")).created
        assert store.get_operation("alice-open", ALICE).status is OperationStatus.OPEN
    finally:
        store.close()


class Lost(Exception):
    pass


def test_a_call_that_saw_nothing_begins_its_operation_inside_a_unit(store: Store, clock: FakeClock) -> None:
    fresh = candidate(clock)

    def work() -> None:
        started = store.begin_operation(fresh)
        assert started.created
        store.consume_token("round-1", expires_at=clock() + TTL)

    store.atomically(work)
    assert store.get_operation(fresh.operation_id, ALICE) == fresh
    assert store.token_consumed("round-1")
    assert [e.reason for e in store.audit_trail(fresh.operation_id, ALICE)] == ["created"]


@pytest.mark.parametrize("inside", [True, False], ids=["inside-a-unit", "alone"])
def test_one_that_loses_the_race_is_told_at_once_and_undoes_its_unit(
    store: Store, clock: FakeClock, inside: bool
) -> None:
    """The late call learns from `begin_operation` itself that it did not create (as the server's check of
    `created` does), before anything after it in the unit runs; raising then undoes the unit whole."""
    first = store.begin_operation(candidate(clock)).operation
    late = candidate(clock)
    after: list[str] = []

    def work() -> None:
        store.consume_token("round-2", expires_at=clock() + TTL)
        started = store.begin_operation(late)
        if not started.created:
            assert started.operation == first
            raise Lost
        after.append("went on")

    if inside:
        with pytest.raises(Lost):
            store.atomically(work)
    else:
        started = store.begin_operation(late)
        assert not started.created and started.operation == first
    assert after == []
    with pytest.raises(NotFound):
        store.get_operation(late.operation_id, OPERATOR)
    assert not store.token_consumed("round-2")
    assert open_rows_of_call_in(store, first) == [first.operation_id]


def open_rows_of_call_in(store: Store, operation: Operation) -> list[str]:
    found = store.find_operations(ALICE, method=METHOD, target=TARGET, request_digest=operation.request_digest)
    return [o.operation_id for o in found if o.status is OperationStatus.OPEN]
