"""Create → accept cycles per second through the Store API, against the same SQL on the bare driver.

The raw side is the floor: the very statements and transactions the store issues, with every parameter
computed beforehand, so store/raw is what the abstraction costs. Both sides share one database and take
turns round by round, first one then the other, so growth of the tables and machine drift hit them alike.
A cycle is two commits. SQLite runs twice, with `synchronous=normal` (the default) and `full` (the WAL
synced at every commit, both sides alike); the full rows take fewer cycles, each costing two syncs.
The SQLite store also checks, before each write transaction, that its file is still the one it opened:
that check is timed on its own at the end.
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import statistics
import tempfile
import time
import timeit
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench._common import (
    FORM_SCHEMA,
    INSERT_AUDIT,
    INSERT_DECISION,
    POSTGRES,
    PRINCIPAL,
    SQLITE,
    Dialect,
    add_backend_arguments,
    bench_operation,
    pg_schema,
    qmark,
    select_backends,
    verdict,
)
from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    DecisionStatus,
    JSONObject,
    Operation,
    SubjectKind,
    new_form_decision,
    redact_content,
)
from mcp_elicit.store import Store, open_store, utc_now
from mcp_elicit.store.sqlite import SQLiteStore, Synchronous

TARGET = 0.80
DESCRIPTION = "Create -> accept cycles per second, store API against the same SQL on the bare driver."
CONTENT: JSONObject = {"approve": True, "note": "ship it"}

ACCEPT = (
    "UPDATE elicit_decisions SET status = %s, completion_version = %s, content = %s, updated_at = %s,"
    " expires_at = %s WHERE elicitation_id = %s AND status = %s AND completion_version = %s"
    " AND expires_at > %s AND principal_id = %s AND client_id = %s"
)

Row = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class RawCycle:
    insert: Row
    created: Row
    accept: Row
    accepted: Row


def raw_cycle(d: Decision, now: datetime, dialect: Dialect) -> RawCycle:
    t, j = dialect.time, dialect.json
    actor = d.principal.actor
    created_details: JSONObject = {
        "mode": d.mode.value,
        "operation_id": d.operation_id,
        "key": d.key,
        "expires_at": d.expires_at.isoformat(),
    }
    return RawCycle(
        insert=(
            d.elicitation_id, d.operation_id, d.key, d.principal_id, d.client_id, d.origin_method,
            d.origin_request_digest, d.mode.value, d.status.value, d.resume_policy.value, d.message,
            j(d.requested_schema), d.url, j(list(d.sensitive_fields)), None, 0, t(d.created_at), t(d.updated_at),
            t(d.expires_at),
        ),
        created=(
            SubjectKind.DECISION.value, d.elicitation_id, None, DecisionStatus.REQUESTED.value, actor, "requested",
            j(created_details), t(d.created_at),
        ),
        accept=(
            DecisionStatus.ACCEPTED.value, 1, j(CONTENT), t(now), t(d.expires_at), d.elicitation_id,
            DecisionStatus.REQUESTED.value, 0, t(now), d.principal_id, d.client_id,
        ),
        accepted=(
            SubjectKind.DECISION.value, d.elicitation_id, DecisionStatus.REQUESTED.value,
            DecisionStatus.ACCEPTED.value, actor, "", j({"version": 1, "content": redact_content(CONTENT)}), t(now),
        ),
    )  # fmt: skip


def decisions(operation: Operation, count: int) -> list[Decision]:
    """`count` questions of one operation, each under a key of its own (an operation asks one per key)."""
    now = utc_now()
    return [
        new_form_decision(
            DecisionOrigin(
                operation_id=operation.operation_id,
                key=f"approve_{uuid.uuid4().hex}",
                principal=PRINCIPAL,
                origin_method=operation.method,
                origin_request_digest=operation.request_digest,
            ),
            message="Deploy to production?",
            requested_schema=FORM_SCHEMA,
            now=now,
            ttl=timedelta(hours=1),
        )
        for _ in range(count)
    ]


class Side(ABC):
    """One contender: prepares its inputs untimed, then runs them timed."""

    name: str

    @abstractmethod
    def prepare(self, batch: list[Decision]) -> None: ...

    @abstractmethod
    def run(self) -> None: ...


class StoreSide(Side):
    name = "store"

    def __init__(self, store: Store) -> None:
        self._store = store
        self._batch: list[Decision] = []

    def prepare(self, batch: list[Decision]) -> None:
        self._batch = batch

    def run(self) -> None:
        store = self._store
        for decision in self._batch:
            created = store.create_decision(decision)
            store.transition(created, DecisionStatus.ACCEPTED, caller=PRINCIPAL, content=CONTENT)


class RawSQLite(Side):
    name = "raw"

    def __init__(self, path: Path, synchronous: Synchronous) -> None:
        self._connection = sqlite3.connect(path, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode = WAL")
        self._connection.execute("PRAGMA foreign_keys = ON")
        self._connection.execute(f"PRAGMA synchronous = {synchronous.name}")
        self._cycles: list[RawCycle] = []
        self._insert_decision = qmark(INSERT_DECISION)
        self._insert_audit = qmark(INSERT_AUDIT)
        self._accept = qmark(ACCEPT)

    def prepare(self, batch: list[Decision]) -> None:
        now = utc_now()
        self._cycles = [raw_cycle(decision, now, SQLITE) for decision in batch]

    def run(self) -> None:
        execute = self._connection.execute
        insert_decision, insert_audit, accept = self._insert_decision, self._insert_audit, self._accept
        for cycle in self._cycles:
            execute("BEGIN IMMEDIATE")
            execute(insert_decision, cycle.insert)
            execute(insert_audit, cycle.created)
            execute("COMMIT")
            execute("BEGIN IMMEDIATE")
            if execute(accept, cycle.accept).rowcount != 1:
                raise RuntimeError("the raw accept matched no row")
            execute(insert_audit, cycle.accepted)
            execute("COMMIT")

    def count(self, sql: str) -> int:
        value: int = self._connection.execute(sql).fetchone()[0]
        return value

    def close(self) -> None:
        self._connection.close()


class RawPostgres(Side):
    name = "raw"

    def __init__(self, url: str) -> None:
        self._connection: psycopg.Connection[Any] = psycopg.connect(url)
        self._connection.execute("SET TIME ZONE 'UTC'")
        self._connection.commit()
        self._cursor = self._connection.cursor()
        self._cycles: list[RawCycle] = []

    def prepare(self, batch: list[Decision]) -> None:
        now = utc_now()
        self._cycles = [raw_cycle(decision, now, POSTGRES) for decision in batch]

    def run(self) -> None:
        execute, commit = self._cursor.execute, self._connection.commit
        for cycle in self._cycles:
            execute(INSERT_DECISION, cycle.insert)
            execute(INSERT_AUDIT, cycle.created)
            commit()
            if execute(ACCEPT, cycle.accept).rowcount != 1:
                raise RuntimeError("the raw accept matched no row")
            execute(INSERT_AUDIT, cycle.accepted)
            commit()

    def count(self, sql: str) -> int:
        row = self._connection.execute(sql).fetchone()
        self._connection.commit()
        return int(row[0]) if row else -1

    def close(self) -> None:
        self._cursor.close()
        self._connection.close()


def timed_rate(side: Side, operation: Operation, cycles: int) -> float:
    side.prepare(decisions(operation, cycles))
    gc.collect()
    started = time.perf_counter()
    side.run()
    return cycles / (time.perf_counter() - started)


@dataclass(frozen=True, slots=True)
class Outcome:
    backend: str
    cycles: int
    store_rates: list[float]
    raw_rates: list[float]

    @property
    def store_rate(self) -> float:
        return statistics.median(self.store_rates)

    @property
    def raw_rate(self) -> float:
        return statistics.median(self.raw_rates)

    @property
    def ratio(self) -> float:
        return self.store_rate / self.raw_rate


def warmup_cycles(cycles: int) -> int:
    return max(100, cycles // 10)


def contest(backend: str, store: Store, raw: Side, cycles: int, rounds: int) -> Outcome:
    """Warm both sides up, then alternate which goes first so neither always runs on the colder table."""
    operation = store.create_operation(bench_operation(utc_now(), timedelta(days=1)))
    sides: Sequence[Side] = (StoreSide(store), raw)
    for side in sides:
        timed_rate(side, operation, warmup_cycles(cycles))
    rates: dict[str, list[float]] = {"store": [], "raw": []}
    for number in range(rounds):
        for side in sides if number % 2 == 0 else reversed(sides):
            rates[side.name].append(timed_rate(side, operation, cycles))
    return Outcome(backend, cycles, rates["store"], rates["raw"])


def run_sqlite(cycles: int, rounds: int, synchronous: Synchronous) -> Outcome:
    name = "sqlite" if synchronous is Synchronous.NORMAL else f"sqlite-{synchronous.value}"
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
        path = Path(directory) / "elicit.db"
        store = open_store(f"sqlite://{path}?synchronous={synchronous.value}")
        raw = RawSQLite(path, synchronous)
        try:
            outcome = contest(name, store, raw, cycles, rounds)
            check_counts(raw.count, cycles, rounds)
        finally:
            raw.close()
            store.close()
    return outcome


def identity_check_microseconds(repeat: int = 7, number: int = 20_000) -> float:
    """The SQLite store's per-write-transaction check that its file is still the one it opened (a `stat`)."""
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
        store = open_store(f"sqlite://{Path(directory) / 'elicit.db'}")
        try:
            identity = store._identity if isinstance(store, SQLiteStore) else None
            if identity is None:
                raise RuntimeError("the SQLite store took no file identity when it opened")
            return min(timeit.repeat(identity.check, repeat=repeat, number=number)) / number * 1e6
        finally:
            store.close()


