"""What an approval gate costs, counted at the database driver: a call a standing grant lets through, and a gated
call answered at once, each against its baseline measured in the same run.

Four tools with the same trivial body, each an in-process `call_tool` (client and server over the SDK's
in-memory transport, the person answering at once), every call with a new argument so that no replay or
attach makes it look cheap:

- `ungated`: no gate, nothing asked. The baseline of
- `granted`: gated, with `Grants`; a session grant was given before counting, so each call runs without asking.
  The issue's target: one read more than `ungated` (the covering grant's lookup) and no commit more (the use's
  audit row and journal entry ride the operation's first commit).
- `ask`: ungated, the body asks one `flow.ask` (a one-field form). The baseline of
- `gated`: gated, no grants: the approval is asked and answered at once. The target: no more commits than `ask`.

Commits, statements and reads (SELECT statements, `bench.commits`' counts: on PostgreSQL a change's NOTIFY is
one too) are per call over `--calls` calls after `--warmup` calls, per era and store.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from bench._common import add_backend_arguments, pg_schema, select_backends, verdict
from bench.commits import ERAS, Count, PerCall, counting
from bench.overhead import text_of
from mcp_elicit import Gate, Grants
from mcp_elicit.approvals import GRANT_FIELD
from mcp_elicit.client import Accept, ElicitingClient, Era, FormRequest, Mode, UrlReply, UrlRequest
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState
from mcp_elicit.store import open_store

DESCRIPTION = "Reads and commits of a call a grant lets through and of a gated call, against their baselines."
TOOLS = ("ungated", "granted", "ask", "gated")
PAIRS = (("granted", "ungated"), ("gated", "ask"))
"""Each measured tool and its baseline."""


class Go(BaseModel):
    go: bool = Field(description="Go ahead")


def build(store_url: str) -> Elicitation:
    elicitation = Elicitation(open_store(store_url), request_state=RequestState(keys=[b"g" * 32]))
    elicitation.server("grants-bench")

    @elicitation.tool()
    async def ungated(flow: Flow, n: int) -> str:
        return f"done {n}"

    @elicitation.tool(gate=Gate(grants=Grants(session=timedelta(days=1))))
    async def granted(flow: Flow, n: int) -> str:
        return f"done {n}"

    @elicitation.tool()
    async def ask(flow: Flow, n: int) -> str:
        answer = await flow.ask(f"Go ahead with {n}?", Go, key="go")
        return f"done {n}" if isinstance(answer, Accepted) and answer.data.go else f"not done {n}"

    @elicitation.tool(gate=Gate())
    async def gated(flow: Flow, n: int) -> str:
        return f"done {n}"

    return elicitation


class Answering:
    """The person, at once: yes to a question, approval of a call (a session grant where one is offered)."""

    modes: frozenset[Mode] = frozenset({"form"})

    def __init__(self) -> None:
        self.asked = 0

    async def form(self, request: FormRequest) -> Accept:
        self.asked += 1
        fields = request.requested_schema.get("properties", {})
        if "go" in fields:
            return Accept({"go": True})
        return Accept({GRANT_FIELD: "session"} if GRANT_FIELD in fields else {})

    async def url(self, request: UrlRequest) -> UrlReply:
        raise RuntimeError(f"a form was expected, not {request!r}")


@dataclass(frozen=True, slots=True)
class Row(PerCall):
    backend: str
    era: str
    tool: str
    calls: int
    count: Count


class Calls:
    """Numbers calls across the whole run: a repeated argument would attach or replay, not start a new call."""

    def __init__(self) -> None:
        self._last = 0

    async def run(self, client: ElicitingClient, tool: str, calls: int) -> None:
        for _ in range(calls):
            self._last += 1
            result = await client.call_tool(tool, {"n": self._last})
            said = text_of(result.model_copy(update={"content": result.content[-1:]}))  # after what the model is told
            if said != f"done {self._last}":
                raise RuntimeError(f"{tool} returned {said!r}")


@asynccontextmanager
async def connected(store_url: str, era: Era) -> AsyncIterator[tuple[ElicitingClient, Elicitation, Answering]]:
    elicitation = build(store_url)
    person = Answering()
    try:
        async with ElicitingClient(elicitation.mcp_server, person, era=era) as client:
            yield client, elicitation, person
    finally:
        elicitation.close()


async def measure(backend: str, store_url: str, calls: int, warmup: int, tally: Calls) -> list[Row]:
    rows: list[Row] = []
    for era in ERAS:
        print(f"running {backend} {era} ...", flush=True)
        async with connected(store_url, era) as (client, elicitation, person):
            for tool in TOOLS:
                await tally.run(client, tool, warmup)  # the first `granted` call is asked, and grants the rest
                asked = person.asked
                async with counting(elicitation.store) as count:
                    await tally.run(client, tool, calls)
                if tool == "granted" and person.asked != asked:  # a grant that let nothing through costs nothing
                    raise RuntimeError(f"{backend} {era}: {person.asked - asked} granted calls were asked")
                rows.append(Row(backend, era, tool, calls, count))
    return rows


async def run(backends: Sequence[str], pg_url: str, calls: int, warmup: int) -> list[Row]:
    rows: list[Row] = []
    tally = Calls()
    for backend in backends:
        if backend == "sqlite":
            with tempfile.TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
                rows.extend(await measure(backend, f"sqlite://{Path(directory) / 'elicit.db'}", calls, warmup, tally))
        else:
            with pg_schema(pg_url, "bench_grants") as url:
                rows.extend(await measure(backend, url, calls, warmup, tally))
    return rows


def _ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline else "-"


def print_table(rows: list[Row], calls: int, warmup: int) -> bool:
    """The figures and the two targets; whether both were met on every era and store."""
    print(f"\nper in-process tools/call, counted at the driver over {calls} calls after {warmup} warm-up calls")
    header = (
        f"{'backend':<10}{'era':<12}{'tool':<10}{'vs':<10}{'commits':>8}{'base':>6}{'ratio':>7}"
        f"{'reads':>7}{'base':>6}{'+reads':>8}{'stmts':>7}{'base':>6}"
    )
    print(header)
    print("-" * len(header))
    found = {(row.backend, row.era, row.tool): row for row in rows}
    grant_met = gate_met = True
    for (backend, era, _), row in found.items():
        for tool, baseline_tool in PAIRS:
            if row.tool != tool:
                continue
            base = found[(backend, era, baseline_tool)]
            print(
                f"{backend:<10}{era:<12}{tool:<10}{baseline_tool:<10}{row.commits:>8.1f}{base.commits:>6.1f}"
                f"{_ratio(row.commits, base.commits):>7}{row.reads:>7.1f}{base.reads:>6.1f}"
                f"{row.reads - base.reads:>+8.1f}{row.statements:>7.1f}{base.statements:>6.1f}"
            )
            if tool == "granted":
                grant_met &= row.commits <= base.commits and row.reads - base.reads <= 1
            else:
                gate_met &= row.commits <= base.commits
    print(f"\na call a grant lets through: at most 1 read and 0 commits more than ungated: {verdict(grant_met)}")
    print(f"a gated call answered at once: no more commits than one flow.ask: {verdict(gate_met)}")
    return grant_met and gate_met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grants", description=DESCRIPTION)
    parser.add_argument("--calls", type=int, default=20, help="counted calls per row (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="calls before counting (default %(default)s)")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 1:
        parser.error("--calls and --warmup must be at least 1")
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    logging.getLogger("mcp_elicit").setLevel(logging.WARNING)
    rows = anyio.run(run, backends, args.pg_url, args.calls, args.warmup)
    print_table(rows, args.calls, args.warmup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
