"""Run the test suite tier by tier and print each tier's wall time against its budget.

The tiers are folders of `tests/`, cheapest first, so a broken unit fails the run in seconds rather than after
the browser tests. Each tier is one pytest run (its workers shared out by file, as `make pytest` always did);
every tier runs even when an earlier one failed, so one run shows everything that is broken. The budgets are
the Contributing page's: a tier over its budget is reported, never failed (the machine may be loaded), and is
the signal to move work to a cheaper tier or make it cheaper.

    python -m tools.tiers [--workers N] [TIER ...] [-- PYTEST_ARGS]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
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
    workers: float = 1.0
    """Workers per `--workers`: above 1 for a tier that waits (on sockets, rounds, timers) more than it computes,
    so more files wait at once; below 1 for one whose processes would only queue for the cores."""

    def worker_count(self, workers: int) -> int:
        return max(1, round(self.workers * workers))


TIERS = (
    Tier("unit", 30, "pure code: no store, no server", shared_out=False),
    Tier("store", 120, "the store on SQLite, PostgreSQL and the async engine"),
    Tier("runtime", 60, "tool bodies in process through Harness (or the SDK client for wire shapes), SQLite"),
    Tier("wire", 120, "the client kit, HTTP, pages, peers, in the test's process"),
    Tier(
        "system",
        300,
        "processes, crashes, HAProxy, Chromium, terminals, the code blocks of the README and docs",
        workers=0.75,
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


def run(tier: Tier, workers: int, extra: list[str]) -> Outcome:
    sharing = ["-n", str(tier.worker_count(workers)), "--dist", "loadfile"] if tier.shared_out else ["-n", "0"]
    command = [*pytest_command(), *sharing, f"--durations={SLOWEST}", f"tests/{tier.name}", *extra]
    print(f"\n== tier {tier.name}: {tier.holds}\n$ {shlex.join(command)}", flush=True)
    started = time.monotonic()
    exit_code = subprocess.run(command, cwd=ROOT, check=False).returncode  # noqa: S603 (our own pytest command)
    return Outcome(tier, time.monotonic() - started, exit_code)


def pytest_command() -> list[str]:
    """`pytest` from this interpreter, under `coverage run` when COVERAGE=1 asks for it."""
    if os.environ.get("COVERAGE") == "1":
        return [sys.executable, "-m", "coverage", "run", "-m", "pytest"]
    return [sys.executable, "-m", "pytest"]


def report(outcomes: list[Outcome]) -> str:
    lines = ["", "tier      wall     budget   result"]
    for outcome in outcomes:
        over = "  over budget" if outcome.seconds > outcome.tier.budget_seconds else ""
        lines.append(
            f"{outcome.tier.name:<9} {outcome.seconds:6.1f} s {outcome.tier.budget_seconds:5.0f} s   "
            f"{outcome.verdict}{over}"
        )
    lines.append(f"{'all':<9} {sum(outcome.seconds for outcome in outcomes):6.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in given:
        given, extra = given[: given.index("--")], given[given.index("--") + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--workers", type=int, default=4, help="pytest-xdist workers (default 4), times each tier's share"
    )
    parser.add_argument("tiers", nargs="*", metavar="TIER", help=f"tiers to run (default all: {', '.join(BY_NAME)})")
    options = parser.parse_args(given)
    unknown = [name for name in options.tiers if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown tier {', '.join(unknown)}: the tiers are {', '.join(BY_NAME)}")
    chosen = [BY_NAME[name] for name in options.tiers] or list(TIERS)
    outcomes = [run(tier, options.workers, extra) for tier in chosen]
    print(report(outcomes), flush=True)
    return max((outcome.exit_code for outcome in outcomes if outcome.exit_code != 5), default=0)


if __name__ == "__main__":
    sys.exit(main())
