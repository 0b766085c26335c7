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

Then the contest against the bare SDK (issue 21): on 2026-07-28, for each store, one instance of
`bench._overhead_server` behind the same balancer, its clients calling the counted call `step-ask-step`,
the bare SDK's twin and the mcp-elicit tool in turns of `--seconds` each. The bare control is noisy, so the
sides alternate (bare first, then mcp-elicit first, ...) for `--pairs` pairs; each pair gives mcp-elicit's
calls/s over the bare SDK's, and the median of those ratios is held to its target: at least 0.7 on SQLite
and 0.5 on PostgreSQL, with no error. The spread (lowest and highest ratio) and the instance's CPU time
per call on each side (asked of its process, `time.process_time`) are printed beside it. After the
contest the store must hold one completed operation per mcp-elicit call.

Everything listens on loopback; the run is bounded by `--seconds` per cell and `--max-calls` per cell.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from mcp_types import CallToolResult, TextContent
from tests.helpers.balancer import Cluster, ClusterError, ClusterSpec, haproxy_missing, running_cluster, sign_in

from bench._common import DEFAULT_PG_URL, PG_ENV_VAR, pg_schema, select_backends, verdict
from bench._overhead_server import CONTROL_TOOL, COUNTED
from bench.overhead import ELICIT, SDK, SIDES, check_operations, count_query
from mcp_elicit.client import (
    Accept,
    Cancel,
    ConnectionLost,
    ElicitingClient,
    Era,
    FormReply,
    FormRequest,
    Http,
    Mode,
    UrlReply,
    UrlRequest,
)

DESCRIPTION = "Concurrent clients through HAProxy (TLS, round-robin) to mcp-elicit serve on SQLite and PostgreSQL."
ERAS: tuple[Era, Era] = ("2025-11-25", "2026-07-28")
BASELINE = ("postgres", 1)
GRACE = 60.0
"""Seconds a cell may take past `--seconds` to finish the calls in flight before the run gives up."""
CONTEST_ERA: Era = "2026-07-28"
CONTEST_TARGET = {"sqlite": 0.7, "postgres": 0.5}
"""The least median ratio of mcp-elicit's calls/s to the bare SDK's, per store."""
MIN_PAIRS = 3
"""The fewest pairs whose median the target may be judged on: fewer are shown, and fail it."""
ANSWER: dict[str, str | bool] = {"priority": "high", "approve": True}


class Answers:
    """The person: accepts every question at once (a ticket's priority, a change's approval), so that only
    machinery is timed."""

    @property
    def modes(self) -> frozenset[Mode]:
        return frozenset({"form"})

    async def form(self, request: FormRequest) -> FormReply:
        fields = request.requested_schema.get("properties", {})
        return Accept({name: value for name, value in ANSWER.items() if name in fields})

    async def url(self, request: UrlRequest) -> UrlReply:
        return Cancel()


@dataclass(frozen=True, slots=True)
class Settings:
    clients: int
    seconds: float
    max_calls: int
    eras: tuple[Era, ...] = ERAS
    pairs: int = 3


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
    server_cpu: float = math.nan
    """The instances' CPU seconds per call during the cell, when they can be asked."""

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


@dataclass(slots=True)
class Contest:
    """Bare SDK and mcp-elicit taking turns on one instance over one store, pair by pair."""

    store: str
    pairs: list[dict[str, Cell]] = field(default_factory=list)
    """Each pair's turns by side, in the order they ran: every client calling that side's tool."""
    operations: str = "?"
    """"once" when the store holds one completed operation per mcp-elicit call, else what it holds."""

    @property
    def ratios(self) -> list[float]:
        return [pair[ELICIT].rate / pair[SDK].rate if pair[SDK].rate else 0.0 for pair in self.pairs]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def errors(self) -> int:
        return sum(len(leg.errors) for pair in self.pairs for leg in pair.values())

    def cpu(self, side: str) -> float:
        return statistics.median(pair[side].server_cpu for pair in self.pairs)

    @property
    def target(self) -> float:
        return CONTEST_TARGET[self.store]

    @property
    def ok(self) -> bool:
        return self.errors == 0 and self.operations == "once"

    @property
    def met(self) -> bool:
        return self.ok and len(self.pairs) >= MIN_PAIRS and self.ratio >= self.target


Call = Callable[[ElicitingClient, int, int], Awaitable[str | None]]
"""One call of client `number` (its `n`th): None when the answer came through, else what came instead."""


def text_of(result: CallToolResult) -> str:
    if result.is_error or not result.content or not isinstance(result.content[0], TextContent):
        return f"<error or no text: {result.content!r}>"
    return result.content[0].text


