"""What sealing the audit trail costs the calls: in-process tool calls with the sealer running against without.

Two stores of the same engine, each with its own in-process client and server (`bench._overhead_server`, the
counted call `step-ask-step`, 2025-11-25 by default). On one side the audit sealer (`AuditSealer`, the served
app's background task) runs on the same event loop for the whole of each of its rounds, every
`--interval` seconds (1 s by default: five times as often as the served default, so that every round seals
more than once); on the other it does not run. Sides alternate round by round, the first side swapping each
round, so drift hits both. The verdict: the median ratio of calls/s (sealer on over off) is at least 0.9
(the issue's 10 %). After the run the sealed side's trail must verify sound, every row covered.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anyio
from mcp import Client

from bench._common import add_backend_arguments, pg_schema, select_backends, verdict
from bench._overhead_server import COUNTED
from bench.inprocess import Calls, connected
from bench.overhead import ELICIT, ERAS, Era
from mcp_elicit.model.audit_keys import AuditSigningKeys
from mcp_elicit.server.audit_sealer import AuditSealer
from mcp_elicit.server.runtime import Elicitation
from mcp_elicit.store.aio import AsyncStore

TARGET_RATIO = 0.9
DESCRIPTION = "In-process tool calls with the audit sealer running against without, same run, alternating."
ON, OFF = "sealer on", "sealer off"


@asynccontextmanager
async def sealing(elicitation: Elicitation, keys: AuditSigningKeys, interval: float) -> AsyncIterator[AuditSealer]:
    """The sealer running beside the block, as the served app's lifespan runs it."""
    sealer = AuditSealer(AsyncStore(elicitation.store), keys, timedelta(seconds=interval))
    async with anyio.create_task_group() as group:
        group.start_soon(sealer.run)
        try:
            yield sealer
        finally:
            group.cancel_scope.cancel()


async def contest(urls: dict[str, str], era: Era, calls: int, rounds: int, interval: float) -> dict[str, list[float]]:
    """Calls per second of each side, one figure per round."""
    keys = AuditSigningKeys([secrets.token_bytes(32)])
    tally = Calls()
    rates: dict[str, list[float]] = {ON: [], OFF: []}
    async with AsyncExitStack() as stack:
        sides: dict[str, tuple[Client, Elicitation]] = {
            side: await stack.enter_async_context(connected(url, era)) for side, url in urls.items()
        }
        tool = era.tool(COUNTED, ELICIT)
        for client, _ in sides.values():
            await tally.block(client, COUNTED, tool, max(20, calls // 4))
        for number in range(rounds):
            for side in (ON, OFF) if number % 2 == 0 else (OFF, ON):
                client, elicitation = sides[side]
                async with AsyncExitStack() as running:
                    if side == ON:
                        await running.enter_async_context(sealing(elicitation, keys, interval))
                    wall, _ = await tally.block(client, COUNTED, tool, calls)
                rates[side].append(1 / wall)
        on = sides[ON][1]
        await AuditSealer(AsyncStore(on.store), keys, timedelta(seconds=interval)).seal()
        report = await AsyncStore(on.store).verify_audit(keys.public())
        if not report.sound or report.unsealed or not report.rows_sealed:
            raise RuntimeError(f"the sealed side's trail does not verify: {report}")
    return rates


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audit", description=DESCRIPTION)
    parser.add_argument("--calls", type=int, default=200, help="calls per side per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per side (default %(default)s)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between seals (default %(default)s)")
    parser.add_argument("--era", choices=[era.name for era in ERAS], default=ERAS[0].name)
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1 or args.interval <= 0:
        parser.error("--calls and --rounds must be at least 1, --interval positive")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    era = next(era for era in ERAS if era.name == args.era)
    logging.getLogger("mcp_elicit").setLevel(logging.WARNING)  # schema migrations and calls of the throwaway stores
    print(f"{DESCRIPTION}\n{COUNTED.name} on {era.name}, {args.calls} calls x {args.rounds} rounds per side, "
          f"a seal every {args.interval:g} s on the sealed side")  # fmt: skip
    met = True
    for backend in backends:
        with ExitStack() as stack:
            if backend == "sqlite":
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-audit-")))
                urls = {side: f"sqlite://{folder / f'{index}.db'}" for index, side in enumerate((ON, OFF))}
            else:
                urls = {side: stack.enter_context(pg_schema(args.pg_url, "bench_audit")) for side in (ON, OFF)}
            rates = anyio.run(contest, urls, era, args.calls, args.rounds, args.interval)
        ratios = [on / off for on, off in zip(rates[ON], rates[OFF], strict=True)]
        ratio = statistics.median(ratios)
        ok = ratio >= TARGET_RATIO
        met = met and ok
        print(
            f"{backend:>8}: {statistics.median(rates[ON]):8.1f} calls/s sealer on, "
            f"{statistics.median(rates[OFF]):8.1f} off; ratio on/off median {ratio:.3f} "
            f"(rounds {min(ratios):.3f}..{max(ratios):.3f}) >= {TARGET_RATIO}: {verdict(ok)}"
        )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
