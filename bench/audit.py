"""What sealing the audit trail costs the calls: in-process tool calls with the sealer running against without.

Two stores of the same engine, each with its own in-process client and server (`bench._overhead_server`, the
counted call `step-ask-step`, 2025-11-25 by default). On one side the audit sealer (`AuditSealer`, the served
app's background task) runs on the same event loop for the whole of each of its rounds: it seals as the round
starts (the rows its previous round wrote) and then every `--interval` seconds (1 s by default: five times as
often as the served default), so that each round pays for sealing about as many rows as it writes, however
short the round; on the other it does not run. Sides alternate round by round, the first side swapping each
round, so drift hits both. The verdict: the median ratio of calls/s (sealer on over off) is at least 0.9 (the
issue's 10 %). After the run the sealed side's trail must verify sound, every row covered.

`--preload N` gives each store N chains, sealed, before the timing: a seal signs only the heads it moves, so
the time a seal takes (printed: the median of the seals that chained rows during the rounds) does not grow with
N. Compare `--preload 0` with `--preload 20000`.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
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
from mcp_elicit.store import open_store
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.audit import SealResult
from mcp_elicit.store.url import sqlite_path

TARGET_RATIO = 0.9
DESCRIPTION = "In-process tool calls with the audit sealer running against without, same run, alternating."
ON, OFF = "sealer on", "sealer off"


class TimedSealer(AuditSealer):
    """The served app's sealer, timing each round that chained rows."""

    def __init__(
        self, store: AsyncStore, keys: AuditSigningKeys, interval: timedelta, times: list[tuple[float, int]]
    ) -> None:
        super().__init__(store, keys, interval)
        self._times = times

    async def seal(self) -> SealResult | None:
        start = time.perf_counter()
        result = await super().seal()
        if result is not None and result.rows:
            self._times.append((time.perf_counter() - start, result.rows))
        return result


def preload(url: str, chains: int, keys: AuditSigningKeys) -> None:
    """`chains` chains of one row each, written straight into the audit table and sealed, before the timing."""
    if not chains:
        return
    store = open_store(url)  # migrates the new store
    try:
        rows = [("operation", f"preload-{n}", None, "open", "system:bench", "preloaded", "{}") for n in range(chains)]
        insert = (
            "INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, {now})"
        )
        if url.startswith("sqlite"):
            with sqlite3.connect(sqlite_path(url)) as lite:
                stamp = time.time_ns() // 1000
                lite.executemany(insert.replace("%s", "?").format(now=stamp), rows)
        else:
            import psycopg

            with psycopg.connect(url) as pg, pg.cursor() as cursor:
                cursor.executemany(insert.format(now="now()"), rows)
        while store.seal_audit(keys).rows:
            pass
    finally:
        store.close()


@asynccontextmanager
async def sealing(
    elicitation: Elicitation, keys: AuditSigningKeys, interval: float, times: list[tuple[float, int]]
) -> AsyncIterator[AuditSealer]:
    """The sealer running beside the block, as the served app's lifespan runs it, sealing first what waits."""
    sealer = TimedSealer(AsyncStore(elicitation.store), keys, timedelta(seconds=interval), times)

    async def run() -> None:
        await sealer.seal()
        await sealer.run()

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        try:
            yield sealer
        finally:
            group.cancel_scope.cancel()


async def contest(
    urls: dict[str, str],
    era: Era,
    calls: int,
    rounds: int,
    interval: float,
    keys: AuditSigningKeys,
    times: list[tuple[float, int]],
) -> dict[str, list[float]]:
    """Calls per second of each side, one figure per round; the seal times of the sealed side in `times`."""
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
                        await running.enter_async_context(sealing(elicitation, keys, interval, times))
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
    parser.add_argument(
        "--preload", type=int, default=0, metavar="N", help="chains sealed in each store before timing (default 0)"
    )
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1 or args.interval <= 0 or args.preload < 0:
        parser.error("--calls and --rounds must be at least 1, --interval positive, --preload not negative")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    era = next(era for era in ERAS if era.name == args.era)
    logging.getLogger("mcp_elicit").setLevel(logging.WARNING)  # schema migrations and calls of the throwaway stores
    print(f"{DESCRIPTION}\n{COUNTED.name} on {era.name}, {args.calls} calls x {args.rounds} rounds per side, "
          f"a seal every {args.interval:g} s on the sealed side, {args.preload:,} chains preloaded")  # fmt: skip
    met = True
    for backend in backends:
        with ExitStack() as stack:
            if backend == "sqlite":
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-audit-")))
                urls = {side: f"sqlite://{folder / f'{index}.db'}" for index, side in enumerate((ON, OFF))}
            else:
                urls = {side: stack.enter_context(pg_schema(args.pg_url, "bench_audit")) for side in (ON, OFF)}
            keys = AuditSigningKeys([secrets.token_bytes(32)])
            for url in urls.values():
                preload(url, args.preload, keys)
            times: list[tuple[float, int]] = []
            rates = anyio.run(contest, urls, era, args.calls, args.rounds, args.interval, keys, times)
        ratios = [on / off for on, off in zip(rates[ON], rates[OFF], strict=True)]
        ratio = statistics.median(ratios)
        ok = ratio >= TARGET_RATIO
        met = met and ok
        print(
            f"{backend:>8}: {statistics.median(rates[ON]):8.1f} calls/s sealer on, "
            f"{statistics.median(rates[OFF]):8.1f} off; ratio on/off median {ratio:.3f} "
            f"(rounds {min(ratios):.3f}..{max(ratios):.3f}) >= {TARGET_RATIO}: {verdict(ok)}"
        )
        if times:
            took = statistics.median(seconds for seconds, _ in times) * 1000
            rows = statistics.median(rows for _, rows in times)
            per_row = statistics.median(seconds / rows for seconds, rows in times) * 1e6
            print(
                f"{'':>8}  a seal took {took:.2f} ms for {rows:g} rows, {per_row:.1f} us a row (median of {len(times)})"
            )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
