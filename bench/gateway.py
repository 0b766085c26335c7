"""The gateway's floor (issue 26): a forwarded `echo` through `mcp-elicit gateway`, against a relay made of the
SDK's own server and client with nothing else (`bench._floor_relay`), in the same run.

Both relays are processes on stdio, started by this client (the SDK's `Client`) the way a host starts a server,
and each starts a copy of the same upstream on stdio (`bench._gateway_upstream`, an SDK `MCPServer` with `echo`).
Two era pairs, both relays set alike: a 2025-11-25 client in front of a handshake upstream session, and a
2026-07-28 client in front of a 2026-07-28 upstream session. After a warm-up, the sides take turns block by
block (`--calls` calls each, `--pairs` pairs, the floor first in the first pair and the order alternating
after), so that drift on a shared machine hits both. Each call's message is new and its echo is checked.

Reported: p50 and p90 of each side's pooled call latencies, and each relay process's CPU per call (its utime +
stime, read from /proc around each block). The target: the gateway's p50 at most 1.1 x the floor's, on each
era. The gateway is given a SQLite store of its own; every table of it must hold the same rows after the
calls as before them (those the store writes when it is created): a relayed call writes nothing. The relays'
stderr goes to a log file, named if the run fails.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import shlex
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO, TypeVar

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent

from bench._common import verdict

DESCRIPTION = "A forwarded echo through mcp-elicit gateway against a relay of the SDK's own server and client."
ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.1
FLOOR, GATEWAY = "floor", "gateway"
SIDES = (FLOOR, GATEWAY)
MARKERS = {FLOOR: "bench._floor_relay", GATEWAY: "mcp_elicit gateway"}
"""What each relay's command line holds, to find its process among this one's children."""
UPSTREAM = f"{shlex.quote(sys.executable)} -m bench._gateway_upstream"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Pair:
    era: str
    client_mode: str
    upstream_era: str


PAIRS = (Pair("2025-11-25", "legacy", "legacy"), Pair("2026-07-28", "2026-07-28", "2026-07-28"))


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest rank: a latency some call really had."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(len(ordered) * fraction)) - 1]


@dataclass(slots=True)
class Outcome:
    pair: Pair
    written: list[str] = field(default_factory=list)
    """The tables of the gateway's store whose rows changed while the calls ran."""
    latencies: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    blocks: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})

    def p50(self, side: str) -> float:
        return statistics.median(self.latencies[side])

    def p90(self, side: str) -> float:
        return percentile(self.latencies[side], 0.9)

    def cpu_per_call(self, side: str) -> float:
        return statistics.median(self.cpu[side])

    @property
    def ratio(self) -> float:
        return self.p50(GATEWAY) / self.p50(FLOOR)

    @property
    def met(self) -> bool:
        return self.ratio <= TARGET and not self.written


def parameters(side: str, pair: Pair, store_url: str) -> StdioServerParameters:
    env = dict(os.environ)
    if side == FLOOR:
        args = ["-m", "bench._floor_relay", "--mode", pair.upstream_era]
    else:
        args = ["-m", "mcp_elicit", "gateway", "--upstream", UPSTREAM, "--era", pair.upstream_era]
        args += ["--store", store_url]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=ROOT)


