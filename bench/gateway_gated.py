"""A gated call through `mcp-elicit gateway`, approved at once, against the floor relay plus one durable decision
(issue 26), in the same run.

Four processes on stdio, each started by this client (the SDK's `Client`, answering every question at once), on
each era:

- `floor`: the relay made of the SDK's own server and client (`bench._floor_relay`) in front of the SDK upstream
  (`bench._gateway_upstream`), as in `bench.gateway`;
- `gated`: `mcp-elicit gateway` in front of the same upstream, its `echo` behind `[[gate]] tool = "echo"`
  (nothing editable), on a SQLite store of its own: every call is approved by the person, then forwarded once;
- `bare`: the SDK upstream called directly;
- `decided`: an mcp-elicit server (`bench._decision_server`) whose `echo` is gated (`Gate()`): one durable
  approval decision, as the gateway's gate asks it, on a SQLite store of its own.

One durable decision costs `decided - bare` (p50s): the approval's round trip to the person and its records.
The target: `gated` p50 at most `floor` p50 + that. The sides take turns block by block as in `bench.gateway`.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult

from bench._common import verdict
from bench.gateway import ROOT, UPSTREAM, Pair, ms, percentile, run_eras, text_of

DESCRIPTION = "A gated call through mcp-elicit gateway against the floor relay plus one durable decision."
FLOOR, GATED, BARE, DECIDED = "floor", "gated", "bare", "decided"
SIDES = (FLOOR, GATED, BARE, DECIDED)
CONFIG = '[[gate]]\ntool = "echo"\neditable = []\n'


@dataclass(slots=True)
class Outcome:
    pair: Pair
    latencies: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    blocks: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})

    def p50(self, side: str) -> float:
        return percentile(self.latencies[side], 0.5)

    @property
    def decision(self) -> float:
        return self.p50(DECIDED) - self.p50(BARE)

    @property
    def allowed(self) -> float:
        return self.p50(FLOOR) + self.decision

    @property
    def met(self) -> bool:
        return self.p50(GATED) <= self.allowed


def parameters(side: str, pair: Pair, directory: Path) -> StdioServerParameters:
    python = sys.executable
    if side == FLOOR:
        args = ["-m", "bench._floor_relay", "--mode", pair.upstream_era]
    elif side == GATED:
        config = directory / "gateway.toml"
        config.write_text(CONFIG)
        args = ["-m", "mcp_elicit", "gateway", "--upstream", UPSTREAM, "--era", pair.upstream_era]
        args += ["--config", str(config), "--store", f"sqlite://{directory / f'gated-{pair.era}.db'}"]
    elif side == BARE:
        args = ["-m", "bench._gateway_upstream"]
    else:
        args = ["-m", "bench._decision_server", "--store", f"sqlite://{directory / f'decided-{pair.era}.db'}"]
    return StdioServerParameters(command=python, args=args, cwd=ROOT)


async def yes(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """The person, approving at once as the call stands (no edit, no note)."""
    assert isinstance(params, ElicitRequestFormParams)
    return ElicitResult(action="accept", content={})


class Caller:
    def __init__(self) -> None:
        self.sent = 0

    async def block(self, client: Client, calls: int) -> list[float]:
        gc.collect()
        latencies = []
        for _ in range(calls):
            self.sent += 1
            message = f"message {self.sent}"
            started = time.perf_counter()
            result = await client.call_tool("echo", {"message": message})
            latencies.append(time.perf_counter() - started)
            if message not in text_of(result) and not any(message in str(block) for block in result.content):
                raise RuntimeError(f"echo answered {result.content!r}, not {message!r}")
        return latencies


@asynccontextmanager
async def started(pair: Pair, directory: Path, log: TextIO) -> AsyncIterator[dict[str, Client]]:
    async with AsyncExitStack() as stack:
        clients: dict[str, Client] = {}
        for side in SIDES:
            transport = stdio_client(parameters(side, pair, directory), errlog=log)
            client = Client(transport, mode=pair.client_mode, read_timeout_seconds=60, elicitation_callback=yes)
            clients[side] = await stack.enter_async_context(client)
        yield clients


async def contest(pair: Pair, calls: int, pairs: int, directory: Path, log: TextIO, caller: Caller) -> Outcome:
    outcome = Outcome(pair)
    async with started(pair, directory, log) as clients:
        for side in SIDES:
            await clients[side].list_tools()
            await caller.block(clients[side], max(20, calls // 2))
        for number in range(pairs):
            for side in SIDES if number % 2 == 0 else tuple(reversed(SIDES)):
                latencies = await caller.block(clients[side], calls)
                outcome.latencies[side] += latencies
                outcome.blocks[side].append(statistics.median(latencies))
    return outcome


def print_report(outcomes: list[Outcome], calls: int, pairs: int) -> None:
    print(f"\necho over stdio, the person answering at once ({pairs} pairs x {calls} calls per side)")
    print("p50 ms of each block, in the order run:")
    for o in outcomes:
        for side in SIDES:
            print(f"  {o.pair.era:<11} {side:<8} {', '.join(ms(block) for block in o.blocks[side])}")
    header = f"{'era':<12}{'floor':>9}{'bare':>9}{'decided':>9}{'decision':>10}{'allowed':>9}{'gated':>9}  result"
    print("\np50 latency, ms (decision = decided - bare; allowed = floor + decision)")
    print(header)
    print("-" * len(header))
    for o in outcomes:
        print(
            f"{o.pair.era:<12}{ms(o.p50(FLOOR)):>9}{ms(o.p50(BARE)):>9}{ms(o.p50(DECIDED)):>9}{ms(o.decision):>10}"
            f"{ms(o.allowed):>9}{ms(o.p50(GATED)):>9}  {verdict(o.met)}"
        )
    print()
    for o in outcomes:
        print(
            f"gateway gated call p50 <= the floor relay's + one durable decision on {o.pair.era}: {verdict(o.met)} "
            f"({ms(o.p50(GATED))} vs {ms(o.allowed)} ms)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    caller = Caller()

    async def contested(pair: Pair, calls: int, pairs: int, directory: Path, log: TextIO) -> Outcome:
        return await contest(pair, calls, pairs, directory, log, caller)

    return run_eras(
        argv, prog="python -m bench.gateway_gated", description=DESCRIPTION, calls=60, pairs=4, contest=contested,
        report=print_report,
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
