"""K overlapping identical tool calls over streamable HTTP on loopback: mcp-elicit against the bare SDK.

K clients, each on a connection of its own and connected before the batch starts, make the same tool
call (same principal: the loopback development one; same tool; same arguments) released together. The
tool body is one journaled step, `await flow.step("work", work, ...)`, where `work` counts its runs and
sleeps a fixed time, standing for an external call. Single flight means the K calls of a batch share
one operation and run the step once: runs per batch 1, not K. Every batch uses a fresh argument `n`, so
each batch is a new logical call, never a replay of the previous batch's result.

The baseline, in the same run and on the same connections, is a plain `MCPServer` tool doing the same
work once per call (runs = K by nature); the two sides take turns batch by batch, alternating which goes
first. The question body asks one form question before the step (the client answers at once through its
elicitation callback) and reports how often the person was asked per batch: the goal is 1. On 2026-07-28
it runs on the stock SDK client driver, with its round cap raised so that a call kept waiting on another
call's open question (requestState-only rounds) is not given up early; a batch that still does not finish
within `BATCH_TIMEOUT` ends its row, so the run stays bounded.

The "lost round" table times never-stuck: the question of an `overlap_ask` call is put out and then lost (on
2026-07-28 the client drops the round's response; on 2025-11-25 the client's connection closes with the
question on screen, without a word), and the identical call made again on a new connection is timed until
the person is asked, at the server's default `reask_after` and `long_poll` (goal: at most their sum, 20 s;
before `reask_after` existed, a lost 2026-07-28 round held its question for `state_ttl` + 5 s = 605 s).

Also counted: the operations each mcp-elicit batch recorded in the store (single flight: 1), read from the
store after the server stops. SQLite is a temporary file; `--store postgresql://...` gets a schema of its
own, created and dropped by the run.

Server and client are separate processes, as in `bench.overhead`: this module is also the server, run
as `python -m bench.overlap serve ...` by the client side.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2
import psycopg
import uvicorn
from anyio.abc import TaskStatus
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.server.elicitation import AcceptedElicitation, render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitRequestParams, ElicitResult, InputRequiredResult
from pydantic import BaseModel, Field

from bench._common import pg_schema, pg_unreachable
from bench.overhead import Placement, load, ms, pinned, server_process, text_of
from mcp_elicit.model import request_digest
from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, RequestState
from mcp_elicit.store import open_store

DESCRIPTION = "K concurrent identical tool calls (one journaled step) over loopback HTTP, mcp-elicit against the SDK."
STEP_TOOL = "overlap_step"
ASK_TOOL = "overlap_ask"
BARE_STEP_TOOL = "bare_step"
BARE_ASK_TOOL = "bare_ask"
BARE_ROUNDS_TOOL = "bare_ask_rounds"
RUNS_TOOL = "overlap_runs"
KEY = "approve_work"
ANSWER: dict[str, str | int | float | bool | list[str] | None] = {"approve": True, "note": "go"}
BARE, ELICIT = "bare", "mcp-elicit"
SIDES = (BARE, ELICIT)
STEP, ASK = "step", "ask"
BATCH_TIMEOUT = 30.0
LOG_TAIL = 3000
INPUT_ROUNDS = 200
"""The stock 2026-07-28 driver's round cap, raised from its 10 so a call can wait through requestState-only
rounds (backing off to 250 ms each) while another call's question is open; `BATCH_TIMEOUT` still bounds it."""


class Approval(BaseModel):
    approve: bool = Field(description="Run the work")
    note: str = Field(default="", max_length=80, description="A short note")


def message(n: int) -> str:
    return f"Run work {n}?"


def done(n: int) -> str:
    return f"done {n}"


def asked_and_done(n: int) -> str:
    return f"approved {n}: {done(n)}"


# -- the server process ------------------------------------------------------------------------------


