"""What sealing the audit trail costs 50 clients through the balancer: the sealer on against off, same run.

Two clusters of `mcp-elicit serve --transport http` behind HAProxy with TLS (as `bench.load` runs them), each on
a store of its own: one given `MCP_ELICIT_AUDIT_KEYS`, so that each instance's sealer chains and signs what the
calls write every 5 s (the served default), the other without keys. Every client calls `create_ticket` (one
form question, one ticket) in a loop for `--seconds`; the two sides take turns, alternating which goes first
pair by pair, so that drift hits both. The verdict: the median of the pairs' calls/s ratios (sealer on over
off) is at least 0.9 (the issue's 10 %), with every call answered and every effect once; and the sealed side's
trail verifies sound, with rows sealed during the run.
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
from tests.helpers.balancer import Cluster, ClusterSpec, haproxy_missing, running_cluster, sign_in

from bench._common import DEFAULT_PG_URL, PG_ENV_VAR, select_backends, verdict
from bench.load import Cell, Settings, count_effects, run_cell, store_of, ticket_call
from mcp_elicit.client import Era
from mcp_elicit.model.audit_keys import AuditSigningKeys
from mcp_elicit.store import open_store

TARGET_RATIO = 0.9
DESCRIPTION = "50 clients through HAProxy, the audit sealer on against off, same run, alternating."
ON, OFF = "sealer on", "sealer off"


@contextmanager
def sides(store: str, pg_url: str, run_dir: Path, seed: bytes) -> Iterator[dict[str, tuple[Cluster, str]]]:
    """Both clusters running, each on a store of its own: their clusters and store URLs by side."""
    keys = (("MCP_ELICIT_AUDIT_KEYS", base64.b64encode(seed).decode()),)
    with ExitStack() as stack:
        running: dict[str, tuple[Cluster, str]] = {}
        for side, environ in ((OFF, ()), (ON, keys)):
            url = stack.enter_context(store_of(store, pg_url, run_dir / side.replace(" ", "-")))
            spec = ClusterSpec(url, instances=1, provider=False, environ=environ)
            running[side] = (stack.enter_context(running_cluster(spec, run_dir / side.replace(" ", "-"))), url)
        yield running


def run_store(store: str, pg_url: str, settings: Settings, era: Era) -> tuple[list[dict[str, Cell]], str]:
    """The pairs' cells by side, and what the sealed side's verify said."""
    run_dir = Path(tempfile.mkdtemp(prefix="mcp-elicit-audit-load-"))
    for side in (ON, OFF):
        (run_dir / side.replace(" ", "-")).mkdir()
    seed = secrets.token_bytes(32)
    pairs: list[dict[str, Cell]] = []
    trail = "?"
    try:
        with sides(store, pg_url, run_dir, seed) as running:
            headers = {side: {"Authorization": f"Bearer {anyio.run(sign_in, c)}"} for side, (c, _) in running.items()}
            for number in range(settings.pairs):
                pair: dict[str, Cell] = {}
                for side in (OFF, ON) if number % 2 == 0 else (ON, OFF):
                    print(f"running {store} {era} pair {number + 1} {side} ...", flush=True)
                    cluster = running[side][0]
                    cell = Cell(store, 1, era)
                    anyio.run(run_cell, cluster, headers[side], era, settings, cell, ticket_call(era))
                    count_effects(cluster, era, cell)
                    pair[side] = cell
                pairs.append(pair)
            trail = verified(running[ON][1], seed)
    finally:
        if pairs and all(cell.ok for pair in pairs for cell in pair.values()) and trail.startswith("sound"):
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            print(f"logs of {store} kept in {run_dir}", flush=True)
    return pairs, trail


def verified(store_url: str, seed: bytes) -> str:
    """What verify says of the sealed side's trail: "sound, ..." or why not. The instance's own sealer must have
    signed during the run; the rows of its last seconds are then sealed here, as its next tick would."""
    keys = AuditSigningKeys([seed])
    store = open_store(store_url)
    try:
        signed = store.verify_audit(keys.public(), max_exposure=None).last_checkpoint
        if signed is None:
            return "not sealed: the instance's sealer signed no checkpoint during the run"
        while store.seal_audit(keys).more:
            pass
        report = store.verify_audit(keys.public())
        if not report.sound:
            return f"broken: {report.breaks[0]}"
        return (
            f"sound: {report.rows_sealed} rows in {report.chains} chains, the instance's sealer signed "
            f"{signed.checkpoint_id} checkpoints"
        )
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audit_load", description=DESCRIPTION)
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per turn (default %(default)s)")
    parser.add_argument("--pairs", type=int, default=3, help="on/off pairs (default %(default)s)")
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="sqlite")
    parser.add_argument("--era", choices=("2025-11-25", "2026-07-28"), default="2025-11-25")
    parser.add_argument("--pg-url", default=os.environ.get(PG_ENV_VAR, DEFAULT_PG_URL))
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or args.pairs < 1:
        parser.error("--clients and --pairs must be at least 1, --seconds positive")
    missing = haproxy_missing()
    if missing is not None:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    stores = select_backends(args.store, args.pg_url)
    if stores is None:
        return 2
    settings = Settings(args.clients, args.seconds, 20_000, (args.era,), args.pairs)
    failed = False
    for store in stores:
        pairs, trail = run_store(store, args.pg_url, settings, args.era)
        ratios = [pair[ON].rate / pair[OFF].rate if pair[OFF].rate else 0.0 for pair in pairs]
        print(f"\n{store} {args.era}, {args.clients} clients, {args.seconds:g} s turns:")
        for number, (pair, ratio) in enumerate(zip(pairs, ratios, strict=True), start=1):
            shown = ", ".join(f"{side} {cell.rate:.1f} calls/s ({len(cell.errors)} errors, effects {cell.effects})"
                              for side, cell in pair.items())  # fmt: skip
            print(f"  pair {number}: {shown}; ratio {ratio:.3f}")
        ok = all(cell.ok for pair in pairs for cell in pair.values()) and trail.startswith("sound")
        median = statistics.median(ratios)
        met = ok and median >= TARGET_RATIO
        failed |= not met
        print(
            f"HTTP {args.clients} clients, {store}: calls/s with the sealer >= {TARGET_RATIO} x without (median of "
            f"{len(ratios)} pairs), every call once: {verdict(met)} (median {median:.3f}, spread "
            f"{min(ratios):.3f}-{max(ratios):.3f}; trail {trail})"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
