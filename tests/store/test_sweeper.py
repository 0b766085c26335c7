"""Expiry on its own: the store's sweep announces what it expired and drops expired operations' claims, one
PostgreSQL instance sweeps at a time, and a served app runs the sweep itself, jittered, from its lifespan.

Real parts: SQLite files and the machine's PostgreSQL; the served app is a real `MCPServer` reached by the
SDK's own client, whose connection runs the server's lifespan.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from mcp import Client

from mcp_elicit.model import DecisionStatus, OperationStatus, Operator
from mcp_elicit.server import Elicitation, RequestState, Timing
from mcp_elicit.server.sweeper import Sweeper
from mcp_elicit.store import Store, open_store, utc_now
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.postgres import SWEEP_LOCK
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE, Records

pytestmark = pytest.mark.anyio


def test_a_sweep_announces_every_record_it_expires(store: Store, records: Records, clock: FakeClock) -> None:
    operation = records.operation(ttl=timedelta(minutes=5))
    decision = records.form(operation, ttl=timedelta(minutes=1))
    kept = records.form(ttl=timedelta(hours=2))
    heard: list[str] = []
    store.add_change_listener(heard.append)
    clock.advance(timedelta(minutes=5))
    result = store.sweep_expired()
    assert (result.decisions, result.operations) == (1, 1)
    assert sorted(heard) == sorted([decision.elicitation_id, operation.operation_id])
    assert kept.elicitation_id not in heard


def test_a_decision_expired_on_a_late_look_is_announced_too(store: Store, records: Records, clock: FakeClock) -> None:
    decision = records.form(ttl=timedelta(minutes=1))
    heard: list[str] = []
    store.add_change_listener(heard.append)
    clock.advance(timedelta(minutes=1))
    assert store.expire_if_overdue(decision.elicitation_id, ALICE, reason="looked").status is DecisionStatus.EXPIRED
    assert heard == [decision.elicitation_id]


def test_a_swept_operation_takes_its_claims_with_it(store: Store, records: Records, clock: FakeClock) -> None:
    expiring = records.operation(ttl=timedelta(minutes=5))
    staying = records.operation(ttl=timedelta(hours=5))
    for operation in (expiring, staying):
        store.claim(operation.operation_id, "step:apply", holder="call:a", lease_until=clock() + timedelta(hours=9),
                    caller=ALICE)  # fmt: skip
    clock.advance(timedelta(minutes=5))
    assert store.sweep_expired().operations == 1
    assert store.get_operation(expiring.operation_id, ALICE).status is OperationStatus.EXPIRED
    assert store.claims(expiring.operation_id, caller=ALICE) == []
    assert [c.name for c in store.claims(staying.operation_id, caller=ALICE)] == ["step:apply"]


def test_the_sweep_audits_the_clock(store: Store, records: Records, clock: FakeClock) -> None:
    decision = records.form(ttl=timedelta(minutes=1))
    clock.advance(timedelta(minutes=1))
    store.sweep_expired()
    last = store.audit_trail(decision.elicitation_id, ALICE)[-1]
    assert (last.from_status, last.to_status, last.actor) == ("requested", "expired", "system:clock")
    assert "TTL passed" in last.reason


def test_one_postgres_instance_sweeps_at_a_time(pg_schema_url: str, clock: FakeClock) -> None:
    first, second = open_store(pg_schema_url, clock=clock), open_store(pg_schema_url, clock=clock)
    try:
        decision = Records(first, clock).form(ttl=timedelta(minutes=1))
        clock.advance(timedelta(minutes=1))
        with psycopg.connect(pg_schema_url, autocommit=True) as sweeping_elsewhere:
            sweeping_elsewhere.execute("SELECT pg_advisory_lock(%s)", (SWEEP_LOCK,))
            assert second.sweep_expired().decisions == 0
            assert second.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.REQUESTED
            sweeping_elsewhere.execute("SELECT pg_advisory_unlock(%s)", (SWEEP_LOCK,))
            assert second.sweep_expired().decisions == 1
        assert first.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.EXPIRED
        assert len(first.audit_trail(decision.elicitation_id, ALICE)) == 2
    finally:
        first.close()
        second.close()


def test_the_pause_between_sweeps_is_jittered_by_a_fifth(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'elicit.db'}")
    try:
        pauses = [Sweeper(AsyncStore(store), timedelta(seconds=30)).pause() for _ in range(200)]
    finally:
        store.close()
    assert all(24.0 <= pause <= 36.0 for pause in pauses)
    assert min(pauses) < 27.0 and max(pauses) > 33.0


def test_a_sweep_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sweep_interval must be positive"):
        Elicitation(
            f"sqlite://{tmp_path / 'elicit.db'}",
            request_state=RequestState(single_process=True),
            timing=Timing(sweep_interval=timedelta(0)),
        )


def served(store: Store, **options: Any) -> Elicitation:
    runtime = Elicitation(store, request_state=RequestState(single_process=True), **options)
    server = runtime.server("sweeping")

    @server.tool()
    def ping() -> str:
        return "pong"

    return runtime


async def until(predicate: Any, seconds: float = 20) -> None:
    with anyio.fail_after(seconds):
        while not predicate():
            await anyio.sleep(0.05)


async def test_a_served_app_expires_overdue_records_on_its_own(store_url: str) -> None:
    store = open_store(store_url)
    runtime = served(store, timing=Timing(sweep_interval=timedelta(seconds=0.3)))
    records = Records(store, utc_now)
    try:
        operation = records.operation(ttl=timedelta(seconds=1))
        decision = records.form(operation, ttl=timedelta(seconds=0.5))
        async with Client(runtime.mcp_server) as client:
            await client.call_tool("ping", {})
            await until(lambda: store.get_decision(decision.elicitation_id, ALICE).status is DecisionStatus.EXPIRED)
            await until(lambda: store.get_operation(operation.operation_id, ALICE).status is OperationStatus.EXPIRED)
        last = store.audit_trail(decision.elicitation_id, ALICE)[-1]
        assert (last.actor, last.reason) == ("system:clock", "TTL passed (sweep)")
    finally:
        runtime.close()


async def test_a_failed_sweep_is_logged_and_the_next_one_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "elicit.db"
    store = open_store(f"sqlite://{path}")
    try:
        decision = Records(store, utc_now).form(ttl=timedelta(seconds=0.1))
        await anyio.sleep(0.2)
        sweeper = Sweeper(AsyncStore(store), timedelta(seconds=1))
        path.rename(tmp_path / "moved.db")
        with caplog.at_level(logging.WARNING, logger="mcp_elicit.server.sweeper"):
            assert await sweeper.sweep() is None
        assert "cannot sweep" in caplog.text
        (tmp_path / "moved.db").rename(path)
        result = await sweeper.sweep()
        assert result is not None and result.decisions == 1
        assert store.list_decisions(Operator())[0].elicitation_id == decision.elicitation_id
    finally:
        store.close()