def build(store_url: str, port: int, work_seconds: float) -> tuple[Elicitation, uvicorn.Config]:
    elicitation = Elicitation(
        open_store(store_url),
        request_state=RequestState(single_process=True),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
    )
    server = elicitation.server("overlap-bench")
    runs: Counter[str] = Counter()
    schema = render_elicitation_schema(Approval)

    async def work(tool: str, n: int) -> str:
        """The external call: counted, then a fixed wait."""
        runs[f"{tool}:{n}"] += 1
        await anyio.sleep(work_seconds)
        return done(n)

    @elicitation.tool(name=STEP_TOOL)
    async def overlap_step(flow: Flow, n: int) -> str:
        """mcp-elicit: the work as one journaled step."""
        return await flow.step("work", work, STEP_TOOL, n)

    @elicitation.tool(name=ASK_TOOL)
    async def overlap_ask(flow: Flow, n: int) -> str:
        """mcp-elicit: one form question, then the work as one journaled step."""
        answer = await flow.ask(message(n), Approval, key=KEY)
        if not (isinstance(answer, Accepted) and answer.data.approve):
            return f"not approved {n}"
        return f"approved {n}: {await flow.step('work', work, ASK_TOOL, n)}"

    @server.tool(name=BARE_STEP_TOOL)
    async def bare_step(n: int) -> str:
        """The bare SDK: the work, once per call."""
        return await work(BARE_STEP_TOOL, n)

    @server.tool(name=BARE_ASK_TOOL)
    async def bare_ask(n: int, ctx: Context) -> str:
        """The bare SDK on 2025-11-25: `ctx.elicit` on the live call, then the work."""
        result = await ctx.elicit(message(n), Approval)
        if not (isinstance(result, AcceptedElicitation) and result.data.approve):
            return f"not approved {n}"
        return f"approved {n}: {await work(BARE_ASK_TOOL, n)}"

    @server.tool(name=BARE_ROUNDS_TOOL)
    async def bare_ask_rounds(n: int, ctx: Context) -> str | InputRequiredResult:
        """The bare SDK on 2026-07-28: one hand-written `InputRequiredResult` round, then the work on the retry."""
        response = (ctx.input_responses or {}).get(KEY)
        if response is None:
            params = ElicitRequestFormParams(message=message(n), requested_schema=schema)
            return InputRequiredResult(input_requests={KEY: ElicitRequest(params=params)}, request_state=KEY)
        if not (isinstance(response, ElicitResult) and response.action == "accept"):
            return f"not approved {n}"
        if not Approval.model_validate(response.content).approve:
            return f"not approved {n}"
        return f"approved {n}: {await work(BARE_ROUNDS_TOOL, n)}"

    @server.tool(name=RUNS_TOOL)
    async def overlap_runs(tool: str, n: int) -> str:
        """How many times `work` ran for this tool and argument."""
        return str(runs[f"{tool}:{n}"])

    config = uvicorn.Config(
        server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
    )
    return elicitation, config


