"""One tool call with one form decision, in process: mcp-elicit against the bare SDK and a raw-driver floor.

Client and server share one event loop over the SDK's in-memory transport, so what is left is the tool and
what wraps it: the durable records and their commits. Each store's floor is measured in the same run: the
raw driver's cycle of two commits (a decision inserted with its audit row, then accepted with another),
the very statements `bench.store` times. The target (issue "Performance at scale") is that a call costs at
most the bare SDK's call plus three such cycles, on PostgreSQL and on SQLite with `synchronous=full`;
SQLite at its default `normal` is reported too. Sides alternate round by round, so drift hits both.
"""

from __future__ import annotations

import argparse
import gc
import logging
import re
import secrets
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import cast

import anyio
from mcp import Client

from bench._common import add_backend_arguments, bench_operation, pg_schema, select_backends, verdict
from bench._overhead_server import build, outcome
from bench.overhead import ANSWERED, ELICIT, ERAS, SDK, SIDES, Era, accept, text_of
from bench.store import RawPostgres, RawSQLite, Side, decisions
from mcp_elicit.server import Elicitation
from mcp_elicit.store import open_store, utc_now
from mcp_elicit.store.sqlite import SQLiteStore, Synchronous

CYCLES_OF_SLACK = 3
DESCRIPTION = "One tool call with one form decision in process: mcp-elicit against the bare SDK and the raw driver."


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    targeted: bool
    sqlite: Synchronous | None = None
    """The `synchronous` setting of a SQLite backend, whose SQL floor is measured too."""


@dataclass(slots=True)
class Outcome:
    backend: Backend
    era: str
    seconds: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    cycle_seconds: list[float] = field(default_factory=list)
    floor_seconds: list[float] = field(default_factory=list)

    def median_ms(self, side: str) -> float:
        return statistics.median(self.seconds[side]) * 1000

    @property
    def floor_ms(self) -> float | None:
        return statistics.median(self.floor_seconds) * 1000 if self.floor_seconds else None

    @property
    def cycle_ms(self) -> float:
        return statistics.median(self.cycle_seconds) * 1000

    @property
    def bound_ms(self) -> float:
        return self.median_ms(SDK) + CYCLES_OF_SLACK * self.cycle_ms

    @property
    def met(self) -> bool:
        return self.median_ms(ELICIT) <= self.bound_ms


class Calls:
    """Numbers calls across the whole run: a repeated argument would be a replay, not a new call."""

    def __init__(self) -> None:
        self._last = 0

    async def block(self, client: Client, tool: str, calls: int) -> float:
        """Seconds per call over `calls` consecutive calls of `tool`, each checked for the answer."""
        gc.collect()
        started = time.perf_counter()
        for _ in range(calls):
            self._last += 1
            result = await client.call_tool(tool, {"n": self._last})
            if text_of(result) != outcome(self._last, ANSWERED):
                raise RuntimeError(f"{tool} returned {text_of(result)!r}")
        return (time.perf_counter() - started) / calls


def cycle_seconds(raw: Side, cycles: int) -> float:
    """Seconds per raw two-commit cycle, on an operation of its own in the bench's database."""
    raw.prepare(decisions(RAW_OPERATION, cycles))
    gc.collect()
    started = time.perf_counter()
    raw.run()
    return (time.perf_counter() - started) / cycles


RAW_OPERATION = bench_operation(utc_now(), timedelta(days=1))


@asynccontextmanager
async def connected(store_url: str, era: Era) -> AsyncIterator[tuple[Client, Elicitation]]:
    elicitation, _ = build(store_url, 0)
    assert elicitation._server is not None
    try:
        async with Client(elicitation._server, mode=era.client_mode, elicitation_callback=accept) as client:
            yield client, elicitation
    finally:
        elicitation.close()


_FRESH = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|(?:round|call):[A-Za-z0-9_-]+|sha256:[0-9a-f]+"
)
"""What makes one call's records its own: ids, round nonces and holders, the request digest."""


def _fresh(value: str) -> str:
    if value.startswith(("round:", "call:")):
        return f"{value.split(':', 1)[0]}:{secrets.token_urlsafe(18)}"
    if value.startswith("sha256:"):
        return f"sha256:{secrets.token_hex(32)}"
    return str(uuid.uuid4())


class SqlFloor:
    """The very statements one mcp-elicit call ran on SQLite, replayed raw with fresh ids: durability's own cost.

    Captured from the store's connection (its trace callback gives each statement with its values), so the
    floor follows whatever the store does; what a call costs above sdk + floor is the runtime's own work.
    """

    def __init__(self, statements: list[str]) -> None:
        self._joined = "\n;\n".join(statements)
        self.count = len(statements)

    @classmethod
    async def captured(cls, client: Client, elicitation: Elicitation, era: Era, tally: Calls) -> SqlFloor:
        statements: list[str] = []
        connection = cast(SQLiteStore, elicitation.store)._connection()
        connection.set_trace_callback(statements.append)
        try:
            await tally.block(client, era.tool(ELICIT), 1)
        finally:
            connection.set_trace_callback(None)
        return cls(statements)

    def seconds(self, path: Path, synchronous: Synchronous, calls: int) -> float:
        """Seconds per replayed call: each replay's text is made before the clock starts."""
        replays = [self._replay() for _ in range(calls)]
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute(f"PRAGMA synchronous = {synchronous.name}")
            gc.collect()
            started = time.perf_counter()
            for replay in replays:
                for statement in replay:
                    connection.execute(statement)
            return (time.perf_counter() - started) / calls
        finally:
            connection.close()

    def _replay(self) -> list[str]:
        renamed: dict[str, str] = {}
        text = _FRESH.sub(lambda found: renamed.setdefault(found.group(0), _fresh(found.group(0))), self._joined)
        return text.split("\n;\n")


