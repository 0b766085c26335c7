"""Tool calls in process: mcp-elicit against the bare SDK, with the raw driver's floor, in wall time and CPU.

Client and server share one event loop over the SDK's in-memory transport, so what is left is the tool and
what wraps it: the durable records and their commits. The counted call is `step-ask-step` (see
`bench._overhead_server`; `ask-only` is shown too). Each store's floor is measured in the same run: the raw
driver's cycle of two commits (a decision inserted with its audit row, then accepted with another), the
very statements `bench.store` times. The targets (issue 21), on each era: a call costs at most the bare
SDK's call plus 0.7 ms on SQLite at its default `synchronous=normal`, plus three such cycles on SQLite with
`synchronous=full` and on PostgreSQL; and the runtime's own CPU, this process's CPU time
(`time.process_time`) per call minus the bare SDK's in the same run, is at most 0.3 ms on 2025-11-25 and
0.5 ms on 2026-07-28. Sides alternate round by round, so drift hits both.
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
from bench._overhead_server import BODIES, COUNTED, Body, build
from bench.overhead import ELICIT, ERAS, SDK, SIDES, Era, accept, text_of
from bench.store import RawPostgres, RawSQLite, Side, decisions
from mcp_elicit.server import Elicitation
from mcp_elicit.store import open_store, utc_now
from mcp_elicit.store.sqlite import SQLiteStore, Synchronous

CYCLES_OF_SLACK = 3
NORMAL_SLACK_MS = 0.7
CPU_TARGET_MS = {"2025-11-25": 0.3, "2026-07-28": 0.5}
DESCRIPTION = "Tool calls in process: mcp-elicit against the bare SDK and the raw driver, in wall time and CPU."


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    label: str
    sqlite: Synchronous | None = None
    """The `synchronous` setting of a SQLite backend, whose SQL floor is measured too."""
    slack_ms: float | None = None
    """The bound's fixed allowance above the bare SDK's call; None: `CYCLES_OF_SLACK` raw two-commit cycles."""

    @property
    def bound(self) -> str:
        if self.slack_ms is not None:
            return f"bare + {self.slack_ms:g} ms"
        return f"bare + {CYCLES_OF_SLACK} raw two-commit {self.label} cycles"


@dataclass(slots=True)
class Outcome:
    backend: Backend
    era: str
    body: Body
    seconds: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    cpu_seconds: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    cycle_seconds: list[float] = field(default_factory=list)
    floor_seconds: list[float] = field(default_factory=list)

    @property
    def targeted(self) -> bool:
        return self.body is COUNTED

    def median_ms(self, side: str) -> float:
        return statistics.median(self.seconds[side]) * 1000

    def cpu_ms(self, side: str) -> float:
        return statistics.median(self.cpu_seconds[side]) * 1000

    @property
    def runtime_cpu_ms(self) -> float:
        """The runtime's own CPU per call: what the process spent above the bare SDK's call."""
        return self.cpu_ms(ELICIT) - self.cpu_ms(SDK)

    @property
    def cpu_target_ms(self) -> float:
        return CPU_TARGET_MS[self.era]

    @property
    def cpu_met(self) -> bool:
        return self.runtime_cpu_ms <= self.cpu_target_ms

    @property
    def floor_ms(self) -> float | None:
        return statistics.median(self.floor_seconds) * 1000 if self.floor_seconds else None

    @property
    def cycle_ms(self) -> float:
        return statistics.median(self.cycle_seconds) * 1000

    @property
    def slack_ms(self) -> float:
        slack = self.backend.slack_ms
        return slack if slack is not None else CYCLES_OF_SLACK * self.cycle_ms

    @property
    def bound_ms(self) -> float:
        return self.median_ms(SDK) + self.slack_ms

    @property
    def met(self) -> bool:
        return self.median_ms(ELICIT) <= self.bound_ms


class Calls:
    """Numbers calls across the whole run: a repeated argument would be a replay, not a new call."""

    def __init__(self) -> None:
        self._last = 0

    async def block(self, client: Client, body: Body, tool: str, calls: int) -> tuple[float, float]:
        """Wall and CPU seconds per call over `calls` consecutive calls of `tool`, each checked for the answer."""
        gc.collect()
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            self._last += 1
            result = await client.call_tool(tool, {"n": self._last})
            if text_of(result) != body.expected(self._last):
                raise RuntimeError(f"{tool} returned {text_of(result)!r}")
        return (time.perf_counter() - started) / calls, (time.process_time() - cpu) / calls


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
        connection = cast(SQLiteStore, elicitation.store).connection()
        connection.set_trace_callback(statements.append)
        try:
            await tally.block(client, COUNTED, era.tool(COUNTED, ELICIT), 1)
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
    backend: Backend,
    store_url: str,
    raw: Side,
    era: Era,
    bodies: Sequence[Body],
    calls: int,
    rounds: int,
    tally: Calls,
) -> list[Outcome]:
    """Each round: every body on both sides (which goes first alternates), then the raw cycles and the floor."""
    outcomes = [Outcome(backend, era.name, body) for body in bodies]
    cycles: list[float] = []
    async with connected(store_url, era) as (client, elicitation):
        for body in bodies:
            for side in SIDES:
                await tally.block(client, body, era.tool(body, side), max(20, calls // 4))
        cycle_seconds(raw, max(20, calls // 4))
        floor = None
        if backend.sqlite is not None and COUNTED in bodies:
            floor = await SqlFloor.captured(client, elicitation, era, tally)
        for number in range(rounds):
            for result in outcomes:
                for side in SIDES if number % 2 == 0 else reversed(SIDES):
                    wall, cpu = await tally.block(client, result.body, era.tool(result.body, side), calls)
                    result.seconds[side].append(wall)
                    result.cpu_seconds[side].append(cpu)
            cycles.append(cycle_seconds(raw, calls))
            if floor is not None and backend.sqlite is not None:
                path = cast(SQLiteStore, elicitation.store).path
                counted = next(result for result in outcomes if result.targeted)
                counted.floor_seconds.append(floor.seconds(path, backend.sqlite, calls))
    for result in outcomes:
        result.cycle_seconds = cycles
    return outcomes


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


async def run(backends: Sequence[str], pg_url: str, bodies: Sequence[Body], calls: int, rounds: int) -> list[Outcome]:
    outcomes: list[Outcome] = []
    tally = Calls()
    plans: list[tuple[Backend, Callable[[], AbstractContextManager[tuple[str, Side]]]]] = []
    if "sqlite" in backends:
        normal = Backend("sqlite", "SQLite NORMAL", Synchronous.NORMAL, slack_ms=NORMAL_SLACK_MS)
        plans.append((normal, lambda: sqlite_side(Synchronous.NORMAL)))
        plans.append((Backend("sqlite-full", "SQLite FULL", Synchronous.FULL), lambda: sqlite_side(Synchronous.FULL)))
    if "postgres" in backends:
        plans.append((Backend("postgres", "PostgreSQL"), lambda: postgres_side(pg_url)))
    for backend, side in plans:
        for era in ERAS:
            print(f"running {backend.name} {era.name} ...", flush=True)
            with side() as (url, raw):
                outcomes.extend(await contest(backend, url, raw, era, bodies, calls, rounds, tally))
    return outcomes


def print_table(outcomes: list[Outcome], calls: int, rounds: int) -> None:
    print(f"\none tools/call, form accepted at once, in process: median ms of {rounds} rounds x {calls} calls")
    header = (
        f"{'backend':<12}{'era':<12}{'body':<15}{'sdk':>7}{'mcp-elicit':>11}{'+ms':>7}{'ratio':>7}{'2-commit':>9}"
        f"{'bound':>7}{'sql':>7}{'other':>7}  result"
    )
    print(header)
    print("-" * len(header))
    for o in outcomes:
        sdk, elicit, floor = o.median_ms(SDK), o.median_ms(ELICIT), o.floor_ms
        sql = "-" if floor is None else f"{floor:.2f}"
        other = "-" if floor is None else f"{elicit - sdk - floor:.2f}"
        print(
            f"{o.backend.name:<12}{o.era:<12}{o.body.name:<15}{sdk:>7.2f}{elicit:>11.2f}{elicit - sdk:>7.2f}"
            f"{elicit / sdk:>7.2f}{o.cycle_ms:>9.2f}{o.bound_ms:>7.2f}{sql:>7}{other:>7}  "
            f"{verdict(o.met) if o.targeted else 'info'}"
        )
    print(
        f"\nbound = sdk + {NORMAL_SLACK_MS:g} ms on sqlite; sdk + {CYCLES_OF_SLACK} x the raw driver's two-commit"
        " cycle (2-commit, measured between the rounds) on sqlite-full and postgres"
    )
    print(
        "sql = the statements one mcp-elicit call ran on SQLite, replayed raw with fresh ids (its durability's own"
        " cost);\nother = mcp-elicit - sdk - sql: the runtime's own work"
    )
    print("\nprocess CPU per call, ms (time.process_time of this process, client included; median over rounds)")
    header = f"{'backend':<12}{'era':<12}{'body':<15}{'sdk':>7}{'mcp-elicit':>11}{'runtime':>9}{'target':>8}  result"
    print(header)
    print("-" * len(header))
    for o in outcomes:
        target, result = (f"<= {o.cpu_target_ms:g}", verdict(o.cpu_met)) if o.targeted else ("-", "info")
        print(
            f"{o.backend.name:<12}{o.era:<12}{o.body.name:<15}{o.cpu_ms(SDK):>7.2f}{o.cpu_ms(ELICIT):>11.2f}"
            f"{o.runtime_cpu_ms:>9.2f}{target:>8}  {result}"
        )
    print("runtime = mcp-elicit - sdk: the runtime's own CPU per call, its store driver's included\n")
    print_summary([o for o in outcomes if o.targeted])


def print_summary(counted: list[Outcome]) -> None:
    """One line per target, each over both eras."""
    for backend in dict.fromkeys(o.backend for o in counted):
        mine = [o for o in counted if o.backend == backend]
        shown = ", ".join(
            f"{o.era} +{o.median_ms(ELICIT) - o.median_ms(SDK):.2f} of +{o.slack_ms:.2f} ms" for o in mine
        )
        print(
            f"in-process {backend.label}, {COUNTED.name} <= {backend.bound}: "
            f"{verdict(all(o.met for o in mine))} ({shown})"
        )
    for era, target in CPU_TARGET_MS.items():
        mine = [o for o in counted if o.era == era]
        if mine:
            shown = ", ".join(f"{o.backend.name} {o.runtime_cpu_ms:.2f}" for o in mine)
            print(
                f"in-process runtime CPU on {era}, {COUNTED.name} <= {target:g} ms a call above the bare SDK's: "
                f"{verdict(all(o.cpu_met for o in mine))} ({shown} ms)"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=DESCRIPTION)
    parser.add_argument("--calls", type=int, default=200, help="calls per side per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per side (default %(default)s)")
    parser.add_argument(
        "--body",
        choices=(*(body.name for body in BODIES), "both"),
        default="both",
        help=f"tool body to time; the targets are on {COUNTED.name} (default %(default)s)",
    )
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    logging.getLogger("mcp_elicit").setLevel(logging.WARNING)  # schema migrations of each throwaway store
    bodies = [body for body in BODIES if args.body in ("both", body.name)]
    outcomes = anyio.run(run, backends, args.pg_url, bodies, args.calls, args.rounds)
    print_table(outcomes, args.calls, args.rounds)
    return 0 if all(o.met and o.cpu_met for o in outcomes if o.targeted) else 1


if __name__ == "__main__":
    raise SystemExit(main())
