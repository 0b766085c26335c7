"""Commits and statements per tool call, counted at the database driver, for each era and store.

The two bodies of `bench._overhead_server`'s mcp-elicit tools, each a whole in-process `call_tool` (client
and server over the SDK's in-memory transport, the person answering at once): `step-ask-step`, a journaled
step, a one-field form, another step, the shape the target (issue "Performance at scale": at most 4 commits
per call on every era and store) is about; and `ask-only`, one form decision. Every call starts a new
operation (its argument never repeats), so no replay or attach makes it look cheap. And `gateway-gated`: a call of
`mcp-elicit gateway` (in process, its upstream `bench._gateway_upstream` a stdio process) whose `[[gate]]` guards
`echo`, approved at once: at most `ask-only`'s commits and one more, the commit that takes the run lease and
marks the forward before it leaves (issue 26: at most once).

Counted below our own code, so the figures are what reaches the database:

- SQLite: `sqlite3.Connection.set_trace_callback` on every connection the store holds, which SQLite calls for
  each statement it starts. The store's connections are in autocommit mode and commit by executing `COMMIT`,
  a traced statement like any other (on this Python even `Connection.commit()` is, but the store never calls
  it). A statement is any traced one; a commit is one that starts with COMMIT or END; a read one that starts
  with SELECT. A connection opened
  while counting would go untraced, so the run stops if the store opens one.
- PostgreSQL: libpq's protocol trace (`PGconn.trace`) of every connection of the store's two pools (the async
  one its served calls use, the blocking one worker threads use), read back from what the server answered:
  a statement is a CommandComplete or ErrorResponse, a commit a CommandComplete tagged COMMIT, a read one
  tagged SELECT. Pipelined
  statements (a write's BEGIN sent with its first statement, audit rows and notices with the COMMIT) count
  one each, as the server executes them. A pool that grows while counting stops the run, as above. Not
  traced: the connection listening for other instances' notices, which sends one LISTEN when it connects and
  only receives after that.

Counts are per call over `--calls` calls after `--warmup` calls. A figure that is not a whole number means the
calls differ, or time-driven work fell into the window: the store looks whether anyone subscribed to
notifications at most once a second, inside whichever call comes (+0.05 statements at 20 calls), and the
sweeper runs every 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import shlex
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psycopg
from psycopg import pq
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from bench._common import add_backend_arguments, pg_schema, select_backends, verdict
from bench._overhead_server import ANSWER, ASK_ONLY, BODIES, COUNTED, Body, build
from bench.overhead import text_of
from mcp_elicit.client import Accept, ElicitingClient, Era, FormRequest, Mode, UrlReply, UrlRequest
from mcp_elicit.gateway import Gateway, Upstream
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.server import Elicitation
from mcp_elicit.store import Store, open_store
from mcp_elicit.store.postgres import PostgresStore
from mcp_elicit.store.sqlite import SQLiteStore

TARGET_COMMITS = 4
DESCRIPTION = "Commits and statements per in-process tool call, counted at the database driver."


@dataclass(slots=True)
class Count:
    statements: int = 0
    commits: int = 0
    reads: int = 0
    """SELECT statements: reads on their own and those inside a write (a write's own checks)."""


class PerCall:
    """A row's counts per call, for a row counted over `calls` calls."""

    __slots__ = ()
    calls: int
    count: Count

    @property
    def commits(self) -> float:
        return self.count.commits / self.calls

    @property
    def reads(self) -> float:
        return self.count.reads / self.calls

    @property
    def statements(self) -> float:
        return self.count.statements / self.calls


@dataclass(frozen=True, slots=True)
class Row(PerCall):
    backend: str
    era: str
    body: Body
    calls: int
    count: Count

    @property
    def targeted(self) -> bool:
        return self.body is COUNTED

    @property
    def met(self) -> bool:
        return self.commits <= TARGET_COMMITS


_SQLITE_COMMIT = re.compile(r"\s*(COMMIT|END)\b", re.IGNORECASE)
_SQLITE_SELECT = re.compile(r"\s*SELECT\b", re.IGNORECASE)


@contextmanager
def sqlite_counted(store: SQLiteStore) -> Iterator[Count]:
    count = Count()

    def traced(statement: str) -> None:
        count.statements += 1
        if _SQLITE_COMMIT.match(statement):
            count.commits += 1
        elif _SQLITE_SELECT.match(statement):
            count.reads += 1

    engine = store._engine
    connections = list(engine._connections)
    for connection in connections:
        connection.set_trace_callback(traced)
    try:
        yield count
    finally:
        for connection in connections:
            connection.set_trace_callback(None)
    if engine._connections != connections:
        raise RuntimeError("the store opened a connection while counting: its statements went untraced")


_PG_ANSWER = re.compile(r'^B\t\d+\t(CommandComplete|ErrorResponse)\t?(?: "([^"]*)")?', re.MULTILINE)


@contextmanager
def pg_traced(connection: psycopg.BaseConnection[Any], count: Count) -> Iterator[None]:
    """libpq's trace of one connection into a file of its own, read once the trace is stopped (which flushes it)."""
    with tempfile.TemporaryFile() as file:
        connection.pgconn.trace(file.fileno())
        connection.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield
        finally:
            connection.pgconn.untrace()
            file.seek(0)
            for kind, tag in _PG_ANSWER.findall(file.read().decode("utf-8", "replace")):
                count.statements += 1
                count.commits += kind == "CommandComplete" and tag == "COMMIT"
                count.reads += kind == "CommandComplete" and tag.startswith("SELECT")


@asynccontextmanager
async def postgres_counted(store: PostgresStore) -> AsyncIterator[Count]:
    """Every connection of both pools, all idle between calls: taken from its pool, traced, given back."""
    count = Count()
    serving = store._serving.get(asyncio.get_running_loop())
    blocking, served = store._pool, serving.pool if serving is not None else None
    sizes = [_idle_size(pool) for pool in (blocking, served) if pool is not None]
    with ExitStack() as traces:
        taken = [blocking.getconn() for _ in range(sizes[0])]
        for connection in taken:
            traces.enter_context(pg_traced(connection, count))
            blocking.putconn(connection)
        if served is not None:
            taken_async = [await served.getconn() for _ in range(sizes[1])]
            for connection_async in taken_async:
                traces.enter_context(pg_traced(connection_async, count))
                await served.putconn(connection_async)
        yield count
    if [_idle_size(pool) for pool in (blocking, served) if pool is not None] != sizes:
        raise RuntimeError("a pool opened a connection while counting: its statements went untraced")


def _idle_size(pool: ConnectionPool[Any] | AsyncConnectionPool[Any]) -> int:
    stats = pool.get_stats()
    size: int = stats["pool_size"]
    if stats.get("pool_available", 0) != size:
        raise RuntimeError(f"{pool.name}: a connection is in use between calls")
    return size


ERAS: tuple[Era, ...] = ("2025-06-18", "2025-11-25", "2026-07-28")
"""The client kit pins each era's handshake; 2025-06-18 runs through the same adapter as 2025-11-25 and is
counted to show it."""


class Answering:
    """The person, answering every form at once with the bench's answer, so that only machinery is counted."""

    modes: frozenset[Mode] = frozenset({"form"})

    async def form(self, request: FormRequest) -> Accept:
        fields = request.requested_schema.get("properties", {})
        return Accept({name: value for name, value in ANSWER.items() if name in fields and value is not None})

    async def url(self, request: UrlRequest) -> UrlReply:
        raise RuntimeError(f"a form was expected, not {request!r}")


class Calls:
    """Numbers calls across the whole run: a repeated argument would be a replay, not a new call."""

    def __init__(self) -> None:
        self._last = 0

    async def run(self, client: ElicitingClient, body: Body, calls: int) -> None:
        for _ in range(calls):
            self._last += 1
            arguments: dict[str, Any] = {"message": f"echo {self._last}"} if body is GATED else {"n": self._last}
            result = await client.call_tool(body.elicit_tool, arguments)
            if text_of(result) != body.expected(self._last):
                raise RuntimeError(f"{body.elicit_tool} returned {text_of(result)!r}")


@asynccontextmanager
async def counting(store: object) -> AsyncIterator[Count]:
    if isinstance(store, SQLiteStore):
        with sqlite_counted(store) as count:
            yield count
    elif isinstance(store, PostgresStore):
        async with postgres_counted(store) as count:
            yield count
    else:
        raise TypeError(f"no driver-level count for {type(store).__name__}")


async def measure(backend: str, store_url: str, calls: int, warmup: int, tally: Calls) -> list[Row]:
    rows: list[Row] = []
    for era in ERAS:
        print(f"running {backend} {era} ...", flush=True)
        async with AsyncExitStack() as stack:
            client, elicitation = await stack.enter_async_context(connected(store_url, era))
            for body in BODIES:
                await tally.run(client, body, warmup)
                async with counting(elicitation.store) as count:
                    await tally.run(client, body, calls)
                rows.append(Row(backend, era, body, calls, count))
        async with gated(store_url, era) as (client, store):
            await tally.run(client, GATED, warmup)
            async with counting(store) as count:
                await tally.run(client, GATED, calls)
            rows.append(Row(backend, era, GATED, calls, count))
    return rows


GATED = Body("gateway-gated", "echo", "", "", lambda n: f"echo {n}")
"""A call of the gateway's upstream tool `echo` behind `[[gate]] tool = "echo"`, approved at once: one approval
decision and the forward's at-most-once mark."""


@asynccontextmanager
async def gated(store_url: str, era: Era) -> AsyncIterator[tuple[ElicitingClient, Store]]:
    """`mcp-elicit gateway` in process with `echo` of `bench._gateway_upstream` (a stdio process) gated."""
    store = open_store(store_url)
    upstream = Upstream.parse(f"{shlex.quote(sys.executable)} -m bench._gateway_upstream", name="bench")
    gateway = Gateway(upstream, store=store, gates=[GateTable(tool="echo", editable=[])])
    try:
        async with gateway.running(), ElicitingClient(gateway.server, Answering(), era=era) as client:
            yield client, store
    finally:
        store.close()


@asynccontextmanager
async def connected(store_url: str, era: Era) -> AsyncIterator[tuple[ElicitingClient, Elicitation]]:
    elicitation, _ = build(store_url, 0)
    try:
        async with ElicitingClient(elicitation.mcp_server, Answering(), era=era) as client:
            yield client, elicitation
    finally:
        elicitation.close()


async def run(backends: Sequence[str], pg_url: str, calls: int, warmup: int) -> list[Row]:
    rows: list[Row] = []
    tally = Calls()
    for backend in backends:
        if backend == "sqlite":
            with tempfile.TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
                rows.extend(await measure(backend, f"sqlite://{Path(directory) / 'elicit.db'}", calls, warmup, tally))
        else:
            with pg_schema(pg_url, "bench_commits") as url:
                rows.extend(await measure(backend, url, calls, warmup, tally))
    return rows


def print_table(rows: list[Row], calls: int, warmup: int) -> None:
    print(f"\nper in-process tools/call, counted at the driver over {calls} calls after {warmup} warm-up calls")
    header = f"{'backend':<10}{'era':<12}{'body':<15}{'commits':>9}{'statements':>12}{'target':>8}  result"
    print(header)
    print("-" * len(header))
    asked = {(row.backend, row.era): row.commits for row in rows if row.body is ASK_ONLY}
    gated = [row for row in rows if row.body is GATED]
    for row in rows:
        target, result = (f"<= {TARGET_COMMITS}", verdict(row.met)) if row.targeted else ("-", "info")
        if row.body is GATED:
            most = asked[row.backend, row.era] + 1
            target, result = f"<= {most:g}", verdict(row.commits <= most)
        print(
            f"{row.backend:<10}{row.era:<12}{row.body.name:<15}{row.commits:>9.1f}{row.statements:>12.1f}"
            f"{target:>8}  {result}"
        )
    targeted = [row for row in rows if row.targeted]
    worst = max(targeted, key=lambda row: row.commits)
    print(
        f"\nstep-ask-step at most {TARGET_COMMITS} commits per call on every era and store: "
        f"{verdict(all(row.met for row in targeted))} (most: {worst.commits:.1f}, {worst.backend} {worst.era})"
    )
    if gated:
        held = all(row.commits <= asked[row.backend, row.era] + 1 for row in gated)
        print(
            "gateway gated call at most one decision's commits (ask-only) + 1, the commit that takes the run lease "
            f"and marks the forward before it leaves: {verdict(held)}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.commits", description=DESCRIPTION)
    parser.add_argument("--calls", type=int, default=20, help="counted calls per row (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="calls before counting (default %(default)s)")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 1:
        parser.error("--calls and --warmup must be at least 1")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    logging.getLogger("mcp_elicit").setLevel(logging.WARNING)  # schema migrations of each throwaway store
    rows = anyio.run(run, backends, args.pg_url, args.calls, args.warmup)
    print_table(rows, args.calls, args.warmup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
