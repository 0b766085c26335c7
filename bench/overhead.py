"""One client's tool calls over streamable HTTP on loopback: mcp-elicit against the bare SDK, on each era.

The bare SDK is the floor each era offers a tool author: `ctx.elicit` on the live call for 2025-11-25,
a hand-written `InputRequiredResult` round for 2026-07-28. The mcp-elicit tool runs the same body with
the same model and gets the same answer, but makes it durable: operation, journaled steps, decision,
answer and result all land in the store. mcp-elicit/bare at p50 is what that durability costs the person
waiting. The counted call is `step-ask-step` (see `bench._overhead_server`); the target (issue 21) is at
most 1.25 x the bare SDK's p50 on each era, on SQLite. `ask-only`, one form and nothing else, is shown too.

Both contenders are tools of one server process (see `bench._overhead_server`), reached through one
client connection per era, and take turns block by block, first one then the other, so drift and table
growth hit them alike. Every call is a whole `call_tool` as the user experiences it, including the
2026-07-28 retry round, and every mcp-elicit call starts a new operation: the argument `n` never repeats
within a server's life, so neither a replay of a recorded result nor an attach to an open operation can
make it look cheap; the store is counted afterwards to prove it.

Latency is what the target is about, but on a shared machine other processes stretch it, so the server's
CPU time per call is reported beside it: it moves much less with outside load and tells server work
from waiting.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import pstats
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psycopg
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, TextContent

from bench._common import DEFAULT_PG_URL, PG_ENV_VAR, pg_schema, select_backends, verdict
from bench._overhead_server import ANSWER, BODIES, CONTROL_TOOL, COUNTED, Body

TARGET = 1.25
TARGET_BACKEND = "sqlite"
DESCRIPTION = "One client's tool calls over loopback streamable HTTP, mcp-elicit against the bare SDK."
ROOT = Path(__file__).resolve().parent.parent
SDK, ELICIT = "sdk", "mcp-elicit"
SIDES = (SDK, ELICIT)
SERVER_START_TIMEOUT = 30.0
IDLE_POLL = "<method 'poll' of 'select.epoll' objects>"


@dataclass(frozen=True, slots=True)
class Era:
    name: str
    client_mode: str

    def tool(self, body: Body, side: str) -> str:
        if side == ELICIT:
            return body.elicit_tool
        return body.sdk_legacy_tool if self.client_mode == "legacy" else body.sdk_rounds_tool


ERAS = (Era("2025-11-25", "legacy"), Era("2026-07-28", "2026-07-28"))


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: a latency some call really had, never an interpolation between two."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(len(ordered) * fraction)) - 1]


@dataclass(frozen=True, slots=True)
class Block:
    """One side's consecutive calls: each call's latency, and the server CPU the block used per call."""

    latencies: list[float]
    server_cpu: float


@dataclass(slots=True)
class Outcome:
    backend: str
    era: str
    body: Body
    blocks: dict[str, list[Block]] = field(default_factory=lambda: {side: [] for side in SIDES})

    def pooled(self, side: str) -> list[float]:
        return [sample for block in self.blocks[side] for sample in block.latencies]

    def p50(self, side: str) -> float:
        return statistics.median(self.pooled(side))

    def p99(self, side: str) -> float:
        return percentile(self.pooled(side), 0.99)

    def cpu(self, side: str) -> float:
        return statistics.median(block.server_cpu for block in self.blocks[side])

    @property
    def ratio(self) -> float:
        return self.p50(ELICIT) / self.p50(SDK)

    @property
    def targeted(self) -> bool:
        return self.backend == TARGET_BACKEND and self.body is COUNTED


async def accept(
    context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
) -> ElicitResult:
    """The person, answering at once (the bench's answer to whichever fields the form has), so that only
    machinery is timed."""
    if not isinstance(params, ElicitRequestFormParams):
        raise RuntimeError(f"a form was expected, not {params!r}")
    fields = params.requested_schema.get("properties", {})
    return ElicitResult(action="accept", content={name: value for name, value in ANSWER.items() if name in fields})


@dataclass(slots=True)
class Tally:
    """Numbers the calls of one server's whole life: a repeated `n`, even across eras, would be a replay."""

    last_n: int = 0
    calls: dict[str, int] = field(default_factory=dict)

    def next(self, tool: str) -> int:
        self.last_n += 1
        self.calls[tool] = self.calls.get(tool, 0) + 1
        return self.last_n


class Caller:
    """Calls one tool per `call`, each time with a fresh `n`, and checks the answer came through."""

    def __init__(self, client: Client, tally: Tally) -> None:
        self._client = client
        self._tally = tally

    async def call(self, body: Body, tool: str) -> float:
        n = self._tally.next(tool)
        started = time.perf_counter()
        result = await self._client.call_tool(tool, {"n": n})
        elapsed = time.perf_counter() - started
        expected = body.expected(n)
        if text_of(result) != expected:
            raise RuntimeError(f"{tool} returned {text_of(result)!r}, expected {expected!r}")
        return elapsed

    async def control(self, action: str, path: str = "") -> str:
        return text_of(await self._client.call_tool(CONTROL_TOOL, {"action": action, "path": path}))

    async def block(self, body: Body, tool: str, calls: int) -> Block:
        gc.collect()
        before = float(await self.control("cpu"))
        latencies = [await self.call(body, tool) for _ in range(calls)]
        after = float(await self.control("cpu"))
        return Block(latencies, (after - before) / calls)


def text_of(result: CallToolResult) -> str:
    if result.is_error or not result.content or not isinstance(result.content[0], TextContent):
        return f"<error or no text: {result.content!r}>"
    return result.content[0].text


@asynccontextmanager
async def connected(url: str, era: Era) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=era.client_mode, elicitation_callback=accept) as c,
    ):
        yield c


