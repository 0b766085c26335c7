"""How soon the installed `mcp-elicit` answers: `--version`, and `decisions ls` on an empty SQLite store.

Each command runs `--rounds` times as a fresh process (stdout a pipe); the best wall time counts, against
the target and against a bare interpreter started in the same run (`python -c pass`), the floor no
command can go under. A command over its target usually imports what it does not use: see
`python -X importtime -m mcp_elicit ...` and tests/system/test_cli_startup.py.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench._common import verdict

COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))
TARGETS = {"--version": 0.3, "decisions ls": 0.6}
"""Seconds, best of the rounds."""


def best(argv: list[str], env: dict[str, str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=60)
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_start", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each command (default %(default)s)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
        env = {**os.environ, "MCP_ELICIT_STORE": f"sqlite://{Path(directory) / 'empty.db'}"}
        floor = best([sys.executable, "-c", "pass"], env, args.rounds)
        measured = {
            "--version": best([COMMAND, "--version"], env, args.rounds),
            "decisions ls": best([COMMAND, "decisions", "ls"], env, args.rounds),
        }
    header = f"{'command':<26}{'seconds':>9}{'x bare python':>15}{'target':>9}  result"
    print(header)
    print("-" * len(header))
    print(f"{'python -c pass':<26}{floor:>9.3f}{1:>15.1f}")
    for name, seconds in measured.items():
        ok = seconds <= TARGETS[name]
        print(f"{'mcp-elicit ' + name:<26}{seconds:>9.3f}{seconds / floor:>15.1f}{TARGETS[name]:>9.1f}  {verdict(ok)}")
    passed = all(seconds <= TARGETS[name] for name, seconds in measured.items())
    print(f"{verdict(passed)}: best of {args.rounds}, every command within its target")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