def run_postgres(url: str, cycles: int, rounds: int) -> Outcome:
    with pg_schema(url, "bench_store") as schema_url:
        store = open_store(schema_url)
        raw = RawPostgres(schema_url)
        try:
            outcome = contest("postgres", store, raw, cycles, rounds)
            check_counts(raw.count, cycles, rounds)
        finally:
            raw.close()
            store.close()
    return outcome


def check_counts(count: Callable[[str], int], cycles: int, rounds: int) -> None:
    """Both sides must have done the same, complete work: every decision accepted, two audit rows each."""
    expected = 2 * (warmup_cycles(cycles) + rounds * cycles)
    accepted = count("SELECT count(*) FROM elicit_decisions WHERE status = 'accepted'")
    audited = count("SELECT count(*) FROM elicit_audit WHERE subject_kind = 'decision'")
    if accepted != expected or audited != 2 * expected:
        raise RuntimeError(f"expected {expected} accepted decisions and {2 * expected} audit rows, "
                           f"found {accepted} and {audited}")  # fmt: skip


def print_table(outcomes: list[Outcome], rounds: int) -> None:
    print(f"\ncreate -> accept cycles/s (median of {rounds} rounds per side)")
    for outcome in outcomes:
        for name, rates in (("store", outcome.store_rates), ("raw", outcome.raw_rates)):
            shown = ", ".join(f"{rate:,.0f}" for rate in rates)
            print(f"  {outcome.backend:<12} {name:<5} rounds of {outcome.cycles} cycles: {shown}")
    header = (
        f"{'backend':<13}{'store cycles/s':>15}{'raw cycles/s':>14}{'raw cycle ms':>14}{'store/raw':>11}"
        f"{'target':>9}  result"
    )
    print()
    print(header)
    print("-" * len(header))
    for o in outcomes:
        print(
            f"{o.backend:<13}{o.store_rate:>15,.0f}{o.raw_rate:>14,.0f}{1000 / o.raw_rate:>14.3f}{o.ratio:>11.2f}"
            f"{'>= ' + format(TARGET, '.2f'):>9}  {verdict(o.ratio >= TARGET)}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=DESCRIPTION)
    parser.add_argument("--cycles", type=int, default=2000, help="cycles per side per round (default %(default)s)")
    parser.add_argument(
        "--full-cycles",
        type=int,
        default=300,
        help="cycles per side per round with synchronous=full, two syncs each (default %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per side (default %(default)s)")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.full_cycles < 1 or args.rounds < 1:
        parser.error("--cycles, --full-cycles and --rounds must be at least 1")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    outcomes: list[Outcome] = []
    for backend in backends:
        print(f"running {backend} ...", flush=True)
        if backend == "sqlite":
            outcomes.append(run_sqlite(args.cycles, args.rounds, Synchronous.NORMAL))
            print("running sqlite with synchronous=full ...", flush=True)
            outcomes.append(run_sqlite(args.full_cycles, args.rounds, Synchronous.FULL))
        else:
            outcomes.append(run_postgres(args.pg_url, args.cycles, args.rounds))
    print_table(outcomes, args.rounds)
    if "sqlite" in backends:
        print(f"\nsqlite file identity check before each write transaction: {identity_check_microseconds():.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
