"""Fenced writes: a step's result and an operation's end count only while the writer still holds the run lease.

The run lease is a claim named `run` on the operation (`Execution`'s RUN_LEASE). A holder whose lease lapsed
and passed to another call must have its late writes refused: the new holder may run the same step, and its
record, not the stalled one's, is what every call replays. Checked on each engine.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from mcp_elicit.model import Operation, OperationStatus, new_operation
from mcp_elicit.store import AlreadyExists, Claim, LeaseLost, Store
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE

LEASE = timedelta(seconds=30)
RUN = "run"


def begun(store: Store, clock: FakeClock) -> Operation:
    candidate = new_operation(
        ALICE, method="tools/call", target="deploy", request_digest="sha256:" + "a" * 64, now=clock(),
        ttl=timedelta(hours=1),
    )  # fmt: skip
    return store.begin_operation(candidate).operation


def take(store: Store, clock: FakeClock, operation: Operation, holder: str) -> Claim:
    claim = store.claim(operation.operation_id, RUN, holder=holder, lease_until=clock() + LEASE, caller=ALICE)
    assert claim.held_by(holder)
    return claim


def test_a_lapsed_holders_late_result_and_end_are_refused(store: Store, clock: FakeClock) -> None:
    operation = begun(store, clock)
    stalled = take(store, clock, operation, "call:a")
    clock.advance(LEASE + timedelta(seconds=1))
    current = take(store, clock, operation, "call:b")
    assert current.attempt == stalled.attempt + 1

    with pytest.raises(LeaseLost, match="call:a no longer holds its run lease"):
        store.journal_record(operation.operation_id, "charge", {"by": "a"}, caller=ALICE, fence=stalled)
    assert store.journal_get(operation.operation_id, "charge", caller=ALICE) is None
    with pytest.raises(LeaseLost):
        store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE, result="a", fence=stalled)
    assert store.get_operation(operation.operation_id, ALICE).status is OperationStatus.OPEN

    entry = store.journal_record(operation.operation_id, "charge", {"by": "b"}, caller=ALICE, fence=current)
    assert entry.value == {"by": "b"}
    finished = store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE, result="b", fence=current)
    assert (finished.status, finished.result) == (OperationStatus.COMPLETED, "b")


def test_the_same_holder_taking_the_lease_again_after_it_lapsed_is_a_new_attempt(
    store: Store, clock: FakeClock
) -> None:
    """Another holder took over in between: what the first tenure wrote late is refused even to its own holder."""
    operation = begun(store, clock)
    first = take(store, clock, operation, "call:a")
    clock.advance(LEASE + timedelta(seconds=1))
    take(store, clock, operation, "call:b")
    clock.advance(LEASE + timedelta(seconds=1))
    again = take(store, clock, operation, "call:a")
    assert again.attempt == first.attempt + 2
    with pytest.raises(LeaseLost):
        store.journal_record(operation.operation_id, "charge", 1, caller=ALICE, fence=first)
    assert store.journal_record(operation.operation_id, "charge", 2, caller=ALICE, fence=again).value == 2


def test_a_fenced_result_recorded_already_is_refused_not_returned(store: Store, clock: FakeClock) -> None:
    """A fenced writer acted on its own result: if another is recorded, it must run again on that one. An unfenced
    writer (a client's answer to sampling) still gets the recorded entry back."""
    operation = begun(store, clock)
    holder = take(store, clock, operation, "call:a")
    store.journal_record(operation.operation_id, "charge", 1, caller=ALICE, fence=holder)
    with pytest.raises(AlreadyExists, match="recorded already"):
        store.journal_record(operation.operation_id, "charge", 2, caller=ALICE, fence=holder)
    assert store.journal_record(operation.operation_id, "charge", 3, caller=ALICE).value == 1
    assert [entry.value for entry in store.journal(operation.operation_id, caller=ALICE)] == [1]


def test_a_released_lease_refuses_its_former_holders_writes(store: Store, clock: FakeClock) -> None:
    operation = begun(store, clock)
    released = take(store, clock, operation, "call:a")
    store.release_claim(operation.operation_id, RUN, caller=ALICE, holder="call:a")
    with pytest.raises(LeaseLost):
        store.journal_record(operation.operation_id, "charge", 1, caller=ALICE, fence=released)
    with pytest.raises(LeaseLost):
        store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE, result=1, fence=released)
