"""TTL: late signals cannot wake an expired record; sweeps touch exactly the overdue rows."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.store import SWEEP_BATCH, DecisionExpired, NotFound, OperationExpired, Store, open_store
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, BOB, Records

D = DecisionStatus


def test_late_completion_fails_and_leaves_the_record_expired(store: Store, records: Records, clock: FakeClock) -> None:
    decision = records.form(ttl=timedelta(minutes=5))
    clock.advance(timedelta(minutes=5))
    with pytest.raises(DecisionExpired) as raised:
        store.transition(decision, D.ACCEPTED, caller=ALICE, content={"approve": True})
    assert raised.value.current.status is D.EXPIRED
    stored = store.get_decision(decision.elicitation_id, ALICE)
    assert stored.status is D.EXPIRED and stored.content is None
    assert stored == raised.value.current
    trail = store.audit_trail(decision.elicitation_id, ALICE)
    assert [(e.from_status, e.to_status, e.actor) for e in trail] == [
        (None, "requested", ALICE.actor),
        ("requested", "expired", "system:clock"),
    ]
    assert "late accepted" in trail[-1].reason
    with pytest.raises(DecisionExpired):
        store.transition(decision, D.DECLINED, caller=ALICE)
    assert len(store.audit_trail(decision.elicitation_id, ALICE)) == 2


def test_one_microsecond_before_expiry_still_completes(store: Store, records: Records, clock: FakeClock) -> None:
    decision = records.form(ttl=timedelta(minutes=5))
    clock.advance(timedelta(minutes=5) - timedelta(microseconds=1))
    assert store.transition(decision, D.DECLINED, caller=ALICE).status is D.DECLINED


def test_late_external_callback_on_pending_url_flow(store: Store, records: Records, clock: FakeClock) -> None:
    pending = store.transition(
        store.transition(records.url(ttl=timedelta(minutes=1)), D.ACCEPTED_URL, caller=ALICE),
        D.EXTERNAL_PENDING,
        caller=ALICE,
    )
    clock.advance(timedelta(minutes=2))
    with pytest.raises(DecisionExpired):
        store.transition(pending, D.EXTERNAL_COMPLETED, caller=ALICE)
    assert store.get_decision(pending.elicitation_id, ALICE).status is D.EXPIRED


def test_sweep_touches_exactly_the_overdue_waiting_rows(store: Store, records: Records, clock: FakeClock) -> None:
    operation = records.operation(ttl=timedelta(days=1))
    overdue = [records.form(operation, key=f"late-{i}", ttl=timedelta(minutes=1)) for i in range(7)]
    overdue_url = store.transition(records.url(operation, ttl=timedelta(minutes=1)), D.ACCEPTED_URL, caller=ALICE)
    fresh = [records.form(operation, key=f"fresh-{i}", ttl=timedelta(hours=1)) for i in range(5)]
    finished = store.transition(records.form(operation, key="done", ttl=timedelta(minutes=1)), D.DECLINED, caller=ALICE)
    clock.advance(timedelta(minutes=1))

    result = store.sweep_expired()

    assert result.decisions == len(overdue) + 1
    assert result.operations == 0
    everyone = store.list_decisions(Operator(), limit=1000)
    expired = {d.elicitation_id for d in everyone if d.status is D.EXPIRED}
    assert expired == {d.elicitation_id for d in overdue} | {overdue_url.elicitation_id}
    assert all(store.get_decision(d.elicitation_id, ALICE) == d for d in fresh)
    assert store.get_decision(finished.elicitation_id, ALICE) == finished
    assert store.sweep_expired().decisions == 0
    last = store.audit_trail(overdue_url.elicitation_id, ALICE)[-1]
    assert (last.from_status, last.to_status, last.actor) == ("accepted_url", "expired", "system:clock")
    assert last.details == {"version": 2}
    assert store.get_decision(overdue_url.elicitation_id, ALICE).completion_version == 2


def test_sweep_expires_open_operations_and_purges_spent_tokens(
    store: Store, records: Records, clock: FakeClock
) -> None:
    short = records.operation(ttl=timedelta(minutes=1))
    long = records.operation(ttl=timedelta(hours=1))
    store.consume_token("spent", expires_at=clock() + timedelta(seconds=30))
    store.consume_token("live", expires_at=clock() + timedelta(hours=2))
    clock.advance(timedelta(minutes=1))

    result = store.sweep_expired()

    assert (result.operations, result.tokens) == (1, 1)
    assert store.get_operation(short.operation_id, ALICE).status is OperationStatus.EXPIRED
    assert store.get_operation(long.operation_id, ALICE).status is OperationStatus.OPEN
    with pytest.raises(OperationExpired):
        store.finish_operation(short, OperationStatus.COMPLETED, caller=ALICE)


def test_late_operation_result_is_refused_before_any_sweep(store: Store, records: Records, clock: FakeClock) -> None:
    operation = records.operation(ttl=timedelta(minutes=1))
    clock.advance(timedelta(minutes=1))
    with pytest.raises(OperationExpired) as raised:
        store.finish_operation(operation, OperationStatus.COMPLETED, caller=ALICE, result="late")
    assert raised.value.current == store.get_operation(operation.operation_id, ALICE)
    stored = store.get_operation(operation.operation_id, ALICE)
    assert stored.status is OperationStatus.EXPIRED and stored.result is None


def test_sweep_larger_than_one_batch(store: Store, records: Records, clock: FakeClock) -> None:
    operation = records.operation(ttl=timedelta(days=1))
    count = SWEEP_BATCH + 3
    for i in range(count):
        records.form(operation, key=f"k{i}", ttl=timedelta(seconds=1))
    clock.advance(timedelta(seconds=1))
    assert store.sweep_expired().decisions == count
    assert store.list_decisions(Operator(), status=D.REQUESTED) == []


def test_sqlite_sweep_uses_the_partial_expiry_index(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "plan.db"
    open_store(f"sqlite://{path}", clock=clock).close()
    with sqlite3.connect(path) as connection:
        plan = connection.execute(
            "EXPLAIN QUERY PLAN SELECT elicitation_id, status, completion_version FROM elicit_decisions"
            " WHERE status IN ('requested', 'accepted_url', 'external_pending') AND expires_at <= ?"
            " ORDER BY expires_at LIMIT ?",
            (0, 10),
        ).fetchall()
    assert any("USING INDEX elicit_decisions_due" in row[-1] for row in plan), plan


@pytest.mark.postgres
def test_postgres_sweep_uses_the_partial_expiry_index(pg_schema_url: str, clock: FakeClock) -> None:
    open_store(pg_schema_url, clock=clock).close()
    with psycopg.connect(pg_schema_url) as connection:
        connection.execute("SET enable_seqscan = off")
        plan = "\n".join(
            row[0]
            for row in connection.execute(
                "EXPLAIN SELECT elicitation_id, status, completion_version FROM elicit_decisions"
                " WHERE status IN ('requested', 'accepted_url', 'external_pending') AND expires_at <= now()"
                " ORDER BY expires_at LIMIT 10 FOR UPDATE SKIP LOCKED"
            )
        )
    assert "elicit_decisions_due" in plan, plan


def test_expire_if_overdue_expires_only_past_the_ttl(store: Store, records: Records, clock: FakeClock) -> None:
    decision = records.url(ttl=timedelta(minutes=5))
    assert store.expire_if_overdue(decision.elicitation_id, ALICE, reason="looked") == decision
    clock.advance(timedelta(minutes=5))
    expired = store.expire_if_overdue(decision.elicitation_id, ALICE, reason="opened after the TTL")
    assert (expired.status, expired.completion_version) == (D.EXPIRED, 1)
    assert store.get_decision(decision.elicitation_id, ALICE) == expired
    last = store.audit_trail(decision.elicitation_id, ALICE)[-1]
    assert (last.to_status, last.actor, last.reason) == ("expired", "system:clock", "opened after the TTL")
    with pytest.raises(NotFound, match="no decision nowhere"):
        store.expire_if_overdue("nowhere", ALICE, reason="looked")
    with pytest.raises(NotFound):
        store.expire_if_overdue(decision.elicitation_id, BOB, reason="someone else's")