async def contest(
    backend: Backend, store_url: str, raw: Side, era: Era, calls: int, rounds: int, tally: Calls
) -> Outcome:
    result = Outcome(backend, era.name)
    async with connected(store_url, era) as (client, elicitation):
        for side in SIDES:
            await tally.block(client, era.tool(side), max(20, calls // 4))
        cycle_seconds(raw, max(20, calls // 4))
        floor = await SqlFloor.captured(client, elicitation, era, tally) if backend.sqlite is not None else None
        for number in range(rounds):
            for side in SIDES if number % 2 == 0 else reversed(SIDES):
                result.seconds[side].append(await tally.block(client, era.tool(side), calls))
            result.cycle_seconds.append(cycle_seconds(raw, calls))
            if floor is not None and backend.sqlite is not None:
                path = cast(SQLiteStore, elicitation.store).path
                result.floor_seconds.append(floor.seconds(path, backend.sqlite, calls))
    return result


@contextmanager
def sqlite_side(synchronous: Synchronous) -> Iterator[tuple[str, Side]]:
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
        path = Path(directory) / "elicit.db"
        url = f"sqlite://{path}?synchronous={synchronous.value}"
        open_store(url).close()  # the schema, which the raw side writes into
        raw = RawSQLite(path, synchronous)
        raw_operation_in(url)
        try:
            yield url, raw
        finally:
            raw.close()


@contextmanager
def postgres_side(pg_url: str) -> Iterator[tuple[str, Side]]:
    with pg_schema(pg_url, "bench_inprocess") as url:
        open_store(url).close()
        raw = RawPostgres(url)
        raw_operation_in(url)
        try:
            yield url, raw
        finally:
            raw.close()


def raw_operation_in(url: str) -> None:
    store = open_store(url)
    try:
        store.create_operation(RAW_OPERATION)
    finally:
        store.close()


async def run(backends: Sequence[str], pg_url: str, calls: int, rounds: int) -> list[Outcome]:
    outcomes: list[Outcome] = []
    tally = Calls()
    plans: list[tuple[Backend, Callable[[], AbstractContextManager[tuple[str, Side]]]]] = []
    if "sqlite" in backends:
        plans.append((Backend("sqlite", False, Synchronous.NORMAL), lambda: sqlite_side(Synchronous.NORMAL)))
        plans.append((Backend("sqlite-full", True, Synchronous.FULL), lambda: sqlite_side(Synchronous.FULL)))
    if "postgres" in backends:
        plans.append((Backend("postgres", targeted=True), lambda: postgres_side(pg_url)))
    for backend, side in plans:
        for era in ERAS:
            print(f"running {backend.name} {era.name} ...", flush=True)
            with side() as (url, raw):
                outcomes.append(await contest(backend, url, raw, era, calls, rounds, tally))
    return outcomes


def print_table(outcomes: list[Outcome], calls: int, rounds: int) -> None:
    print(f"\none tools/call with one accepted form decision, in process: median ms of {rounds} rounds x {calls} calls")
    header = (
        f"{'backend':<12}{'era':<13}{'sdk':>8}{'mcp-elicit':>12}{'+ms':>8}{'ratio':>7}{'2-commit':>10}"
        f"{'bound':>8}{'sql':>8}{'other':>8}  result"
    )
    print(header)
    print("-" * len(header))
    for o in outcomes:
        sdk, elicit, floor = o.median_ms(SDK), o.median_ms(ELICIT), o.floor_ms
        result = verdict(o.met) if o.backend.targeted else "info"
        sql = "-" if floor is None else f"{floor:.2f}"
        other = "-" if floor is None else f"{elicit - sdk - floor:.2f}"
        print(
            f"{o.backend.name:<12}{o.era:<13}{sdk:>8.2f}{elicit:>12.2f}{elicit - sdk:>8.2f}{elicit / sdk:>7.2f}"
            f"{o.cycle_ms:>10.2f}{o.bound_ms:>8.2f}{sql:>8}{other:>8}  {result}"
        )
    print(f"\nbound = sdk + {CYCLES_OF_SLACK} x the raw driver's two-commit cycle, measured between the rounds")
    print(
        "sql = the statements one mcp-elicit call ran on SQLite, replayed raw with fresh ids (its durability's own"
        " cost);\nother = mcp-elicit - sdk - sql: the runtime's own work"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=DESCRIPTION)
    parser.add_argument("--calls", type=int, default=200, help="calls per side per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per side (default %(default)s)")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    logging.getLogger("mcp_elicit").setLevel(logging.WARNING)  # schema migrations of each throwaway store
    outcomes = anyio.run(run, backends, args.pg_url, args.calls, args.rounds)
    print_table(outcomes, args.calls, args.rounds)
    return 0 if all(o.met for o in outcomes if o.backend.targeted) else 1


if __name__ == "__main__":
    raise SystemExit(main())
