"""Run the test suite tier by tier and print each tier's wall time against its budget.

The tiers are folders of `tests/`, cheapest first, so a broken unit fails the run in seconds rather than after
the browser tests. Each tier is one pytest run (its workers shared out by file, as `make pytest` always did);
every tier runs even when an earlier one failed, so one run shows everything that is broken. The budgets are
the Contributing page's: a tier over its budget is reported, never failed (the machine may be loaded), and is
the signal to move work to a cheaper tier or make it cheaper.

The system tier runs beside the others rather than after them: its tests wait on processes, browsers and
balancers, the others' on loopback and the database, and neither keeps two cores busy alone, so the run takes
about as long as the system tier instead of the sum. A tier running beside another prints its output when it
ends, so that the two never interleave; its wall time is its own, measured while the other ran.

    python -m tools.tiers [--workers N] [TIER ...] [-- PYTEST_ARGS]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Tier:
    name: str
    budget_seconds: float
    holds: str
    shared_out: bool = True
    """Whether workers pay: starting them costs more than a tier of pure code takes in one process."""
    beside: bool = False
    """Runs beside the other tiers, which run one after another."""


TIERS = (
    Tier("unit", 30, "pure code: no store, no server", shared_out=False),
    Tier("store", 120, "the store on SQLite, PostgreSQL and the async engine"),
    Tier("runtime", 60, "tool bodies in process through Harness (or the SDK client for wire shapes), SQLite"),
    Tier("wire", 120, "the client kit, HTTP, pages, peers, in the test's process"),
    Tier(
        "system",
        300,
        "processes, crashes, HAProxy, Chromium, terminals, the code blocks of the README and docs",
        beside=True,
    ),
)
BY_NAME = {tier.name: tier for tier in TIERS}
SLOWEST = 10
"""The slowest tests each tier names after its run: where to look first when it is over its budget."""


@dataclass(frozen=True)
class Outcome:
    tier: Tier
    seconds: float
    exit_code: int

    @property
    def verdict(self) -> str:
        if self.exit_code == 5:
            return "no tests"
        return "passed" if self.exit_code == 0 else f"FAILED (exit {self.exit_code})"


def command(tier: Tier, workers: int, extra: list[str]) -> list[str]:
    sharing = ["-n", str(workers), "--dist", "loadfile"] if tier.shared_out else ["-n", "0"]
    return [*pytest_command(), *sharing, f"--durations={SLOWEST}", f"tests/{tier.name}", *extra]


def heading(tier: Tier, argv: list[str]) -> str:
    return f"\n== tier {tier.name}: {tier.holds}\n$ {shlex.join(argv)}"


def run(tier: Tier, workers: int, extra: list[str]) -> Outcome:
    argv = command(tier, workers, extra)
    print(heading(tier, argv), flush=True)
    started = time.monotonic()
    exit_code = subprocess.run(argv, cwd=ROOT, check=False).returncode  # noqa: S603 (our own pytest command)
    return Outcome(tier, time.monotonic() - started, exit_code)


def start_beside(tier: Tier, workers: int, extra: list[str]) -> Callable[[], Outcome]:
    """Starts the tier with its output kept aside; the function returned waits for it, prints its output and
    gives its outcome."""
    argv = command(tier, workers, extra)
    print(f"\n== tier {tier.name} started beside the others: its output follows when it ends", flush=True)
    output = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the function returned)
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)  # noqa: S603 (as above)

    def finish() -> Outcome:
        exit_code = process.wait()
        seconds = time.monotonic() - started
        print(heading(tier, argv), flush=True)
        with output:
            output.seek(0)
            shutil.copyfileobj(output, sys.stdout.buffer)
        sys.stdout.flush()
        return Outcome(tier, seconds, exit_code)

    return finish


def pytest_command() -> list[str]:
    """`pytest` from this interpreter, under `coverage run` when COVERAGE=1 asks for it."""
    if os.environ.get("COVERAGE") == "1":
        return [sys.executable, "-m", "coverage", "run", "-m", "pytest"]
    return [sys.executable, "-m", "pytest"]


def report(outcomes: list[Outcome], wall: float) -> str:
    lines = ["", "tier      wall     budget   result"]
    for outcome in outcomes:
        over = "  over budget" if outcome.seconds > outcome.tier.budget_seconds else ""
        lines.append(
            f"{outcome.tier.name:<9} {outcome.seconds:6.1f} s {outcome.tier.budget_seconds:5.0f} s   "
            f"{outcome.verdict}{over}"
        )
    lines.append(f"{'all':<9} {wall:6.1f} s (the tiers' walls add up to {sum(o.seconds for o in outcomes):.1f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in given:
        given, extra = given[: given.index("--")], given[given.index("--") + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4, help="pytest-xdist workers per tier (default 4)")
    parser.add_argument("tiers", nargs="*", metavar="TIER", help=f"tiers to run (default all: {', '.join(BY_NAME)})")
    options = parser.parse_args(given)
    unknown = [name for name in options.tiers if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown tier {', '.join(unknown)}: the tiers are {', '.join(BY_NAME)}")
    chosen = [BY_NAME[name] for name in options.tiers] or list(TIERS)
    started = time.monotonic()
    in_turn = [tier for tier in chosen if not tier.beside]
    beside = [start_beside(tier, options.workers, extra) for tier in chosen if tier.beside and in_turn]
    outcomes = [run(tier, options.workers, extra) for tier in in_turn or chosen]
    outcomes += [finish() for finish in beside]
    print(report(outcomes, time.monotonic() - started), flush=True)
    return max((outcome.exit_code for outcome in outcomes if outcome.exit_code != 5), default=0)


if __name__ == "__main__":
    sys.exit(main())
