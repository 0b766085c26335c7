"""Where a counted call's time goes, in process: self time per layer, mcp-elicit against the bare SDK.

The counted call (`step → ask (form) → step`, the form accepted at once) runs on one event loop with its
client, as in `bench.inprocess`, under cProfile. Every function's own time (not its callees') is put in
the layer its code belongs to: the MCP SDK, mcp-elicit's runtime (`mcp_elicit` outside the store), its
store's Python, the database driver (sqlite3's C calls, psycopg), pydantic, the event loop and anyio,
waiting (the event loop idle in `epoll`, where PostgreSQL's round trips show up), and the rest (the
standard library: json, hashlib, logging...). The same for the bare SDK's tool of the same shape; the
difference is what mcp-elicit adds, layer by layer.

cProfile slows Python-heavy code more than C calls and waits, so the layers are for comparing with each
other and with the other side, not for adding up to `bench.inprocess`'s wall times.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import anyio

from bench._common import add_backend_arguments, select_backends
from bench._overhead_server import COUNTED
from bench.inprocess import Calls, connected, postgres_side, sqlite_side
from bench.overhead import ERAS, SIDES
from bench.store import Side
from mcp_elicit.store.sqlite import Synchronous

LAYERS = (
    "MCP SDK",
    "mcp-elicit runtime",
    "mcp-elicit store",
    "driver",
    "pydantic",
    "event loop, anyio",
    "waiting (loop idle)",
    "other",
)
DESCRIPTION = "Where a counted call's time goes, per layer, mcp-elicit against the bare SDK (cProfile)."


def layer(filename: str, name: str) -> str:
    if filename == "~":  # a built-in: named by what it is a method of
        for marker, found in (
            ("sqlite3", "driver"),
            ("epoll", "waiting (loop idle)"),
            ("pydantic", "pydantic"),
            ("_asyncio", "event loop, anyio"),
            ("_contextvars", "event loop, anyio"),
        ):
            if marker in name:
                return found
        return "other"
    for marker, found in (
        ("/mcp_elicit/store/", "mcp-elicit store"),
        ("/mcp_elicit/", "mcp-elicit runtime"),
        ("/psycopg", "driver"),
        ("/sqlite3/", "driver"),
        ("/mcp/", "MCP SDK"),
        ("/mcp_types/", "MCP SDK"),
        ("/pydantic", "pydantic"),
        ("/asyncio/", "event loop, anyio"),
        ("/anyio/", "event loop, anyio"),
        ("/selectors.py", "event loop, anyio"),
        ("/sniffio/", "event loop, anyio"),
    ):
        if marker in filename:
            return found
    return "other"


def by_layer(profile: cProfile.Profile, calls: int) -> dict[str, float]:
    """Microseconds of own time per call in each layer."""
    totals: dict[str, float] = defaultdict(float)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (filename, _, name), (_, _, own, _, _) in stats.items():
        if name != "<built-in method gc.collect>":  # the bench's own, between blocks of calls
            totals[layer(filename, name)] += own
    return {name: totals[name] / calls * 1e6 for name in LAYERS}


async def measure(url: str, era_name: str, calls: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    era = next(era for era in ERAS if era.name == era_name)
    tally = Calls()
    layers: dict[str, dict[str, float]] = {}
    wall: dict[str, float] = {}
    async with connected(url, era) as (client, _):
        for side in SIDES:
            await tally.block(client, COUNTED, era.tool(COUNTED, side), max(20, calls // 4))
        for side in SIDES:
            profile = cProfile.Profile()
            started = time.perf_counter()
            profile.enable()
            await tally.block(client, COUNTED, era.tool(COUNTED, side), calls)
            profile.disable()
            wall[side] = (time.perf_counter() - started) / calls * 1e6
            layers[side] = by_layer(profile, calls)
    return layers, wall


async def run(backends: Sequence[str], pg_url: str, calls: int) -> None:
    plans: list[tuple[str, Callable[[], AbstractContextManager[tuple[str, Side]]]]] = []
    if "sqlite" in backends:
        plans.append(("sqlite", lambda: sqlite_side(Synchronous.NORMAL)))
    if "postgres" in backends:
        plans.append(("postgres", lambda: postgres_side(pg_url)))
    for backend, side in plans:
        for era in ERAS:
            with side() as (url, _):
                layers, wall = await measure(url, era.name, calls)
            sdk, elicit = SIDES
            print(f"\n{backend} {era.name}, {COUNTED.name}: own time per call, us (cProfile, {calls} calls a side)")
            print(f"  {'layer':<22}{sdk:>10}{elicit:>12}{'added':>9}")
            for name in LAYERS:
                bare, ours = layers[sdk][name], layers[elicit][name]
                print(f"  {name:<22}{bare:>10,.0f}{ours:>12,.0f}{ours - bare:>+9,.0f}")
            bare_total, our_total = sum(layers[sdk].values()), sum(layers[elicit].values())
            print(f"  {'all (profiled)':<22}{bare_total:>10,.0f}{our_total:>12,.0f}{our_total - bare_total:>+9,.0f}")
            print(
                f"  {'wall (profiled)':<22}{wall[sdk]:>10,.0f}{wall[elicit]:>12,.0f}{wall[elicit] - wall[sdk]:>+9,.0f}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.where", description=DESCRIPTION)
    parser.add_argument("--calls", type=int, default=300, help="profiled calls per side (default %(default)s)")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    logging.getLogger("mcp_elicit").setLevel(logging.WARNING)  # schema migrations of each throwaway store
    anyio.run(run, backends, args.pg_url, args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
