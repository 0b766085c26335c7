"""Two store races a reviewer found, each shown failing before its fix: PostgreSQL decides them, SQLite
serialises them. The store alone, many instances on one schema (as many servers would be), threads released
together by a barrier. Findings 3 and 5 of tests/runtime/test_single_flight_regressions.py.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from mcp_elicit.model import Operation, OperationStatus, Operator, new_operation
from mcp_elicit.store import Claim, open_store
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE

OPERATOR = Operator("test")


def test_claim_under_concurrent_claims_and_releases_always_returns_a_claim(pg_schema_url: str) -> None:
    """Six store instances (six servers) claim and release one step's claim as fast as they can. Between
    `claim`'s look for the row and its insert, another instance may insert and delete it; `claim` must
    still answer with a claim, this caller's or another's, never an error."""
    threads, rounds = 6, 100
    setup = open_store(pg_schema_url)
    stores = [open_store(pg_schema_url) for _ in range(threads)]
    try:
        operation = setup.begin_operation(
            new_operation(
                ALICE,
                method="tools/call",
                target="t",
                request_digest="d",
                now=datetime.now(UTC),
                ttl=timedelta(hours=1),
            )
        ).operation
        holders = {f"holder-{index}" for index in range(threads)}
        start = threading.Barrier(threads)

        def contend(index: int) -> tuple[list[Claim], list[str]]:
            store, holder = stores[index], f"holder-{index}"
            claims, errors = [], []
            start.wait()
            for _ in range(rounds):
                lease_until = datetime.now(UTC) + timedelta(seconds=30)
                try:
                    claim = store.claim(
                        operation.operation_id, "step:x", holder=holder, lease_until=lease_until, caller=ALICE
                    )
                except Exception as error:
                    errors.append(f"{type(error).__name__}: {error}")
                    continue
                claims.append(claim)
                if claim.held_by(holder):
                    store.release_claim(operation.operation_id, "step:x", caller=ALICE, holder=holder)
            return claims, errors

        with ThreadPoolExecutor(threads) as pool:
            outcomes = list(pool.map(contend, range(threads)))
    finally:
        for store in stores:
            store.close()
        setup.close()
    errors = [error for _, failed in outcomes for error in failed]
    assert errors == [], f"{len(errors)} of {threads * rounds} claims raised, first: {errors[0]}"
    claims = [claim for taken, _ in outcomes for claim in taken]
    assert len(claims) == threads * rounds
    assert all(isinstance(claim, Claim) and claim.holder in holders for claim in claims)


def test_racing_begin_operations_audit_an_overdue_operation_expired_once(pg_schema_url: str) -> None:
    """Twelve store instances begin the same call at once and each finds its overdue open operation.
    Only the one whose compare-and-set moved it writes the `expired` audit row."""
    racers = 12
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))

    def candidate(ttl: timedelta) -> Operation:
        return new_operation(ALICE, method="tools/call", target="t", request_digest="d", now=clock(), ttl=ttl)

    setup = open_store(pg_schema_url, clock=clock)
    stores = [open_store(pg_schema_url, clock=clock) for _ in range(racers)]
    try:
        overdue = setup.begin_operation(candidate(timedelta(minutes=1))).operation
        clock.advance(timedelta(minutes=2))
        start = threading.Barrier(racers)

        def begin(index: int) -> bool:
            start.wait()
            return stores[index].begin_operation(candidate(timedelta(hours=1))).created

        with ThreadPoolExecutor(racers) as pool:
            created = list(pool.map(begin, range(racers)))
        trail = setup.audit_trail(overdue.operation_id, OPERATOR)
        assert setup.get_operation(overdue.operation_id, OPERATOR).status is OperationStatus.EXPIRED
    finally:
        for store in stores:
            store.close()
        setup.close()
    assert created.count(True) == 1
    assert [(entry.from_status, entry.to_status) for entry in trail] == [(None, "open"), ("open", "expired")]