def serve(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overlap serve")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True, help="store URL (sqlite://... or postgresql://...)")
    parser.add_argument("--work-ms", type=float, required=True)
    parser.add_argument("--cpu", type=int, help="run on this CPU only (set before any thread starts)")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    elicitation, config = build(args.store, args.port, args.work_ms / 1000)
    try:
        uvicorn.Server(config).run()
    finally:
        elicitation.close()
    return 0


# -- the client side ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Era:
    name: str
    client_mode: str
    bare_ask_tool: str

    def tool(self, body: str, side: str) -> str:
        if body == STEP:
            return BARE_STEP_TOOL if side == BARE else STEP_TOOL
        return self.bare_ask_tool if side == BARE else ASK_TOOL


ERAS = {
    "2025-11-25": Era("2025-11-25", "legacy", BARE_ASK_TOOL),
    "2026-07-28": Era("2026-07-28", "2026-07-28", BARE_ROUNDS_TOOL),
}


@dataclass(slots=True)
class Batch:
    n: int
    seconds: float
    runs: int
    asked: int
    failures: list[str]
    timed_out: bool


@dataclass(slots=True)
class Series:
    """One side's batches for one (backend, era, body, K)."""

    tool: str
    batches: list[Batch] = field(default_factory=list)
    operations: list[int] = field(default_factory=list)

    @property
    def p50(self) -> float | None:
        return statistics.median(batch.seconds for batch in self.batches) if self.batches else None

    def cells(self, k: int, body: str) -> list[str]:
        """p50 ms, calls/s, step runs and questions asked per batch; "-" where there is nothing to show."""
        p50 = self.p50
        asked = spread([batch.asked for batch in self.batches]) if body == ASK else "-"
        return [
            "-" if p50 is None else ms(p50),
            "-" if p50 is None else f"{k / p50:.1f}",
            spread([batch.runs for batch in self.batches]),
            asked,
        ]

    @property
    def failures(self) -> list[str]:
        return [failure for batch in self.batches for failure in batch.failures]


@dataclass(slots=True)
class Row:
    backend: str
    era: str
    body: str
    k: int
    sides: dict[str, Series]
    cut_short: bool = False

    @property
    def ratio(self) -> str:
        elicit, bare = self.sides[ELICIT].p50, self.sides[BARE].p50
        return "-" if elicit is None or bare is None else f"{elicit / bare:.2f}"


class Person:
    """Answers every question at once, and counts the questions per message (so per batch)."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self.first_asked: dict[str, float] = {}

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked[params.message] += 1
        self.first_asked.setdefault(params.message, time.perf_counter())
        return ElicitResult(action="accept", content=dict(ANSWER))


class WalksAway(Person):
    """Is shown the question, and never answers: the host crashed with the dialog open."""

    def __init__(self) -> None:
        super().__init__()
        self.shown = anyio.Event()

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.shown.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


@dataclass(slots=True)
class LostRound:
    backend: str
    era: str
    seconds: float | None
    """From the identical call to the person being asked; None past `LOST_ROUND_TIMEOUT`."""
    result: str


LOST_ROUND_TIMEOUT = 120.0


async def lose_a_round(url: str, backend: str, era: Era, numbers: Numbers) -> LostRound:
    """Put a question out and lose it, then time the identical call until the person is asked."""
    n = numbers.next()
    away = WalksAway()
    async with anyio.create_task_group() as group:

        async def first() -> None:
            async with connections(url, era, 1, away) as [client]:
                if era.client_mode == "2026-07-28":
                    await client.session.call_tool(ASK_TOOL, {"n": n}, allow_input_required=True)
                    away.shown.set()  # the round arrived; the client drops it
                else:
                    await client.call_tool(ASK_TOOL, {"n": n})

        group.start_soon(first)
        with anyio.fail_after(BATCH_TIMEOUT):
            await away.shown.wait()
        group.cancel_scope.cancel()
    person = Person()
    result = f"no result within {LOST_ROUND_TIMEOUT:.0f}s"
    async with connections(url, era, 1, person) as [client]:
        started = time.perf_counter()
        with anyio.move_on_after(LOST_ROUND_TIMEOUT):
            result = text_of(await client.call_tool(ASK_TOOL, {"n": n}))
    asked = person.first_asked.get(message(n))
    return LostRound(backend, era.name, None if asked is None else asked - started, result)


@asynccontextmanager
async def connections(url: str, era: Era, k: int, person: Person) -> AsyncIterator[list[Client]]:
    """K client connections, each with its own HTTP client, all connected before any batch."""
    async with AsyncExitStack() as stack:
        clients: list[Client] = []
        for _ in range(k):
            http = await stack.enter_async_context(httpx2.AsyncClient(timeout=60))
            transport = streamable_http_client(url, http_client=http)
            client = Client(
                transport, mode=era.client_mode, elicitation_callback=person, input_required_max_rounds=INPUT_ROUNDS
            )
            clients.append(await stack.enter_async_context(client))
        for client in clients:
            await client.list_tools()
        yield clients


class Numbers:
    """A fresh `n` per batch over the server's whole life: no batch can replay another's result."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


async def run_batch(clients: list[Client], tool: str, n: int, expected: str, person: Person) -> Batch:
    """The K calls, each waiting at the gate until all are; timed from release to the last result."""
    release = anyio.Event()
    failures: list[str] = []
    finished = 0

    async def one(client: Client, *, task_status: TaskStatus[None]) -> None:
        nonlocal finished
        task_status.started()
        await release.wait()
        try:
            got = text_of(await client.call_tool(tool, {"n": n}))
        except Exception as error:
            got = f"{type(error).__name__}: {error}"
        if got != expected:
            failures.append(got)
        finished += 1

    started = time.perf_counter()
    with anyio.move_on_after(BATCH_TIMEOUT):
        async with anyio.create_task_group() as group:
            for client in clients:
                await group.start(one, client)
            started = time.perf_counter()
            release.set()
    elapsed = time.perf_counter() - started
    missing = len(clients) - finished
    failures.extend(f"no result within {BATCH_TIMEOUT:.0f}s" for _ in range(missing))
    runs = int(text_of(await clients[0].call_tool(RUNS_TOOL, {"tool": tool, "n": n})))
    return Batch(n, elapsed, runs, person.asked[message(n)], failures, timed_out=missing > 0)


def expected_text(body: str, n: int) -> str:
    return done(n) if body == STEP else asked_and_done(n)


@dataclass(frozen=True, slots=True)
class Settings:
    ks: list[int]
    rounds: int
    eras: list[Era]
    work_ms: float
    placement: Placement
    lost_round: bool = True


async def contest(url: str, backend: str, era: Era, settings: Settings, numbers: Numbers) -> list[Row]:
    rows: list[Row] = []
    person = Person()
    for k in settings.ks:
        async with connections(url, era, k, person) as clients:
            for body in (STEP, ASK):
                row = Row(backend, era.name, body, k, {side: Series(era.tool(body, side)) for side in SIDES})
                await play(row, clients, person, numbers, settings.rounds)
                rows.append(row)
    return rows


async def play(row: Row, clients: list[Client], person: Person, numbers: Numbers, rounds: int) -> None:
    """One untimed batch per side, then the timed ones, alternating which side goes first.

    A batch that times out ends the row: its calls were cancelled mid-flight, and more of the same would
    only stretch the run past its bound.
    """
    for side in SIDES:
        n = numbers.next()
        warmup = await run_batch(clients, row.sides[side].tool, n, expected_text(row.body, n), person)
        if warmup.timed_out:
            row.sides[side].batches.append(warmup)
            row.cut_short = True
            return
    for number in range(rounds):
        for side in SIDES if number % 2 == 0 else reversed(SIDES):
            n = numbers.next()
            series = row.sides[side]
            series.batches.append(await run_batch(clients, series.tool, n, expected_text(row.body, n), person))
            if series.batches[-1].timed_out:
                row.cut_short = True
                return


def count_operations(backend: str, store_url: str, rows: list[Row]) -> None:
    """Operations each mcp-elicit batch recorded, read from the store once the server is gone."""
    sql = "SELECT count(*) FROM elicit_operations WHERE target = %s AND request_digest = %s"
    wanted = [
        (series, (series.tool, request_digest("tools/call", {"name": series.tool, "arguments": {"n": batch.n}})))
        for series in (row.sides[ELICIT] for row in rows)
        for batch in series.batches
    ]
    if backend == "sqlite":
        with closing(sqlite3.connect(store_url.removeprefix("sqlite://"))) as lite:
            for series, parameters in wanted:
                series.operations.append(int(lite.execute(sql.replace("%s", "?"), parameters).fetchone()[0]))
        return
    with psycopg.connect(store_url) as pg:
        for series, parameters in wanted:
            found = pg.execute(sql, parameters).fetchone()
            series.operations.append(int(found[0]) if found else -1)


def run_backend(backend: str, store_url: str, workdir: Path, settings: Settings) -> tuple[list[Row], list[LostRound]]:
    rows: list[Row] = []
    lost: list[LostRound] = []
    numbers = Numbers()
    log_path = workdir / f"server-{backend}.log"
    module = ("bench.overlap", "serve", "--store", store_url, "--work-ms", str(settings.work_ms))
    with server_process(module, log_path, settings.placement.server) as url:
        for era in settings.eras:
            print(f"running {backend} {era.name} ...", flush=True)
            rows.extend(anyio.run(contest, url, backend, era, settings, numbers))
            if settings.lost_round:
                print(f"losing a round: {backend} {era.name} ...", flush=True)
                lost.append(anyio.run(lose_a_round, url, backend, era, numbers))
    count_operations(backend, store_url, rows)
    if any(series.failures for row in rows for series in row.sides.values()):
        print(f"calls failed; the end of the {backend} server's log:\n{log_path.read_text()[-LOG_TAIL:]}")
    return rows, lost


def run_store(store: str, settings: Settings) -> tuple[list[Row], list[LostRound]]:
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-overlap-") as directory:
        workdir = Path(directory)
        if store == "sqlite":
            return run_backend("sqlite", f"sqlite://{workdir / 'elicit.db'}", workdir, settings)
        with pg_schema(store, "bench_overlap") as schema_url:
            return run_backend("postgres", schema_url, workdir, settings)


def spread(values: Sequence[int]) -> str:
    """One number when every batch agrees, else the range: never an average no batch had."""
    if not values:
        return "-"
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def print_table(rows: list[Row], lost: list[LostRound], settings: Settings) -> None:
    rounds = settings.rounds
    print(
        f"\nK identical tools/call released together, each on its own connection; the step sleeps "
        f"{settings.work_ms:g} ms\nbatch wall time per round, ms (first the bare SDK, then mcp-elicit)"
    )
    for row in rows:
        for side in SIDES:
            shown = ", ".join(ms(batch.seconds) for batch in row.sides[side].batches)
            print(f"  {row.backend:<8} {row.era:<10}  {row.body:<4} K={row.k:<3} {side:<10}  {shown}")
    header = (
        f"{'backend':<10}{'era':<12}{'body':<6}{'K':>3}{'bare p50':>10}{'calls/s':>9}{'runs':>6}{'asked':>6}"
        f"{'elicit p50':>12}{'calls/s':>9}{'runs':>6}{'asked':>6}{'ops':>6}{'ratio':>7}{'fails':>7}"
    )
    print(
        f"\nper batch, p50 over {rounds} batches (p50 ms; calls/s = K / p50 batch time; runs = step function runs;"
        "\nasked = questions the person saw; ops = operations recorded; single flight wants runs 1, asked 1, ops 1)"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        bare, elicit = row.sides[BARE], row.sides[ELICIT]
        b_p50, b_rate, b_runs, b_asked = bare.cells(row.k, row.body)
        e_p50, e_rate, e_runs, e_asked = elicit.cells(row.k, row.body)
        fails = len(bare.failures) + len(elicit.failures)
        print(
            f"{row.backend:<10}{row.era:<12}{row.body:<6}{row.k:>3}{b_p50:>10}{b_rate:>9}{b_runs:>6}{b_asked:>6}"
            f"{e_p50:>12}{e_rate:>9}{e_runs:>6}{e_asked:>6}{spread(elicit.operations):>6}{row.ratio:>7}{fails:>7}"
        )
    if lost:
        print(
            "\nlost round: the question put out, then lost; the identical call made again, timed until the person is"
            "\nasked (server defaults: reask_after 15 s, long_poll 5 s; goal <= 20 s; before reask_after: 605 s)"
        )
        print(f"{'backend':<10}{'era':<12}{'asked after':>12}  result")
        for one in lost:
            seconds = "never" if one.seconds is None else f"{one.seconds:.1f} s"
            print(f"{one.backend:<10}{one.era:<12}{seconds:>12}  {one.result}")
    for row in rows:
        if row.cut_short:
            where = f"{row.backend} {row.era} {row.body} K={row.k}"
            print(f"  cut short: {where}, a batch timed out after {BATCH_TIMEOUT:.0f}s")
        for side in SIDES:
            failures = row.sides[side].failures
            if failures:
                shown = "; ".join(sorted(set(failures))[:3])
                print(f"  failed {row.backend} {row.era} {row.body} K={row.k} {side}: {len(failures)} calls: {shown}")


def k_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("every K must be at least 1")
    return values


def era_list(text: str) -> list[Era]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in ERAS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"eras are {', '.join(ERAS)}; got {text!r}")
    return [ERAS[name] for name in names]


def store_choice(text: str) -> str:
    if text == "sqlite" or text.startswith(("postgresql://", "postgres://")):
        return text
    raise argparse.ArgumentTypeError(f"expected sqlite or a postgresql:// URL, got {text!r}")


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["serve"]:
        return serve(arguments[1:])
    parser = argparse.ArgumentParser(prog="python -m bench.overlap", description=DESCRIPTION)
    parser.add_argument("--k", type=k_list, default=[1, 5, 20], help="concurrent calls per batch (default 1,5,20)")
    parser.add_argument("--rounds", type=int, default=5, help="timed batches per side and K (default %(default)s)")
    parser.add_argument(
        "--era", type=era_list, default=[ERAS["2025-11-25"]], help=f"{' or '.join(ERAS)}, or both comma-separated"
    )
    parser.add_argument(
        "--store",
        type=store_choice,
        action="append",
        help="sqlite (a temporary file; the default) or a PostgreSQL URL to create a throwaway schema in; repeatable",
    )
    parser.add_argument("--work-ms", type=float, default=20.0, help="how long the step sleeps (default %(default)s)")
    parser.add_argument(
        "--no-lost-round",
        dest="lost_round",
        action="store_false",
        help="skip the lost-round timing (about 20 s per era and store at the server's defaults)",
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="leave client and server to the scheduler instead of giving each a CPU of its own",
    )
    args = parser.parse_args(arguments)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    stores: list[str] = args.store or ["sqlite"]
    for store in stores:
        problem = None if store == "sqlite" else pg_unreachable(store)
        if problem is not None:
            print(f"error: PostgreSQL is not reachable at {store}: {problem}", file=sys.stderr)
            return 2
    settings = Settings(args.k, args.rounds, args.era, args.work_ms, Placement.choose(args.pin), args.lost_round)
    print(f"{settings.placement.describe()}; before: {load()}")
    rows: list[Row] = []
    lost: list[LostRound] = []
    with pinned(settings.placement.client):
        for store in stores:
            store_rows, store_lost = run_store(store, settings)
            rows.extend(store_rows)
            lost.extend(store_lost)
    print(f"after: {load()}")
    print_table(rows, lost, settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
