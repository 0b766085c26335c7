"""A stdio server whose overlapping identical calls get 2026-07-28 still-waiting rounds with no URL flow.

`approve(n)` asks one form question. Two `approve` calls with the same arguments by the same (local)
principal are one operation (single flight): the first call carries the question, and an identical call
made meanwhile, each through its own server process on the shared store, is told "still waiting" (a short
long poll, then a state-only round) until the person answers the first one. Each start of the tool's
body, that is each round the server serves, appends the time to `$ROUNDS_LOG` when it is set, so a test
can tell when the waiting call sent a round.

    python still_waiting_server.py --store sqlite:///path/elicit.db      (or MCP_ELICIT_STORE)

(No `from __future__ import annotations`: the tool's `Flow` annotation, imported inside `serve`, must be
evaluated where the tool is defined.)
"""

import argparse
import os
import time
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, Field

from mcp_elicit.server import RequestState, Timing
from mcp_elicit.store import ENV_VAR, open_store

ROUNDS_LOG = "ROUNDS_LOG"
QUESTION = "Run job {n}?"
LONG_POLL = timedelta(seconds=0.05)
"""How long a round of the waiting call is held before "still waiting": short, so rounds are the client's pace."""


class Confirm(BaseModel):
    confirm: bool = Field(description="Run the job")


def rounds(log: Path) -> list[float]:
    """When each round logged in `log` started (the server's clock, `time.time()`)."""
    return [float(line) for line in log.read_text().split()] if log.exists() else []


def serve(store_url: str) -> None:
    from mcp.server.mcpserver import MCPServer

    from mcp_elicit.server import Accepted, Elicitation, Flow

    runtime = Elicitation(
        open_store(store_url), request_state=RequestState(keys=[b"w" * 32]), timing=Timing(long_poll=LONG_POLL)
    )
    server = MCPServer("still-waiting-server", request_state_security=runtime.request_state_security)
    runtime.attach(server)
    log = os.environ.get(ROUNDS_LOG)

    @runtime.tool()
    async def approve(flow: Flow, n: int) -> str:
        """Ask whether to run job n; identical calls meanwhile wait on the same question."""
        if log:
            with open(log, "a") as rounds_log:
                rounds_log.write(f"{time.time()}\n")
        answer = await flow.ask(QUESTION.format(n=n), Confirm, key="confirm")
        if isinstance(answer, Accepted) and answer.data.confirm:
            return f"job {n} run"
        return f"job {n} not run: {type(answer).__name__}"

    try:
        server.run("stdio")
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", default=os.environ.get(ENV_VAR), help=f"default: ${ENV_VAR}")
    args = parser.parse_args()
    if args.store is None:
        parser.error(f"give --store or set {ENV_VAR}")
    serve(args.store)


if __name__ == "__main__":
    main()