def child(marker: str) -> int:
    """The pid of this process's child whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and marker in command:
            found.append(int(entry.name))
    if len(found) != 1:
        raise RuntimeError(f"expected one child process running {marker!r}, found {found}")
    return found[0]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Caller:
    """Calls `echo` with a message never sent before, and checks it comes back."""

    def __init__(self) -> None:
        self.sent = 0

    async def block(self, client: Client, pid: int, calls: int) -> tuple[list[float], float]:
        gc.collect()
        latencies = []
        before = cpu_seconds(pid)
        for _ in range(calls):
            self.sent += 1
            message = f"message {self.sent}"
            started = time.perf_counter()
            result = await client.call_tool("echo", {"message": message})
            latencies.append(time.perf_counter() - started)
            if text_of(result) != message:
                raise RuntimeError(f"echo answered {text_of(result)!r}, not {message!r}")
        return latencies, (cpu_seconds(pid) - before) / calls


def text_of(result: CallToolResult) -> str:
    if result.is_error or not result.content or not isinstance(result.content[0], TextContent):
        return f"<error or no text: {result.content!r}>"
    return result.content[0].text


@asynccontextmanager
async def relays(pair: Pair, store: Path, log: TextIO) -> AsyncIterator[dict[str, tuple[Client, int]]]:
    """Both relays started and connected, the floor first, each with its process id."""
    async with AsyncExitStack() as stack:
        started: dict[str, tuple[Client, int]] = {}
        for side in SIDES:
            transport = stdio_client(parameters(side, pair, f"sqlite://{store}"), errlog=log)
            client = await stack.enter_async_context(Client(transport, mode=pair.client_mode, read_timeout_seconds=60))
            started[side] = (client, child(MARKERS[side]))
        yield started


async def contest(pair: Pair, calls: int, pairs: int, store: Path, log: TextIO, caller: Caller) -> Outcome:
    outcome = Outcome(pair)
    async with relays(pair, store, log) as started:
        for side in SIDES:
            client, pid = started[side]
            await client.list_tools()
            await caller.block(client, pid, max(50, calls // 2))
        before = stored_rows(store)  # now that the gateway is up: a 2026-07-28 client says nothing on connecting
        for number in range(pairs):
            for side in SIDES if number % 2 == 0 else reversed(SIDES):
                client, pid = started[side]
                latencies, cpu = await caller.block(client, pid, calls)
                outcome.latencies[side] += latencies
                outcome.cpu[side].append(cpu)
                outcome.blocks[side].append(statistics.median(latencies))
        after = stored_rows(store)
    outcome.written = [table for table in after if after[table] != before.get(table)]
    return outcome


def stored_rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table of the store (a few, those its creation writes, unless something wrote more)."""
    with closing(sqlite3.connect(path)) as connection:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: sorted(connection.execute(f'SELECT * FROM "{table}"'), key=repr) for table in tables}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def print_report(outcomes: list[Outcome], calls: int, pairs: int) -> None:
    one, five, _ = os.getloadavg()
    print(f"\nforwarded echo over stdio both ways ({pairs} pairs x {calls} calls per side; load {one:.2f}, {five:.2f})")
    print("p50 ms of each block, in the order run:")
    for o in outcomes:
        for side in SIDES:
            print(f"  {o.pair.era:<11} {side:<8} {', '.join(ms(block) for block in o.blocks[side])}")
    header = (
        f"{'era':<12}{'floor p50':>10}{'p90':>8}{'cpu/call':>9}{'gateway p50':>13}{'p90':>8}{'cpu/call':>9}"
        f"{'p50 ratio':>11}{'target':>9}  result"
    )
    print("\nlatency and relay CPU per call, ms (CPU: the relay process's own, median of its blocks)")
    print(header)
    print("-" * len(header))
    for o in outcomes:
        print(
            f"{o.pair.era:<12}{ms(o.p50(FLOOR)):>10}{ms(o.p90(FLOOR)):>8}{ms(o.cpu_per_call(FLOOR)):>9}"
            f"{ms(o.p50(GATEWAY)):>13}{ms(o.p90(GATEWAY)):>8}{ms(o.cpu_per_call(GATEWAY)):>9}"
            f"{o.ratio:>11.3f}{'<= ' + format(TARGET, '.2f'):>9}  {verdict(o.met)}"
        )
    print()
    for o in outcomes:
        print(
            f"gateway forwarded echo p50 <= {TARGET:.2f} x the floor relay's on {o.pair.era}: {verdict(o.met)} "
            f"({o.ratio:.3f} x, {ms(o.p50(GATEWAY))} vs {ms(o.p50(FLOOR))} ms)"
        )
    for o in outcomes:
        changed = f"changed: {', '.join(o.written)}" if o.written else "no row of any table changed"
        print(f"gateway writes nothing to its store on {o.pair.era}: {verdict(not o.written)} ({changed})")


class Contested(Protocol):
    @property
    def met(self) -> bool: ...


Result = TypeVar("Result", bound=Contested)


def run_eras(
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    calls: int,
    pairs: int,
    contest: Callable[[Pair, int, int, Path, TextIO], Awaitable[Result]],
    report: Callable[[list[Result], int, int], None],
) -> int:
    """The command line both gateway benchmarks share: each era pair's contest in a directory of their own (the
    processes' stderr in a log there, named if the run fails), then the report; exit 1 if a target was missed."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--calls", type=int, default=calls, help="calls per side per block (default %(default)s)")
    parser.add_argument("--pairs", type=int, default=pairs, help="blocks per side, taking turns (default %(default)s)")
    parser.add_argument("--era", choices=[*(pair.era for pair in PAIRS), "both"], default="both")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.pairs < 1:
        parser.error("--calls and --pairs must be at least 1")
    outcomes = []
    directory = Path(tempfile.mkdtemp(prefix="mcp-elicit-bench-gateway-"))
    log_path = directory / "processes.log"
    try:
        with log_path.open("w") as log:
            for pair in PAIRS:
                if args.era in ("both", pair.era):
                    print(f"running {pair.era} ...", flush=True)
                    outcomes.append(anyio.run(contest, pair, args.calls, args.pairs, directory, log))
    except Exception:
        print(f"the processes' stderr: {log_path}", file=sys.stderr)
        raise
    report(outcomes, args.calls, args.pairs)
    shutil.rmtree(directory)
    return 0 if all(o.met for o in outcomes) else 1


def main(argv: Sequence[str] | None = None) -> int:
    caller = Caller()

    async def contested(pair: Pair, calls: int, pairs: int, directory: Path, log: TextIO) -> Outcome:
        return await contest(pair, calls, pairs, directory / "gateway.db", log, caller)

    return run_eras(
        argv, prog="python -m bench.gateway", description=DESCRIPTION, calls=200, pairs=6, contest=contested,
        report=print_report,
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
