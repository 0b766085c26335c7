"""Compare-and-set and the token ledger under real concurrency.

SQLite: 50 threads, each on its own connection to one file. PostgreSQL: 50 separate store instances,
each with its own connection pool, as 50 server instances would be. A barrier releases them together.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from mcp_elicit.model import DecisionStatus, JSONValue
from mcp_elicit.store import Consumption, DecisionConflict, Store, open_store
from tests.helpers.clock import FakeClock
from tests.helpers.race import race
from tests.helpers.records import ALICE, Records

WORKERS = 50


@contextmanager
def contenders(store_url: str, store: Store, clock: FakeClock) -> Iterator[list[Store]]:
    """One store per worker on PostgreSQL (separate connections), the shared store on SQLite (threads)."""
    if store_url.startswith("sqlite"):
        yield [store] * WORKERS
        return
    opened = [open_store(store_url, clock=clock) for _ in range(WORKERS)]
    try:
        yield opened
    finally:
        for each in opened:
            each.close()


def test_fifty_concurrent_completions_one_winner(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    decision = records.form()
    with contenders(store_url, store, clock) as stores:
        outcomes = race(
            stores,
            lambda each, i: each.transition(
                decision, DecisionStatus.ACCEPTED, caller=ALICE, content={"approve": True, "note": f"worker {i}"}
            ),
        )
    winners = [o for o in outcomes if not isinstance(o, Exception)]
    losers = [o for o in outcomes if isinstance(o, Exception)]
    assert len(winners) == 1, outcomes
    assert len(losers) == WORKERS - 1 and all(isinstance(o, DecisionConflict) for o in losers), losers
    stored = store.get_decision(decision.elicitation_id, ALICE)
    assert stored == winners[0] and stored.completion_version == 1
    trail = store.audit_trail(decision.elicitation_id, ALICE)
    assert [e.to_status for e in trail].count("accepted") == 1
    assert len(trail) == 2


def test_concurrent_mixed_signals_on_a_url_flow_produce_one_effect(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    pending = store.transition(
        store.transition(records.url(), DecisionStatus.ACCEPTED_URL, caller=ALICE),
        DecisionStatus.EXTERNAL_PENDING,
        caller=ALICE,
    )
    targets = [DecisionStatus.EXTERNAL_COMPLETED, DecisionStatus.EXTERNAL_FAILED, DecisionStatus.CANCELLED]
    with contenders(store_url, store, clock) as stores:
        outcomes = race(stores, lambda each, i: each.transition(pending, targets[i % 3], caller=ALICE))
    winners = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(winners) == 1
    trail = store.audit_trail(pending.elicitation_id, ALICE)
    assert len(trail) == 4 and trail[-1].to_status == winners[0].status


def test_concurrent_double_consume_one_first(store_url: str, store: Store, clock: FakeClock) -> None:
    with contenders(store_url, store, clock) as stores:
        outcomes = race(stores, lambda each, i: each.consume_token("round-1", expires_at=clock() + timedelta(hours=1)))
    assert outcomes.count(Consumption.FIRST) == 1
    assert outcomes.count(Consumption.ALREADY_USED) == WORKERS - 1


def test_concurrent_journal_writers_agree_on_the_first_value(
    store_url: str, store: Store, records: Records, clock: FakeClock
) -> None:
    operation = records.operation()
    with contenders(store_url, store, clock) as stores:
        outcomes = race(
            stores,
            lambda each, i: each.journal_record(operation.operation_id, "plan", {"writer": i}, caller=ALICE).value,
        )
    values: set[str] = {str(o) for o in outcomes}
    assert len(values) == 1, outcomes
    recorded = store.journal_get(operation.operation_id, "plan", caller=ALICE)
    assert recorded is not None and str(recorded.value) in values


def test_ledger_entries_outlive_their_sweep_only_until_expiry(store: Store, clock: FakeClock) -> None:
    assert store.consume_token("t", expires_at=clock() + timedelta(minutes=1)) is Consumption.FIRST
    assert store.consume_token("t", expires_at=clock() + timedelta(minutes=1)) is Consumption.ALREADY_USED
    assert store.sweep_expired().tokens == 0
    assert store.consume_token("t", expires_at=clock() + timedelta(minutes=1)) is Consumption.ALREADY_USED
    clock.advance(timedelta(minutes=1))
    assert store.sweep_expired().tokens == 1
    assert store.consume_token("t", expires_at=clock() + timedelta(minutes=1)) is Consumption.FIRST


@pytest.mark.parametrize("value", [None, 0, "text", [1, "two", None], {"nested": {"ok": True}}])
def test_journal_round_trips_every_json_value(store: Store, records: Records, value: JSONValue) -> None:
    operation = records.operation()
    first = store.journal_record(operation.operation_id, "step", value, caller=ALICE)
    again = store.journal_record(operation.operation_id, "step", "something else", caller=ALICE)
    assert first.value == value and again.value == value
    fetched = store.journal_get(operation.operation_id, "step", caller=ALICE)
    assert fetched is not None and fetched.value == value and fetched.recorded_at == first.recorded_at
