"""The same flow tool served by FastMCP 4 (`mcp_elicit.fastmcp`) and by the SDK's `MCPServer`: FastMCP/native.

One server process holds both (see `bench._fastmcp_server`): the tool body, its store and its key ring are
the same; only what serves and wraps the body differs (FastMCP's dispatch, middleware chain, dependency
injection and result conversion, and the flows' middleware that hands the call to the runtime). Every call
is a whole `call_tool` over loopback streamable HTTP, the 2026-07-28 retry round included, with one
journaled step and one durable form decision, and a new operation each time (the argument `n` never
repeats). The two sides take turns block by block, first one then the other, so drift and table growth hit
them alike; the ratio is of the pooled medians, and the server CPU per call is reported beside it.

A tool without a Flow (`echo`) runs the same way first: its ratio is what FastMCP itself costs next to
`MCPServer` for one call, a floor no adapter can go under. The flow tool's gap less that floor is what the
adapter adds (the 2026-07-28 flow call is two requests, so it meets that floor twice).
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, TextContent

from bench._common import DEFAULT_PG_URL, PG_ENV_VAR, pg_schema, select_backends, verdict
from bench._fastmcp_server import ANSWER, BARE_TOOL, CONTROL_TOOL, TOOL

TARGET = 1.05
ROOT = Path(__file__).resolve().parent.parent
NATIVE, FASTMCP = "native", "fastmcp"
SIDES = (NATIVE, FASTMCP)
ERAS = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}
REQUESTS_PER_CALL = {"2025-11-25": 1, "2026-07-28": 2}
"""The `tools/call` requests of one flow call: the 2026-07-28 one ends a round and is retried with the answer."""


async def accept(
    context: ClientRequestContext, params: ElicitRequestFormParams | ElicitRequestURLParams
) -> ElicitResult:
    return ElicitResult(action="accept", content=ANSWER)


def text_of(result: CallToolResult) -> str:
    if result.is_error or not result.content or not isinstance(result.content[0], TextContent):
        raise RuntimeError(f"the bench tool failed: {result.content!r}")
    return result.content[0].text


@dataclass(slots=True)
class Outcome:
    backend: str
    era: str
    tool: str
    latencies: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})

    def p50(self, side: str) -> float:
        return statistics.median(self.latencies[side])

    @property
    def ratio(self) -> float:
        return self.p50(FASTMCP) / self.p50(NATIVE)

    def medians(self) -> tuple[dict[str, float], dict[str, float]]:
        """Per side, in ms: the pooled latency p50, and the median over blocks of server CPU per call."""
        p50 = {side: self.p50(side) * 1000 for side in SIDES}
        return p50, {side: statistics.median(self.cpu[side]) * 1000 for side in SIDES}


@asynccontextmanager
async def connected(url: str, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=accept) as client,
    ):
        yield client


async def contest(urls: dict[str, str], backend: str, era: str, tool: str, calls: int, rounds: int) -> Outcome:
    outcome = Outcome(backend, era, tool)
    numbers = count()
    async with connected(urls[NATIVE], ERAS[era]) as native, connected(urls[FASTMCP], ERAS[era]) as fastmcp:
        clients = {NATIVE: native, FASTMCP: fastmcp}

        async def block(side: str, size: int) -> tuple[list[float], float]:
            gc.collect()
            before = float(text_of(await native.call_tool(CONTROL_TOOL, {})))
            latencies = []
            for _ in range(size):
                n = next(numbers)
                started = time.perf_counter()
                result = await clients[side].call_tool(tool, {"n": n})
                latencies.append(time.perf_counter() - started)
                if text_of(result) != f"applied {n}":
                    raise RuntimeError(f"{side} answered {text_of(result)!r} for {n}")
            after = float(text_of(await native.call_tool(CONTROL_TOOL, {})))
            return latencies, (after - before) / size

        for side in SIDES:
            await block(side, max(20, calls // 4))
        for number in range(rounds):
            for side in SIDES if number % 2 == 0 else tuple(reversed(SIDES)):
                latencies, cpu = await block(side, calls)
                outcome.latencies[side].extend(latencies)
                outcome.cpu[side].append(cpu)
    return outcome


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def server_process(store_url: str, log: Path) -> Iterator[dict[str, str]]:
    ports = {NATIVE: free_port(), FASTMCP: free_port()}
    command = [sys.executable, "-m", "bench._fastmcp_server", "--store", store_url,
               "--native-port", str(ports[NATIVE]), "--fastmcp-port", str(ports[FASTMCP])]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        for port in ports.values():
            while not _listening(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the bench server did not start; see {log}:\n{log.read_text()}")
                time.sleep(0.05)
        yield {NATIVE: f"http://127.0.0.1:{ports[NATIVE]}/mcp", FASTMCP: f"http://127.0.0.1:{ports[FASTMCP]}/mcp"}
    finally:
        process.terminate()
        process.wait(timeout=10)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def store_for(backend: str, pg_url: str, directory: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite://{directory / 'bench.db'}"
        return
    with pg_schema(pg_url, "bench_fastmcp") as url:
        yield url


def report(outcomes: Sequence[Outcome], calls: int, rounds: int) -> bool:
    """The flow tool's ratio against the target, beside FastMCP's own floor (the bare tool) and what is left.

    'adapter' is the flow tool's FastMCP-minus-native gap less the floor's, counted once per `tools/call`
    the flow call makes (two on 2026-07-28); in latency and in server CPU, which moves less with outside load.
    """
    print(f"\nlatency p50 and server CPU per call, ms, over {calls * rounds} calls per side (retry round included)")
    print(f"{'backend':<10}{'era':<12}{'tool':<16}{'p50 n':>7}{'p50 f':>7}{'cpu n':>7}{'cpu f':>7}{'ratio':>8}"
          f"{'adapter p50':>13}{'adapter cpu':>13}  target <= {TARGET}x")  # fmt: skip
    ok = True
    bare = {(o.backend, o.era): o for o in outcomes if o.tool == BARE_TOOL}
    for outcome in outcomes:
        p50, cpu = outcome.medians()
        line = (f"{outcome.backend:<10}{outcome.era:<12}{outcome.tool:<16}{p50[NATIVE]:>7.2f}{p50[FASTMCP]:>7.2f}"
                f"{cpu[NATIVE]:>7.2f}{cpu[FASTMCP]:>7.2f}{outcome.ratio:>7.3f}x")  # fmt: skip
        if outcome.tool == TOOL:
            floor_p50, floor_cpu = bare[(outcome.backend, outcome.era)].medians()
            requests = REQUESTS_PER_CALL[outcome.era]
            adapter_p50 = p50[FASTMCP] - p50[NATIVE] - requests * (floor_p50[FASTMCP] - floor_p50[NATIVE])
            adapter_cpu = cpu[FASTMCP] - cpu[NATIVE] - requests * (floor_cpu[FASTMCP] - floor_cpu[NATIVE])
            passed = outcome.ratio <= TARGET
            ok = ok and passed
            line += f"{adapter_p50:>+13.2f}{adapter_cpu:>+13.2f}  {verdict(passed)}"
        else:
            line += f"{'':>26}  (FastMCP's own floor)"
        print(line)
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fastmcp_flows", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--pg-url", default=os.environ.get(PG_ENV_VAR, DEFAULT_PG_URL))
    parser.add_argument("--calls", type=int, default=40, help="calls per block")
    parser.add_argument("--rounds", type=int, default=6, help="blocks per side")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    outcomes: list[Outcome] = []
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="bench-fastmcp-") as scratch:
        for backend in backends:
            with store_for(backend, args.pg_url, Path(scratch)) as store_url, server_process(
                store_url, Path(scratch) / f"{backend}.log"
            ) as urls:  # fmt: skip
                for era in ERAS:
                    for tool in (BARE_TOOL, TOOL):
                        outcomes.append(anyio.run(contest, urls, backend, era, tool, args.calls, args.rounds))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    report(outcomes, args.calls, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
