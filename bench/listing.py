"""`mcp-elicit decisions ls` over 10,000 decisions, into a pipe and as JSON, on both stores.

The target is the command's own work in under a second: opening the store, reading the keyset pages,
writing every row, counting. That is timed in-process, through the command itself. The whole command
is timed as a subprocess too, next to `mcp-elicit --help` in the same run: the difference is the listing,
the rest is the interpreter starting and importing. The store's last page of 100 (past a cursor) is timed
against its first: keyset pages cost the same wherever they start, where an offset would read every row
before them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from typer.testing import CliRunner

from bench._common import FORM_SCHEMA, add_backend_arguments, pg_schema, select_backends, verdict
from mcp_elicit.cli import app
from mcp_elicit.model import DecisionOrigin, Operator, Principal, new_form_decision, new_operation
from mcp_elicit.store import Store, open_store, utc_now

DESCRIPTION = "decisions ls over many decisions: in-process and as a command, into a pipe and as JSON."
TARGET_SECONDS = 1.0
DEEP_TARGET = 2.0
"""The last page of the listing may cost at most this many times the first."""
PAGE = 100
COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))
PRINCIPALS = [Principal(f"user-{number}", "bench-client") for number in range(4)]


@dataclass(frozen=True, slots=True)
class Row:
    backend: str
    case: str
    seconds: float
    target: str = ""
    ok: bool | None = None


def populate(store: Store, count: int) -> None:
    """`count` waiting decisions of a few principals, a few operations each, all in one transaction."""
    now = utc_now()

    def work() -> None:
        operations = [
            store.create_operation(
                new_operation(
                    principal,
                    method="tools/call",
                    target="deploy",
                    request_digest="sha256:" + uuid.uuid4().hex,
                    now=now,
                    ttl=timedelta(days=1),
                )
            )
            for principal in PRINCIPALS
        ]
        for number in range(count):
            operation = operations[number % len(operations)]
            origin = DecisionOrigin(
                operation_id=operation.operation_id, key=f"approve_{number}", principal=operation.principal,
                origin_method=operation.method, origin_request_digest=operation.request_digest,
            )  # fmt: skip
            store.create_decision(
                new_form_decision(
                    origin, message=f"Deploy build {number} to production?", requested_schema=FORM_SCHEMA,
                    now=now + timedelta(microseconds=number), ttl=timedelta(hours=12),
                )
            )  # fmt: skip

    store.atomically(work)


def in_process(url: str, args: Sequence[str], check: Callable[[str], None]) -> float:
    runner = CliRunner()
    started = time.perf_counter()
    result = runner.invoke(app, ["decisions", "ls", "--store", url, *args])
    elapsed = time.perf_counter() - started
    if result.exit_code != 0:
        raise RuntimeError(f"decisions ls {' '.join(args)} exited {result.exit_code}: {result.stderr}")
    check(result.stdout)
    return elapsed


def as_command(command: Sequence[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([COMMAND, *command], capture_output=True, text=True, check=False, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"mcp-elicit {' '.join(command)} exited {done.returncode}: {done.stderr}")
    return elapsed


def tsv_rows(expected: int) -> Callable[[str], None]:
    def check(stdout: str) -> None:
        if stdout.count("\n") != expected + 1:
            raise RuntimeError(f"expected a header and {expected} lines, got {stdout.count(chr(10))} lines")

    return check


def json_rows(expected: int) -> Callable[[str], None]:
    def check(stdout: str) -> None:
        if len(json.loads(stdout)) != expected:
            raise RuntimeError(f"expected {expected} decisions in the JSON array")

    return check


def median(measure: Callable[[], float], rounds: int) -> float:
    return statistics.median(measure() for _ in range(rounds))


def page_seconds(store: Store, after: str | None, times: int = 21) -> float:
    def once() -> float:
        started = time.perf_counter()
        page = store.decision_page(Operator(), after=after, limit=PAGE)
        elapsed = time.perf_counter() - started
        if page.rows != PAGE:
            raise RuntimeError(f"a page of {page.rows} decisions, not {PAGE}")
        return elapsed

    return median(once, times)


def run(backend: str, url: str, count: int, rounds: int) -> list[Row]:
    store = open_store(url)
    try:
        populate(store, count)
        deep = store.decision_page(Operator(), limit=count - PAGE).after
        if deep is None:
            raise RuntimeError(f"{count} decisions make no page after the first {count - PAGE}")
        first, last = page_seconds(store, None), page_seconds(store, deep)
    finally:
        store.close()
    every = ["--limit", str(count)]
    tsv = median(lambda: in_process(url, every, tsv_rows(count)), rounds)
    as_json = median(lambda: in_process(url, [*every, "--json"], json_rows(count)), rounds)
    startup = median(lambda: as_command(["--help"]), rounds)
    command_tsv = median(lambda: as_command(["decisions", "ls", "--store", url, *every]), rounds)
    command_json = median(lambda: as_command(["decisions", "ls", "--store", url, *every, "--json"]), rounds)
    within = f"<= {TARGET_SECONDS:.1f} s"
    return [
        Row(backend, f"ls --limit {count} (pipe), in-process", tsv, within, tsv <= TARGET_SECONDS),
        Row(backend, f"ls --limit {count} --json, in-process", as_json, within, as_json <= TARGET_SECONDS),
        Row(backend, f"Store.decision_page: the first {PAGE}", first),
        Row(
            backend,
            f"Store.decision_page: the last {PAGE} (after=)",
            last,
            f"<= {DEEP_TARGET:.0f}x first",
            last <= DEEP_TARGET * first,
        ),
        Row(backend, "mcp-elicit --help (startup), command", startup),
        Row(backend, f"ls --limit {count} (pipe), command", command_tsv),
        Row(backend, f"ls --limit {count} --json, command", command_json),
        Row(backend, "  the pipe listing less startup", command_tsv - startup),
        Row(backend, "  the JSON listing less startup", command_json - startup),
    ]


def print_table(rows: list[Row], count: int, rounds: int) -> None:
    print(f"\ndecisions ls over {count:,} decisions (median of {rounds} runs each)")
    header = f"{'backend':<10}{'case':<46}{'seconds':>9}{'target':>16}  result"
    print(header)
    print("-" * len(header))
    for row in rows:
        result = "" if row.ok is None else verdict(row.ok)
        print(f"{row.backend:<10}{row.case:<46}{row.seconds:>9.3f}{row.target:>16}  {result}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.listing", description=DESCRIPTION)
    parser.add_argument("--count", type=int, default=10_000, help="decisions in the store (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each case (default %(default)s)")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.count <= PAGE or args.rounds < 1:
        parser.error(f"--count must exceed {PAGE} and --rounds be at least 1")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    rows: list[Row] = []
    for backend in backends:
        print(f"running {backend} ...", flush=True)
        if backend == "sqlite":
            with tempfile.TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
                rows.extend(run(backend, f"sqlite://{Path(directory) / 'elicit.db'}", args.count, args.rounds))
        else:
            with pg_schema(args.pg_url, "bench_listing") as url:
                rows.extend(run(backend, url, args.count, args.rounds))
    print_table(rows, args.count, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
