"""One `sweep_expired()` over a large table of pending decisions, against full-table updates of that table.

A sweep runs on a timer in every instance, so its cost must follow the number of overdue decisions, not
the number of waiting ones: that is what the partial index `elicit_decisions_due` is for. Two yardsticks,
each rolled back so the sweep then meets the table as loaded:

- the target one, a full-table update: the naive sweep that rewrites every waiting row, setting the
  overdue ones to `expired` (what "expire by scanning the table" costs when every row is touched);
- a stricter one, a full-table scan that writes only the overdue rows (its predicate hides `expires_at`
  from the index). The sweep writes the same rows plus one audit row each, so at 1% overdue the
  per-row write cost, not the scan, dominates both; it is printed for honesty, not as the target.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
from mcp_elicit.model import JSONValue, Operation
from mcp_elicit.store import SWEEP_BATCH, Store, open_store

DESCRIPTION = "Time one sweep_expired() over many pending decisions against a full-table scan of them."
TARGET = 0.05
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
DUE_INDEX = "elicit_decisions_due"
WAITING = "('requested', 'accepted_url', 'external_pending')"
SCAN_REPEATS = 3

SWEEP_SELECT = (
    "SELECT elicitation_id, status, completion_version FROM elicit_decisions"
    f" WHERE status IN {WAITING} AND expires_at <= %s ORDER BY expires_at LIMIT %s"
)
SQLITE_SCAN = (
    "UPDATE elicit_decisions NOT INDEXED SET updated_at = updated_at"
    f" WHERE status IN {WAITING} AND expires_at + 0 <= %s"
)
SQLITE_SELECT_SCAN = SWEEP_SELECT.replace("FROM elicit_decisions", "FROM elicit_decisions NOT INDEXED")
PG_SWEEP_SELECT = SWEEP_SELECT + " FOR UPDATE SKIP LOCKED"
COUNT_EXPIRED = "SELECT count(*) FROM elicit_decisions WHERE status = 'expired'"
SQLITE_FULL_UPDATE = (
    "UPDATE elicit_decisions SET status = CASE WHEN expires_at <= %s THEN 'expired' ELSE status END,"
    f" updated_at = %s WHERE status IN {WAITING}"
)
POSTGRES_FULL_UPDATE = SQLITE_FULL_UPDATE
POSTGRES_SCAN = (
    "UPDATE elicit_decisions SET updated_at = updated_at"
    f" WHERE status IN {WAITING} AND expires_at + interval '0 seconds' <= %s"
)


def fixed_clock() -> datetime:
    return NOW


Row = tuple[object, ...]


def overdue_positions(rows: int, fraction: float, seed: int, layout: str) -> set[int]:
    """Which rows are overdue: the oldest ones (decisions with like TTLs expire in creation order, so they
    sit together on disk), or rows scattered at random over the table (the worst case for page writes)."""
    count = round(rows * fraction)
    if layout == "oldest":
        return set(range(count))
    return set(random.Random(seed).sample(range(rows), count))


def load_rows(
    operation: Operation, rows: int, overdue: set[int], dialect: Dialect, seed: int
) -> Iterator[tuple[Row, Row]]:
    """Pending form decisions as `create_decision` would have written them, with their creation audit rows."""
    rng = random.Random(seed)
    t, j = dialect.time, dialect.json
    schema, sensitive = j(FORM_SCHEMA), j([])
    actor = PRINCIPAL.actor
    for position in range(rows):
        elicitation_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        created = NOW - timedelta(seconds=rng.randint(3600, 2 * 86400))
        if position in overdue:
            expires = NOW - timedelta(seconds=rng.randint(1, 3600))
        else:
            expires = NOW + timedelta(seconds=rng.randint(60, 7 * 86400))
        details: JSONValue = {
            "mode": "form",
            "operation_id": operation.operation_id,
            "key": "approve",
            "expires_at": expires.isoformat(),
        }
        decision = (
            elicitation_id, operation.operation_id, "approve", PRINCIPAL.principal_id, PRINCIPAL.client_id,
            operation.method, operation.request_digest, "form", "requested", "auto", "Deploy to production?",
            schema, None, sensitive, None, 0, t(created), t(created), t(expires),
        )  # fmt: skip
        audit = ("decision", elicitation_id, None, "requested", actor, "requested", j(details), t(created))
        yield decision, audit


@dataclass(frozen=True, slots=True)
class Outcome:
    backend: str
    rows: int
    overdue: int
    load_seconds: float
    touched: int
    expired_rows: int
    sweep_seconds: float
    scan_seconds: float
    scan_rows: int
    plan: list[str]
    scan_plan: list[str]
    select_seconds: float
    select_scan_seconds: float
    full_update_seconds: float
    full_update_rows: int
    layout: str

    @property
    def ratio(self) -> float:
        return self.sweep_seconds / self.full_update_seconds

    @property
    def scan_ratio(self) -> float:
        return self.sweep_seconds / self.scan_seconds

    @property
    def uses_index(self) -> bool:
        return any(DUE_INDEX in line for line in self.plan)

    @property
    def passed(self) -> bool:
        correct = self.touched == self.overdue == self.expired_rows == self.scan_rows
        return correct and self.full_update_rows == self.rows and self.uses_index and self.ratio < TARGET


def timed_sweep(store: Store) -> tuple[int, float]:
    started = time.perf_counter()
    result = store.sweep_expired()
    return result.decisions, time.perf_counter() - started


def run_sqlite(rows: int, fraction: float, seed: int, layout: str) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
        path = Path(directory) / "elicit.db"
        store = open_store(f"sqlite://{path}", clock=fixed_clock)
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute("PRAGMA synchronous = NORMAL")
            operation = store.create_operation(bench_operation(NOW - timedelta(days=3), timedelta(days=30)))
            overdue = overdue_positions(rows, fraction, seed, layout)
            started = time.perf_counter()
            pairs = list(load_rows(operation, rows, overdue, SQLITE, seed))
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(qmark(INSERT_DECISION), [pair[0] for pair in pairs])
            connection.executemany(qmark(INSERT_AUDIT), [pair[1] for pair in pairs])
            connection.execute("COMMIT")
            load_seconds = time.perf_counter() - started
            del pairs
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")

            now = SQLITE.time(NOW)
            plan = sqlite_plan(connection, SWEEP_SELECT, (now, SWEEP_BATCH))
            scan_plan = sqlite_plan(connection, SQLITE_SCAN, (now,))

            def scan() -> tuple[int, float]:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    started = time.perf_counter()
                    touched = connection.execute(qmark(SQLITE_SCAN), (now,)).rowcount
                    return touched, time.perf_counter() - started
                finally:
                    connection.execute("ROLLBACK")

            def select(sql: str) -> tuple[int, float]:
                started = time.perf_counter()
                found = len(connection.execute(qmark(sql), (now, SWEEP_BATCH)).fetchall())
                return found, time.perf_counter() - started

            def full_update() -> tuple[int, float]:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    started = time.perf_counter()
                    touched = connection.execute(qmark(SQLITE_FULL_UPDATE), (now, now)).rowcount
                    return touched, time.perf_counter() - started
                finally:
                    connection.execute("ROLLBACK")

            _, select_seconds = repeated_scan(lambda: select(SWEEP_SELECT))
            _, select_scan_seconds = repeated_scan(lambda: select(SQLITE_SELECT_SCAN))
            scan_rows, scan_seconds = repeated_scan(scan)
            full_rows, full_seconds = repeated_scan(full_update)
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            touched, sweep_seconds = timed_sweep(store)
            expired = int(connection.execute(COUNT_EXPIRED).fetchone()[0])
        finally:
            connection.close()
            store.close()
    return Outcome(
        "sqlite", rows, len(overdue), load_seconds, touched, expired, sweep_seconds, scan_seconds, scan_rows, plan,
        scan_plan, select_seconds, select_scan_seconds, full_seconds, full_rows, layout,
    )  # fmt: skip


def sqlite_plan(connection: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[str]:
    return [str(row[3]) for row in connection.execute("EXPLAIN QUERY PLAN " + qmark(sql), params)]


def run_postgres(url: str, rows: int, fraction: float, seed: int, layout: str) -> Outcome:
    with pg_schema(url, "bench_sweep") as schema_url:
        store = open_store(schema_url, clock=fixed_clock)
        connection: psycopg.Connection[Any] = psycopg.connect(schema_url, autocommit=True)
        try:
            connection.execute("SET TIME ZONE 'UTC'")
            operation = store.create_operation(bench_operation(NOW - timedelta(days=3), timedelta(days=30)))
            overdue = overdue_positions(rows, fraction, seed, layout)
            started = time.perf_counter()
            pairs = list(load_rows(operation, rows, overdue, POSTGRES, seed))
            with connection.transaction(), connection.cursor() as cursor:
                cursor.executemany(INSERT_DECISION, [pair[0] for pair in pairs])
                cursor.executemany(INSERT_AUDIT, [pair[1] for pair in pairs])
            load_seconds = time.perf_counter() - started
            del pairs
            connection.execute("VACUUM ANALYZE elicit_decisions")
            connection.execute("VACUUM ANALYZE elicit_audit")

            plan = pg_plan(connection, PG_SWEEP_SELECT, (NOW, SWEEP_BATCH))
            scan_plan = pg_plan(connection, POSTGRES_SCAN, (NOW,))

            def scan() -> tuple[int, float]:
                with connection.transaction(force_rollback=True):
                    started = time.perf_counter()
                    touched = connection.execute(POSTGRES_SCAN, (NOW,)).rowcount
                    return touched, time.perf_counter() - started

            def select(forced_scan: bool) -> tuple[int, float]:
                with connection.transaction(force_rollback=True):
                    if forced_scan:
                        connection.execute("SET LOCAL enable_indexscan = off")
                        connection.execute("SET LOCAL enable_bitmapscan = off")
                    started = time.perf_counter()
                    found = len(connection.execute(PG_SWEEP_SELECT, (NOW, SWEEP_BATCH)).fetchall())
                    return found, time.perf_counter() - started

            def full_update() -> tuple[int, float]:
                with connection.transaction(force_rollback=True):
                    started = time.perf_counter()
                    touched = connection.execute(POSTGRES_FULL_UPDATE, (NOW, NOW)).rowcount
                    return touched, time.perf_counter() - started

            _, select_seconds = repeated_scan(lambda: select(False))
            _, select_scan_seconds = repeated_scan(lambda: select(True))
            scan_rows, scan_seconds = repeated_scan(scan)
            full_rows, full_seconds = repeated_scan(full_update)
            connection.execute("VACUUM elicit_decisions")
            touched, sweep_seconds = timed_sweep(store)
            expired_row = connection.execute(COUNT_EXPIRED).fetchone()
            expired = int(expired_row[0]) if expired_row else -1
        finally:
            connection.close()
            store.close()
    return Outcome(
        "postgres", rows, len(overdue), load_seconds, touched, expired, sweep_seconds, scan_seconds, scan_rows, plan,
        scan_plan, select_seconds, select_scan_seconds, full_seconds, full_rows, layout,
    )  # fmt: skip


def pg_plan(connection: psycopg.Connection[Any], sql: str, params: Sequence[object]) -> list[str]:
    return [str(row[0]) for row in connection.execute("EXPLAIN " + sql, params)]


def repeated_scan(scan: Callable[[], tuple[int, float]]) -> tuple[int, float]:
    """Median of a few rolled-back runs after one untimed one, so every contender meets a warm cache."""
    scan()
    results = [scan() for _ in range(SCAN_REPEATS)]
    if len({touched for touched, _ in results}) != 1:
        raise RuntimeError(f"repeated runs disagree on the rows they find: {results}")
    return results[0][0], statistics.median(seconds for _, seconds in results)


def print_report(outcomes: list[Outcome]) -> None:
    for o in outcomes:
        print(
            f"\n{o.backend}: loaded {o.rows:,} pending decisions ({o.overdue:,} overdue, {o.layout})"
            f" in {o.load_seconds:.1f} s"
        )
        print(f"  plan of the sweep's SELECT ({'uses' if o.uses_index else 'does NOT use'} {DUE_INDEX}):")
        for line in o.plan:
            print(f"    {line}")
        print("  plan of the full-scan yardstick:")
        for line in o.scan_plan:
            print(f"    {line}")
    header = (
        f"{'backend':<10}{'rows':>9}{'overdue':>9}{'touched':>9}{'expired':>9}{'sweep s':>10}{'full update s':>15}"
        f"{'ratio':>8}{'target':>8}  result"
    )
    print()
    print(header)
    print("-" * len(header))
    for o in outcomes:
        print(
            f"{o.backend:<10}{o.rows:>9,}{o.overdue:>9,}{o.touched:>9,}{o.expired_rows:>9,}{o.sweep_seconds:>10.4f}"
            f"{o.full_update_seconds:>15.4f}{o.ratio:>8.1%}{'< ' + format(TARGET, '.0%'):>8}  {verdict(o.passed)}"
        )
    print(
        f"\nPASS needs: sweep < {TARGET:.0%} of the full-table update (which rewrote every waiting row), rows"
        f" touched == overdue == rows now 'expired', and {DUE_INDEX} in the sweep's plan."
    )
    print("\nStricter yardstick, a full scan writing only the overdue rows (no audit rows):")
    for o in outcomes:
        print(
            f"  {o.backend:<10}sweep {o.sweep_seconds * 1000:.1f} ms, scan-and-update-overdue"
            f" {o.scan_seconds * 1000:.1f} ms ({o.scan_ratio:.0%})"
        )
    print("\nThe sweep's SELECT alone (finding up to one batch of due rows), index against forced full scan:")
    for o in outcomes:
        print(
            f"  {o.backend:<10}via {DUE_INDEX}: {o.select_seconds * 1000:.2f} ms, full scan: "
            f"{o.select_scan_seconds * 1000:.2f} ms ({o.select_seconds / o.select_scan_seconds:.1%})"
        )


def fraction_arg(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a fraction lies between 0 and 1, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep", description=DESCRIPTION)
    parser.add_argument("--rows", type=int, default=100_000, help="pending decisions to load (default %(default)s)")
    parser.add_argument(
        "--overdue-fraction",
        type=fraction_arg,
        default=0.01,
        help="share of them already overdue (default %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=20261130, help="seed of the generated rows (default %(default)s)")
    parser.add_argument(
        "--layout",
        choices=("oldest", "random"),
        default="oldest",
        help="overdue rows are the oldest ones, or scattered at random (default %(default)s)",
    )
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be at least 1")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    outcomes: list[Outcome] = []
    for backend in backends:
        print(f"running {backend} ...", flush=True)
        if backend == "sqlite":
            outcomes.append(run_sqlite(args.rows, args.overdue_fraction, args.seed, args.layout))
        else:
            outcomes.append(run_postgres(args.pg_url, args.rows, args.overdue_fraction, args.seed, args.layout))
    print_report(outcomes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
