"""A server process for the single-flight tests: a slow journaled step and an instant one, with or without
a question first.

`ponder` spends `--ponder` seconds between its answer and its step without committing anything.

The steps stand for an external system: each run appends `step n key` (the step, the tool's argument and
the step's `flow.idempotency_key`) to `keys` in the workspace, and returns a receipt that is new on every
run, so two runs of one operation's step never give the same result. `work` sleeps `--work-seconds`; with
`--stall` it stalls instead, after writing `stalled`, to be SIGKILLed while it holds the step.

`die_after_round` SIGKILLs the process itself once a 2026-07-28 round is committed and its response is about to
leave: the round is durable, and nobody ever sees it.

Several processes may share one store (`--store`) and one workspace; they share the requestState keys,
so a 2026-07-28 round can be answered by any of them. Run it as `python -m tests.helpers.overlap_server ...`, or
call `serve` in a fresh process (the tests fork it from a preloaded interpreter); `build` registers the
same tools on an `Elicitation` made elsewhere (the tests' authenticated in-thread server).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
import uuid
from datetime import timedelta
from pathlib import Path

import anyio
import uvicorn
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, RequestState, Timing
from mcp_elicit.server.eras.mrtr import DEFAULT_REASK_AFTER
from mcp_elicit.store import open_store

KEYS = [b"o" * 32]
DEFAULT_LEASE = 10.0


class Confirm(BaseModel):
    confirm: bool = Field(description="Run the job")


class Works:
    """The external system behind the steps: it logs every run with the idempotency key it was given.

    `work` is slow (the calls overlap while it runs); `seal` is instant and follows it, so every call
    waiting on `work` reaches `seal` at the same moment: a claim taken without looking at the journal
    again runs it twice.
    """

    def __init__(self, root: Path, *, seconds: float = 0.5, stall: bool = False, ponder: float = 0.0) -> None:
        self.root = root
        self.seconds = seconds
        self.stall = stall
        self.ponder = ponder

    def work(self, n: int, idempotency_key: str) -> str:
        self._log("work", n, idempotency_key)
        if self.stall:
            (self.root / "stalled").write_text(idempotency_key)
            time.sleep(3600)
        time.sleep(self.seconds)
        return f"receipt-{uuid.uuid4().hex[:12]}"

    def seal(self, n: int, idempotency_key: str) -> str:
        self._log("seal", n, idempotency_key)
        return f"seal-{uuid.uuid4().hex[:8]}"

    def arrived(self, n: int) -> None:
        with (self.root / "bodies").open("a") as log:
            log.write(f"{n}\n")

    def _log(self, step: str, n: int, idempotency_key: str) -> None:
        with (self.root / "keys").open("a") as log:
            log.write(f"{step} {n} {idempotency_key}\n")


def runs(root: Path, n: int, step: str = "work") -> list[str]:
    """The idempotency keys `step` of the calls with argument `n` ran with, one per run, in order."""
    path = root / "keys"
    lines = path.read_text().splitlines() if path.exists() else []
    return [key for name, number, key in (line.split(" ", 2) for line in lines) if (name, number) == (step, str(n))]


def bodies(root: Path, n: int) -> int:
    """How often a body of the calls with argument `n` started (each 2026-07-28 round runs it again)."""
    path = root / "bodies"
    return path.read_text().split().count(str(n)) if path.exists() else 0


def build(elicitation: Elicitation, works: Works) -> None:
    @elicitation.tool()
    async def compute(flow: Flow, n: int) -> str:
        """A slow journaled step, then an instant one."""
        works.arrived(n)
        receipt = await flow.step("work", works.work, n, flow.idempotency_key("work"))
        seal = await flow.step("seal", works.seal, n, flow.idempotency_key("seal"))
        return f"computed {n}: {receipt} {seal}"

    @elicitation.tool()
    async def approve(flow: Flow, n: int) -> str:
        """A question to the person, then the slow step and the instant one."""
        answer = await flow.ask(f"Run job {n}?", Confirm, key="confirm")
        if not (isinstance(answer, Accepted) and answer.data.confirm):
            return f"job {n} not run: {type(answer).__name__}"
        receipt = await flow.step("work", works.work, n, flow.idempotency_key("work"))
        seal = await flow.step("seal", works.seal, n, flow.idempotency_key("seal"))
        return f"approved {n}: {receipt} {seal}"

    @elicitation.tool()
    async def ponder(flow: Flow, n: int) -> str:
        """A question, then `Works.ponder` seconds of work outside any step (nothing commits), then a step."""
        answer = await flow.ask(f"Ponder job {n}?", Confirm, key="confirm")
        await anyio.sleep(works.ponder)
        seal = await flow.step("seal", works.seal, n, flow.idempotency_key("seal"))
        return f"pondered {n}: {type(answer).__name__} {seal}"


def dying_after_round(app: ASGIApp) -> ASGIApp:
    """The app, SIGKILLed the moment a response carrying a round's input requests is about to be sent."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_or_die(message: Message) -> None:
            if message["type"] == "http.response.body" and b'"inputRequests"' in message.get("body", b""):
                os.kill(os.getpid(), signal.SIGKILL)
            await send(message)

        await app(scope, receive, send_or_die)

    return guarded


def serve(
    port: int,
    store: str,
    workspace: Path,
    *,
    lease: float = DEFAULT_LEASE,
    long_poll: float = 0.5,
    work_seconds: float = 0.5,
    stall: bool = False,
    ponder: float = 0.0,
    reask_after: float = DEFAULT_REASK_AFTER.total_seconds(),
    die_after_round: bool = False,
) -> None:
    timing = Timing(
        lease=timedelta(seconds=lease),
        long_poll=timedelta(seconds=long_poll),
        reask_after=timedelta(seconds=reask_after),
    )
    (workspace / "lease").write_text(str(float(lease)))
    elicitation = Elicitation(
        open_store(store),
        request_state=RequestState(keys=KEYS),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        timing=timing,
    )
    server = elicitation.server("overlap-server")
    build(elicitation, Works(workspace, seconds=work_seconds, stall=stall, ponder=ponder))
    app: ASGIApp = server.streamable_http_app(host="127.0.0.1")
    if die_after_round:
        app = dying_after_round(app)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--lease", type=float, default=DEFAULT_LEASE, help="seconds a step claim lasts unrenewed")
    parser.add_argument("--long-poll", type=float, default=0.5, help="seconds a 2026-07-28 round may be held")
    parser.add_argument("--work-seconds", type=float, default=0.5)
    parser.add_argument("--stall", action="store_true", help="the step stalls for an hour instead of working")
    parser.add_argument("--ponder", type=float, default=0.0, help="seconds `ponder` waits between answer and step")
    args = parser.parse_args()
    serve(
        args.port,
        args.store,
        args.workspace,
        lease=args.lease,
        long_poll=args.long_poll,
        work_seconds=args.work_seconds,
        stall=args.stall,
        ponder=args.ponder,
    )


if __name__ == "__main__":
    main()