@dataclass(frozen=True, slots=True)
class Placement:
    """A CPU each for client and server, or None to leave them to the scheduler.

    On a shared CPU every call pays for the context switches between the two, and the scheduler moves
    them together and apart mid-run, so block medians jump by a third; one CPU each keeps them steady.
    """

    client: int | None = None
    server: int | None = None

    @classmethod
    def choose(cls, pin: bool) -> Placement:
        if not pin or not hasattr(os, "sched_getaffinity"):
            return cls()
        cpus = sorted(os.sched_getaffinity(0))
        return cls(cpus[0], cpus[1]) if len(cpus) >= 2 else cls()

    def describe(self) -> str:
        if self.client is None:
            return "client and server placed by the scheduler"
        return f"client pinned to CPU {self.client}, server to CPU {self.server}"


@dataclass(frozen=True, slots=True)
class Settings:
    calls: int
    rounds: int
    placement: Placement
    profile_dir: Path | None
    bodies: tuple[Body, ...] = BODIES

    @property
    def warmup_calls(self) -> int:
        return max(50, self.calls // 4)


async def contest(url: str, backend: str, era: Era, body: Body, tally: Tally, settings: Settings) -> Outcome:
    """Warm both sides up on one connection, then alternate which goes first in each round."""
    result = Outcome(backend, era.name, body)
    async with connected(url, era) as client:
        caller = Caller(client, tally)
        await client.list_tools()
        for side in SIDES:
            await caller.block(body, era.tool(body, side), settings.warmup_calls)
        for number in range(settings.rounds):
            for side in SIDES if number % 2 == 0 else reversed(SIDES):
                result.blocks[side].append(await caller.block(body, era.tool(body, side), settings.calls))
        if settings.profile_dir is not None:
            for side in SIDES:
                await caller.control("profile")
                await caller.block(body, era.tool(body, side), settings.calls)
                path = profile_path(settings.profile_dir, backend, era.name, body, side)
                await caller.control("dump", str(path))
    return result


def profile_path(directory: Path, backend: str, era: str, body: Body, side: str) -> Path:
    return directory / f"{backend}-{era}-{body.name}-{side}.prof"


@contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def server_process(module: Sequence[str], log_path: Path, cpu: int | None) -> Iterator[str]:
    """A bench server (`python -m MODULE...`, given a free `--port`) in its own interpreter, up and listening;
    stopped however the run ends."""
    port = free_port()
    command = [sys.executable, "-m", *module, "--port", str(port)]
    if cpu is not None:
        command += ["--cpu", str(cpu)]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_listening(process, port, log_path)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_listening(process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the bench server exited with {process.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            time.sleep(0.05)
            continue
        return
    raise RuntimeError(f"the bench server did not listen on port {port} within {SERVER_START_TIMEOUT:.0f}s")


def run_backend(backend: str, store_url: str, workdir: Path, settings: Settings) -> list[Outcome]:
    outcomes: list[Outcome] = []
    tally = Tally()
    module = ("bench._overhead_server", "--store", store_url)
    with server_process(module, workdir / f"server-{backend}.log", settings.placement.server) as url:
        for era in ERAS:
            for body in settings.bodies:
                print(f"running {backend} {era.name} {body.name} ...", flush=True)
                outcomes.append(anyio.run(contest, url, backend, era, body, tally, settings))
    elicit_calls = {body.elicit_tool: tally.calls.get(body.elicit_tool, 0) for body in settings.bodies}
    check_operations(count_query(backend, store_url), elicit_calls)
    return outcomes


def count_query(backend: str, store_url: str) -> Callable[[str], int]:
    def count(sql: str) -> int:
        if backend == "sqlite":
            with closing(sqlite3.connect(store_url.removeprefix("sqlite://"))) as connection:
                return int(connection.execute(sql).fetchone()[0])
        with psycopg.connect(store_url) as connection:
            row = connection.execute(sql).fetchone()
            return int(row[0]) if row else -1

    return count


def check_operations(count: Callable[[str], int], calls: Mapping[str, int]) -> None:
    """Every mcp-elicit call (`calls`: how many of each tool) made its own operation and decision, and finished
    both: no replays, no attaches."""
    for tool, expected in calls.items():
        operations = count(f"SELECT count(*) FROM elicit_operations WHERE target = '{tool}' AND status = 'completed'")
        if operations != expected:
            raise RuntimeError(f"{expected} {tool} calls should have completed as many operations, not {operations}")
    accepted = count("SELECT count(*) FROM elicit_decisions WHERE status = 'accepted'")
    if accepted != sum(calls.values()):
        raise RuntimeError(f"{sum(calls.values())} mcp-elicit calls made {accepted} accepted decisions, not one each")


def run_sqlite(settings: Settings) -> list[Outcome]:
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-overhead-") as directory:
        workdir = Path(directory)
        return run_backend("sqlite", f"sqlite://{workdir / 'elicit.db'}", workdir, settings)


def run_postgres(pg_url: str, settings: Settings) -> list[Outcome]:
    with (
        tempfile.TemporaryDirectory(prefix="mcp-elicit-overhead-") as directory,
        pg_schema(pg_url, "bench_overhead") as schema_url,
    ):
        return run_backend("postgres", schema_url, Path(directory), settings)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def print_table(outcomes: list[Outcome], settings: Settings) -> None:
    calls, rounds = settings.calls, settings.rounds
    print(f"\none client's tools/call, form accepted at once: p50 ms of each round ({rounds} rounds x {calls} calls)")
    for o in outcomes:
        for side in SIDES:
            shown = ", ".join(ms(statistics.median(block.latencies)) for block in o.blocks[side])
            print(f"  {o.backend:<8} {o.era:<10}  {o.body.name:<13}  {side:<10}  {shown}")
    header = (
        f"{'backend':<10}{'era':<12}{'body':<15}{'sdk p50':>9}{'sdk p99':>9}{'elicit p50':>12}{'elicit p99':>12}"
        f"{'p50 +ms':>9}{'p50 ratio':>11}{'target':>9}  result"
    )
    print(f"\nlatency, ms, pooled over {rounds * calls} calls per side (the whole call_tool, retry round included)")
    print(header)
    print("-" * len(header))
    for o in outcomes:
        target, result = (f"<= {TARGET:.2f}", verdict(o.ratio <= TARGET)) if o.targeted else ("-", "info")
        print(
            f"{o.backend:<10}{o.era:<12}{o.body.name:<15}{ms(o.p50(SDK)):>9}{ms(o.p99(SDK)):>9}"
            f"{ms(o.p50(ELICIT)):>12}{ms(o.p99(ELICIT)):>12}{ms(o.p50(ELICIT) - o.p50(SDK)):>9}{o.ratio:>11.2f}"
            f"{target:>9}  {result}"
        )
    header = f"{'backend':<10}{'era':<12}{'body':<15}{'sdk':>9}{'mcp-elicit':>12}{'+ms':>9}{'ratio':>8}"
    print("\nserver CPU per call, ms (process time, median over rounds; moves little with outside load)")
    print(header)
    print("-" * len(header))
    for o in outcomes:
        sdk, elicit = o.cpu(SDK), o.cpu(ELICIT)
        print(
            f"{o.backend:<10}{o.era:<12}{o.body.name:<15}{ms(sdk):>9}{ms(elicit):>12}{ms(elicit - sdk):>9}"
            f"{elicit / sdk:>8.2f}"
        )
    print()
    for o in outcomes:
        if o.targeted:
            print(
                f"HTTP one client, {o.body.name} p50 <= {TARGET:.2f} x the bare SDK's on {o.era} ({o.backend}): "
                f"{verdict(o.ratio <= TARGET)} ({o.ratio:.2f} x)"
            )


def print_profiles(outcomes: list[Outcome], settings: Settings, top: int) -> None:
    """Busy time per call on each side, then the mcp-elicit functions that hold the most of it."""
    assert settings.profile_dir is not None
    calls = settings.calls
    print(f"\nserver profile, us per call (cProfile of the event-loop thread over {calls} calls per side;")
    print("busy = profiled time minus waiting in epoll; cProfile inflates Python-heavy code, so compare, don't add)")
    for o in outcomes:
        paths = {side: profile_path(settings.profile_dir, o.backend, o.era, o.body, side) for side in SIDES}
        stats = {side: pstats.Stats(str(path)) for side, path in paths.items()}
        busy = {side: busy_time(stats[side]) / calls * 1e6 for side in SIDES}
        print(
            f"  {o.backend:<8} {o.era:<10} {o.body.name:<13}  busy: sdk {busy[SDK]:,.0f}"
            f"  mcp-elicit {busy[ELICIT]:,.0f}  ({busy[ELICIT] - busy[SDK]:+,.0f})"
        )
        for name, cumulative in hot_spots(stats[ELICIT], top):
            print(f"    {cumulative / calls * 1e6:>8,.0f}  {name}")
    print(f"  files: {settings.profile_dir}/*.prof (python -m pstats FILE)")


def stats_table(stats: pstats.Stats) -> dict[tuple[str, int, str], tuple[int, int, float, float, Any]]:
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    return table


def busy_time(stats: pstats.Stats) -> float:
    idle = sum(entry[2] for (_, _, function), entry in stats_table(stats).items() if function == IDLE_POLL)
    total: float = stats.total_tt  # type: ignore[attr-defined]
    return total - idle


def hot_spots(stats: pstats.Stats, top: int) -> list[tuple[str, float]]:
    """mcp_elicit functions by cumulative time (a coroutine's time counts only while it runs, not awaits)."""
    entries = [
        (f"{filename.split('mcp_elicit/', 1)[-1]}:{line} {function}", entry[3])
        for (filename, line, function), entry in stats_table(stats).items()
        if "mcp_elicit" in filename
    ]
    entries.sort(key=lambda entry: entry[1], reverse=True)
    return entries[:top]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=DESCRIPTION)
    parser.add_argument("--calls", type=int, default=200, help="calls per side per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per side (default %(default)s)")
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres", "both"),
        default="sqlite",
        help=f"store of the mcp-elicit side; the {TARGET:.2f}x target is on sqlite (default %(default)s)",
    )
    parser.add_argument(
        "--body",
        choices=(*(body.name for body in BODIES), "both"),
        default="both",
        help=f"tool body to time; the target is on {COUNTED.name} (default %(default)s)",
    )
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(PG_ENV_VAR, DEFAULT_PG_URL),
        help=f"PostgreSQL server to create a throwaway schema in (env {PG_ENV_VAR}; default %(default)s)",
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="leave client and server to the scheduler instead of giving each a CPU of its own",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after the timed rounds, profile --calls more calls per side in the server and write DIR/*.prof",
    )
    parser.add_argument("--top", type=int, default=15, help="hot spots to print per profile (default %(default)s)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    backends = select_backends(args.store, args.pg_url)
    if backends is None:
        return 2
    profile_dir: Path | None = args.profile.resolve() if args.profile is not None else None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    bodies = tuple(body for body in BODIES if args.body in ("both", body.name))
    settings = Settings(args.calls, args.rounds, Placement.choose(args.pin), profile_dir, bodies)
    print(f"{settings.placement.describe()}; before: {load()}")
    outcomes: list[Outcome] = []
    with pinned(settings.placement.client):
        for backend in backends:
            if backend == "sqlite":
                outcomes.extend(run_sqlite(settings))
            else:
                outcomes.extend(run_postgres(args.pg_url, settings))
    print(f"after: {load()}")
    print_table(outcomes, settings)
    if profile_dir is not None:
        print_profiles(outcomes, settings, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
