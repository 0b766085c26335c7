"""Many clients at once through the balancer: `mcp-elicit serve --transport http` behind HAProxy with TLS.

Each cell runs `--clients` client-kit connections for `--seconds`, every one calling `create_ticket` in a
loop, each call with a title of its own so that it is a new operation with one form question (answered at
once by the scripted person) and one side effect, the ticket. On 2025-11-25 the question rides the call's
stream as `elicitation/create`; on 2026-07-28 it is an `InputRequiredResult` round and a retry with the
sealed `requestState`, each a request of its own that the balancer sends round the instances.

Cells: SQLite with one instance (SQLite serves one host), PostgreSQL with one instance and with two, each
for both eras. Throughput is printed as a ratio against PostgreSQL with one instance in the same run.
Every call must succeed (an error is printed and the run exits 1) and every effect must happen once:
after a cell, the workspace holds exactly one ticket per completed call, each title once.

Everything listens on loopback; the run is bounded by `--seconds` per cell and `--max-calls` per cell.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from mcp_types import CallToolResult, TextContent
from tests.balancer import Cluster, ClusterError, ClusterSpec, haproxy_missing, running_cluster, sign_in

from bench._common import DEFAULT_PG_URL, PG_ENV_VAR, pg_schema, select_backends
from mcp_elicit.client import (
    Accept,
    Cancel,
    ConnectionLost,
    ElicitingClient,
    Era,
    FormReply,
    FormRequest,
    Mode,
    UrlReply,
    UrlRequest,
)

DESCRIPTION = "Concurrent clients through HAProxy (TLS, round-robin) to mcp-elicit serve on SQLite and PostgreSQL."
ERAS: tuple[Era, Era] = ("2025-11-25", "2026-07-28")
BASELINE = ("postgres", 1)
GRACE = 60.0
"""Seconds a cell may take past `--seconds` to finish the calls in flight before the run gives up."""


class Answers:
    """The person: accepts every priority question at once, so that only machinery is timed."""

    @property
    def modes(self) -> frozenset[Mode]:
        return frozenset({"form"})

    async def form(self, request: FormRequest) -> FormReply:
        return Accept({"priority": "high"})

    async def url(self, request: UrlRequest) -> UrlReply:
        return Cancel()


@dataclass(frozen=True, slots=True)
class Settings:
    clients: int
    seconds: float
    max_calls: int
    eras: tuple[Era, ...] = ERAS


@dataclass(slots=True)
class Cell:
    store: str
    instances: int
    era: str
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    effects: str = "?"
    client_cpu: float = 0.0
    requests: dict[str, int] = field(default_factory=dict)
    """Requests HAProxy sent each instance during the cell."""

    @property
    def split(self) -> str:
        total = sum(self.requests.values())
        return "/".join(f"{count / total:.0%}" for _, count in sorted(self.requests.items())) if total else "-"

    @property
    def calls(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    def percentile(self, fraction: float) -> float:
        """Nearest rank: a latency some call really had."""
        ordered = sorted(self.latencies)
        return ordered[max(1, math.ceil(len(ordered) * fraction)) - 1] if ordered else math.nan

    @property
    def ok(self) -> bool:
        return not self.errors and self.effects == "once"


def text_of(result: CallToolResult) -> str:
    if result.is_error or not result.content or not isinstance(result.content[0], TextContent):
        return f"<error or no text: {result.content!r}>"
    return result.content[0].text


async def run_cell(cluster: Cluster, token: str, era: Era, settings: Settings, cell: Cell) -> None:
    """Connect every client first, then call for `settings.seconds`; calls in flight at the end finish."""
    ready = anyio.Event()
    started = anyio.Event()
    connected = 0
    issued = 0
    deadline = math.inf

    def arrived() -> None:
        nonlocal connected
        connected += 1
        if connected == settings.clients:
            ready.set()

    async def client(number: int) -> None:
        nonlocal issued
        headers = {"Authorization": f"Bearer {token}"}
        try:
            async with (
                cluster.http_client(headers=headers) as http,
                ElicitingClient(cluster.mcp_url, Answers(), era=era, http_client=http) as kit,
            ):
                arrived()
                await started.wait()
                n = 0
                while time.perf_counter() < deadline and issued < settings.max_calls:
                    issued += 1
                    n += 1
                    await call(kit, number, n)
        except ConnectionLost as error:
            cell.errors.append(f"client {number}: connection lost, client stopped: {error}")
        except Exception as error:
            cell.errors.append(f"client {number}: {type(error).__name__}: {error}")
            if not ready.is_set():
                arrived()

    async def call(kit: ElicitingClient, number: int, n: int) -> None:
        title = f"{era} c{number} n{n}"
        began = time.perf_counter()
        try:
            result = await kit.call_tool("create_ticket", {"title": title})
        except ConnectionLost:
            raise
        except Exception as error:
            cell.errors.append(f"client {number} call {n}: {type(error).__name__}: {error}")
            return
        elapsed = time.perf_counter() - began
        shown = text_of(result)
        if shown.startswith("Created ticket ") and shown.endswith(f"(high): {title}"):
            cell.latencies.append(elapsed)
        else:
            cell.errors.append(f"client {number} call {n}: {shown}")

    with anyio.fail_after(settings.seconds + 2 * GRACE):
        async with anyio.create_task_group() as group:
            for number in range(settings.clients):
                group.start_soon(client, number)
            with anyio.fail_after(GRACE):
                await ready.wait()
            cpu_before = _cpu()
            began = time.perf_counter()
            deadline = began + settings.seconds
            started.set()
    cell.seconds = time.perf_counter() - began
    cell.client_cpu = (_cpu() - cpu_before) / cell.seconds


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def count_effects(cluster: Cluster, era: str, cell: Cell) -> None:
    """One ticket per completed call of this era, each title once: no call lost its effect, none made two."""
    titles = [json.loads(path.read_text())["title"] for path in (cluster.workspace / "tickets").glob("*.json")]
    mine = [title for title in titles if title.startswith(f"{era} ")]
    if len(mine) == cell.calls and len(set(mine)) == len(mine):
        cell.effects = "once"
    else:
        cell.effects = f"{len(mine)} tickets ({len(set(mine))} titles) for {cell.calls} calls"


def requests_per_instance(cluster: Cluster) -> dict[str, int]:
    return {name: int(row["req_tot"]) for name, row in cluster.servers().items()}


@contextmanager
def store_of(store: str, pg_url: str, run_dir: Path) -> Iterator[str]:
    if store == "sqlite":
        yield f"sqlite://{run_dir / 'elicit.db'}"
    else:
        with pg_schema(pg_url, "bench_load") as url:
            yield url


def run_config(store: str, instances: int, pg_url: str, settings: Settings) -> list[Cell]:
    """One cluster, both eras on it; its logs are kept (and named) when a cell failed."""
    cells: list[Cell] = []
    run_dir = Path(tempfile.mkdtemp(prefix="mcp-elicit-load-"))
    try:
        with (
            store_of(store, pg_url, run_dir) as store_url,
            running_cluster(ClusterSpec(store_url, instances=instances, provider=False), run_dir / "cluster") as c,
        ):
            token = anyio.run(sign_in, c)
            for era in settings.eras:
                print(f"running {store} x{instances} {era} ...", flush=True)
                cell = Cell(store, instances, era)
                before = requests_per_instance(c)
                anyio.run(run_cell, c, token, era, settings, cell)
                cell.requests = {name: count - before[name] for name, count in requests_per_instance(c).items()}
                count_effects(c, era, cell)
                cells.append(cell)
    finally:
        if cells and all(cell.ok for cell in cells):
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            print(f"logs of {store} x{instances} kept in {run_dir}", flush=True)
    return cells


def print_table(cells: Sequence[Cell], settings: Settings) -> None:
    base = {cell.era: cell.rate for cell in cells if (cell.store, cell.instances) == BASELINE}
    print(
        f"\n{settings.clients} clients per cell, each calling create_ticket (one form question, one ticket) "
        f"for {settings.seconds:g} s, through HAProxy with TLS"
    )
    header = (
        f"{'store':<9}{'inst':>4}  {'era':<11}{'calls':>7}{'calls/s':>9}{'vs pg x1':>9}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}  {'effects':<8}{'client CPU':>11}  {'requests per instance'}"
    )
    print(header)
    print("-" * len(header))
    for cell in cells:
        ratio = f"{cell.rate / base[cell.era]:.2f}" if base.get(cell.era) else "-"
        print(
            f"{cell.store:<9}{cell.instances:>4}  {cell.era:<11}{cell.calls:>7}{cell.rate:>9.1f}{ratio:>9}"
            f"{cell.percentile(0.5) * 1000:>9.1f}{cell.percentile(0.99) * 1000:>9.1f}{len(cell.errors):>7}  "
            f"{cell.effects:<8}{cell.client_cpu:>10.0%}   {cell.split}"
        )
    print("client CPU: the load generator's own CPU time per wall second (1 core = 100%); requests per instance:")
    print(f"as HAProxy counted them. Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=DESCRIPTION)
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients per cell (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of calls per cell (default %(default)s)")
    parser.add_argument(
        "--max-calls", type=int, default=20_000, help="calls per cell at most, whatever the time (default %(default)s)"
    )
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--era", choices=(*ERAS, "both"), default="both", help="protocol era (default both)")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(PG_ENV_VAR, DEFAULT_PG_URL),
        help=f"PostgreSQL server to create a throwaway schema in (env {PG_ENV_VAR}; default %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or args.max_calls < 1:
        parser.error("--clients and --max-calls must be at least 1, --seconds positive")
    missing = haproxy_missing()
    if missing is not None:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    stores = select_backends(args.store, args.pg_url)
    if stores is None:
        return 2
    eras = ERAS if args.era == "both" else (args.era,)
    settings = Settings(args.clients, args.seconds, args.max_calls, eras)
    configs = [(store, n) for store in stores for n in ((1,) if store == "sqlite" else (1, 2))]
    cells: list[Cell] = []
    try:
        for store, instances in configs:
            cells.extend(run_config(store, instances, args.pg_url, settings))
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print_table(cells, settings)
    failed = [cell for cell in cells if not cell.ok]
    for cell in failed:
        print(f"FAIL {cell.store} x{cell.instances} {cell.era}: {len(cell.errors)} errors; effects {cell.effects}")
        for problem in cell.errors[:5]:
            print(f"  {problem}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