async def run_cell(
    cluster: Cluster,
    headers: dict[str, str],
    era: Era,
    settings: Settings,
    cell: Cell,
    make_call: Call,
    server_cpu: Callable[[], Awaitable[float]] | None = None,
) -> None:
    """Connect every client first, then call for `settings.seconds`; calls in flight at the end finish.
    `server_cpu`, if given, says how much CPU time the instances have used so far."""
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
        try:
            async with (
                cluster.http_client(headers=headers) as http,
                ElicitingClient(Http(cluster.mcp_url, http_client=http), Answers(), era=era) as kit,
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
        began = time.perf_counter()
        try:
            problem = await make_call(kit, number, n)
        except ConnectionLost:
            raise
        except Exception as error:
            cell.errors.append(f"client {number} call {n}: {type(error).__name__}: {error}")
            return
        if problem is None:
            cell.latencies.append(time.perf_counter() - began)
        else:
            cell.errors.append(f"client {number} call {n}: {problem}")

    with anyio.fail_after(settings.seconds + 2 * GRACE):
        async with anyio.create_task_group() as group:
            for number in range(settings.clients):
                group.start_soon(client, number)
            with anyio.fail_after(GRACE):
                await ready.wait()
            server_before = await server_cpu() if server_cpu is not None else math.nan
            cpu_before = _cpu()
            began = time.perf_counter()
            deadline = began + settings.seconds
            started.set()
    cell.seconds = time.perf_counter() - began
    cell.client_cpu = (_cpu() - cpu_before) / cell.seconds
    if server_cpu is not None and cell.calls:
        cell.server_cpu = (await server_cpu() - server_before) / cell.calls


def ticket_call(era: Era) -> Call:
    async def call(kit: ElicitingClient, number: int, n: int) -> str | None:
        title = f"{era} c{number} n{n}"
        shown = text_of(await kit.call_tool("create_ticket", {"title": title}))
        return None if shown.startswith("Created ticket ") and shown.endswith(f"(high): {title}") else shown

    return call


def counted_call(tool: str, numbers: Iterator[int]) -> Call:
    """The counted call of `tool`, each with an `n` of its own in the server's whole life: a repeated one
    would attach to an operation or replay its result instead of making a new one."""

    async def call(kit: ElicitingClient, number: int, n: int) -> str | None:
        unique = next(numbers)
        shown = text_of(await kit.call_tool(tool, {"n": unique}))
        return None if shown == COUNTED.expected(unique) else shown

    return call


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
            headers = {"Authorization": f"Bearer {anyio.run(sign_in, c)}"}
            for era in settings.eras:
                print(f"running {store} x{instances} {era} ...", flush=True)
                cell = Cell(store, instances, era)
                before = requests_per_instance(c)
                anyio.run(run_cell, c, headers, era, settings, cell, ticket_call(era))
                cell.requests = {name: count - before[name] for name, count in requests_per_instance(c).items()}
                count_effects(c, era, cell)
                cells.append(cell)
    finally:
        if cells and all(cell.ok for cell in cells):
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            print(f"logs of {store} x{instances} kept in {run_dir}", flush=True)
    return cells


def run_contest(store: str, pg_url: str, settings: Settings) -> Contest:
    """One instance of the bench server behind the balancer; bare and mcp-elicit turns, alternating which
    goes first pair by pair. Its logs are kept (and named) when a call failed."""
    contest = Contest(store)
    run_dir = Path(tempfile.mkdtemp(prefix="mcp-elicit-load-"))
    numbers = itertools.count(1)
    try:
        with store_of(store, pg_url, run_dir) as store_url:
            spec = ClusterSpec(store_url, instances=1, provider=False, server=("bench._overhead_server",))
            with running_cluster(spec, run_dir / "cluster") as c:
                for number in range(settings.pairs):
                    pair: dict[str, Cell] = {}
                    for side in SIDES if number % 2 == 0 else reversed(SIDES):
                        print(f"running {store} {CONTEST_ERA} pair {number + 1} {side} ...", flush=True)
                        leg = Cell(store, 1, CONTEST_ERA)
                        tool = COUNTED.elicit_tool if side == ELICIT else COUNTED.sdk_rounds_tool
                        call = counted_call(tool, numbers)
                        anyio.run(run_cell, c, {}, CONTEST_ERA, settings, leg, call, lambda: instances_cpu(c))
                        pair[side] = leg
                    contest.pairs.append(pair)
            try:
                elicit_calls = sum(pair[ELICIT].calls for pair in contest.pairs)
                check_operations(count_query(store, store_url), {COUNTED.elicit_tool: elicit_calls})
                contest.operations = "once"
            except RuntimeError as error:
                contest.operations = str(error)
    finally:
        if contest.pairs and contest.ok:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            print(f"logs of the {store} contest kept in {run_dir}", flush=True)
    return contest


async def instances_cpu(cluster: Cluster) -> float:
    """CPU seconds the instances have used so far, each asked directly (not through the balancer)."""
    total = 0.0
    for url in cluster.instance_urls:
        async with ElicitingClient(Http(f"{url}/mcp"), Answers(), era=CONTEST_ERA) as kit:
            total += float(text_of(await kit.call_tool(CONTROL_TOOL, {"action": "cpu"})))
    return total


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


def print_contests(contests: Sequence[Contest], settings: Settings) -> None:
    print(
        f"\n{settings.clients} clients on {CONTEST_ERA} calling {COUNTED.name}, the bare SDK's twin and the mcp-elicit"
        f" tool taking turns of {settings.seconds:g} s (one instance of bench._overhead_server behind HAProxy, TLS)"
    )
    header = (
        f"{'store':<9}{'pair':>5}  {'side':<11}{'calls':>7}{'calls/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}"
        f"{'server CPU ms/call':>20}{'client CPU':>12}{'ratio':>7}"
    )
    print(header)
    print("-" * len(header))
    for contest in contests:
        for number, (pair, ratio) in enumerate(zip(contest.pairs, contest.ratios, strict=True), start=1):
            for position, (side, leg) in enumerate(pair.items()):
                shown = f"{ratio:.2f}" if position == 1 else ""
                print(
                    f"{contest.store:<9}{number:>5}  {side:<11}{leg.calls:>7}{leg.rate:>9.1f}"
                    f"{leg.percentile(0.5) * 1000:>9.1f}{leg.percentile(0.99) * 1000:>9.1f}{len(leg.errors):>7}"
                    f"{leg.server_cpu * 1000:>20.2f}{leg.client_cpu:>11.0%}{shown:>7}"
                )
    print("ratio: the pair's mcp-elicit calls/s over the bare SDK's; sides alternate which goes first.\n")
    for contest in contests:
        spread = f"{min(contest.ratios):.2f}-{max(contest.ratios):.2f}"
        operations = "" if contest.operations == "once" else f"; operations: {contest.operations}"
        print(
            f"HTTP {settings.clients} clients on {CONTEST_ERA}, {contest.store}: {COUNTED.name} calls/s >= "
            f"{contest.target:g} x the bare SDK's (median of >= {MIN_PAIRS} pairs), zero errors: "
            f"{verdict(contest.met)} (median {contest.ratio:.2f} x of {len(contest.ratios)} pairs, spread {spread}; "
            f"{contest.errors} errors; server CPU per call {contest.cpu(SDK) * 1000:.2f} ms bare, "
            f"{contest.cpu(ELICIT) * 1000:.2f} ms mcp-elicit{operations})"
        )


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
        "--pairs",
        type=int,
        default=3,
        help=f"bare/mcp-elicit pairs of the contest on {CONTEST_ERA}, run when that era is (default %(default)s)",
    )
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(PG_ENV_VAR, DEFAULT_PG_URL),
        help=f"PostgreSQL server to create a throwaway schema in (env {PG_ENV_VAR}; default %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or args.max_calls < 1 or args.pairs < 0:
        parser.error("--clients and --max-calls must be at least 1, --seconds positive, --pairs not negative")
    missing = haproxy_missing()
    if missing is not None:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    stores = select_backends(args.store, args.pg_url)
    if stores is None:
        return 2
    eras = ERAS if args.era == "both" else (args.era,)
    settings = Settings(args.clients, args.seconds, args.max_calls, eras, args.pairs)
    configs = [(store, n) for store in stores for n in ((1,) if store == "sqlite" else (1, 2))]
    cells: list[Cell] = []
    contests: list[Contest] = []
    try:
        for store, instances in configs:
            cells.extend(run_config(store, instances, args.pg_url, settings))
        if CONTEST_ERA in eras and settings.pairs:
            contests = [run_contest(store, args.pg_url, settings) for store in stores]
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print_table(cells, settings)
    if contests:
        print_contests(contests, settings)
    failed = [cell for cell in cells if not cell.ok]
    for cell in failed:
        print(f"FAIL {cell.store} x{cell.instances} {cell.era}: {len(cell.errors)} errors; effects {cell.effects}")
        for problem in cell.errors[:5]:
            print(f"  {problem}")
    for contest in contests:
        for problem in [problem for pair in contest.pairs for leg in pair.values() for problem in leg.errors][:5]:
            print(f"  {contest.store} contest: {problem}")
    return 1 if failed or not all(contest.ok for contest in contests) else 0


if __name__ == "__main__":
    raise SystemExit(main())
