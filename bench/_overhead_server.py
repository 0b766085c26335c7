"""The server process for `bench.overhead`: one MCPServer holding the bare SDK tools and the mcp-elicit tool.

Both contenders live in this one process, on one event loop behind one uvicorn listener, so transport,
interpreter and loop cost them alike and the only difference left is the tool body and what wraps it. It
runs apart from the client so the client's own CPU work never shares a GIL with the server being timed.

A control tool reports the process's CPU time, so the client can tell server work from waiting even when
other load on the machine stretches wall times, and starts and stops a `cProfile` of the event-loop thread,
so the client can profile exactly the calls it chooses.

Logging is set up as a deployed server's would be (warnings and up, to stderr, which the client sends to a
file): whatever a call logs is part of what it costs.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import time
from typing import Literal

import uvicorn
from mcp.server.elicitation import AcceptedElicitation, render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from pydantic import BaseModel, Field

from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy
from mcp_elicit.store import open_store

KEY = "approve_change"
SDK_LEGACY_TOOL = "sdk_elicit"
SDK_ROUNDS_TOOL = "sdk_rounds"
ELICIT_TOOL = "elicit_ask"
CONTROL_TOOL = "bench_control"
ANSWER: dict[str, str | int | float | bool | list[str] | None] = {"approve": True, "note": "ship it"}


class Approval(BaseModel):
    approve: bool = Field(description="Apply the change")
    note: str = Field(default="", max_length=80, description="A short note for the team")


def message(n: int) -> str:
    return f"Apply change {n}?"


def outcome(n: int, approval: Approval | None) -> str:
    return f"applied {n}: {approval.note}" if approval is not None and approval.approve else f"not applied {n}"


SDK_SCHEMA = render_elicitation_schema(Approval)
"""Rendered once, as an author writing the 2026-07-28 round by hand would (`ctx.elicit` renders per call)."""


def build(store_url: str, port: int) -> tuple[Elicitation, uvicorn.Config]:
    elicitation = Elicitation(
        open_store(store_url), keys=[b"x" * 32], identity=IdentityPolicy(allow_unauthenticated_loopback=True)
    )
    server = elicitation.server("overhead-bench")
    profiler: list[cProfile.Profile] = []

    @server.tool(name=SDK_LEGACY_TOOL)
    async def sdk_elicit(n: int, ctx: Context) -> str:
        """The bare SDK on 2025-11-25: `ctx.elicit` on the live call."""
        result = await ctx.elicit(message(n), Approval)
        return outcome(n, result.data if isinstance(result, AcceptedElicitation) else None)

    @server.tool(name=SDK_ROUNDS_TOOL)
    async def sdk_rounds(n: int, ctx: Context) -> str | InputRequiredResult:
        """The bare SDK on 2026-07-28: one hand-written `InputRequiredResult` round, answer read on the retry."""
        responses = ctx.input_responses
        if not responses:
            params = ElicitRequestFormParams(message=message(n), requested_schema=SDK_SCHEMA)
            return InputRequiredResult(input_requests={KEY: ElicitRequest(params=params)}, request_state=KEY)
        response = responses.get(KEY)
        if isinstance(response, ElicitResult) and response.action == "accept":
            return outcome(n, Approval.model_validate(response.content))
        return outcome(n, None)

    @elicitation.tool(name=ELICIT_TOOL)
    async def elicit_ask(flow: Flow, n: int) -> str:
        """mcp-elicit: one durable form decision, the same body on every era."""
        answer = await flow.ask(message(n), Approval, key=KEY)
        return outcome(n, answer.data if isinstance(answer, Accepted) else None)

    @server.tool(name=CONTROL_TOOL)
    async def bench_control(action: Literal["cpu", "profile", "dump"], path: str = "") -> str:
        """This process's CPU seconds so far; or start a profile of this loop's thread; or stop it into `path`."""
        if action == "cpu":
            return repr(time.process_time())
        if action == "profile":
            profiler[:] = [cProfile.Profile()]
            profiler[0].enable()
            return "started"
        if not profiler:
            return "not started"
        running = profiler.pop()
        running.disable()
        running.dump_stats(path)
        return f"wrote {path}"

    config = uvicorn.Config(
        server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
    )
    return elicitation, config


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._overhead_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True, help="store URL (sqlite://... or postgresql://...)")
    parser.add_argument("--cpu", type=int, help="run on this CPU only (set before any thread starts)")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    elicitation, config = build(args.store, args.port)
    try:
        uvicorn.Server(config).run()
    finally:
        elicitation.close()


if __name__ == "__main__":
    main()
