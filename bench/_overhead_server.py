"""The server of the call benchmarks: one MCPServer holding each tool body as an mcp-elicit tool and its bare twins.

Two bodies, each on both sides: `step-ask-step` (a step, a one-field form, another step), the call the
performance targets are about, and `ask-only` (one form). The bare SDK side has a twin of each for each era:
`ctx.elicit` on the live call for 2025-11-25, a hand-written `InputRequiredResult` round for 2026-07-28,
its steps plain function calls. `bench.overhead` and `bench.load` run it as a process of its own,
`bench.commits` and `bench.inprocess` in process.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import uvicorn
from mcp.server.elicitation import AcceptedElicitation, render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from pydantic import BaseModel, Field

from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, RequestState
from mcp_elicit.store import open_store
from mcp_elicit.web import Health

KEY = "approve_change"
GO_KEY = "go"
SDK_LEGACY_TOOL = "sdk_elicit"
SDK_ROUNDS_TOOL = "sdk_rounds"
ELICIT_TOOL = "elicit_ask"
SDK_STEPS_LEGACY_TOOL = "sdk_steps"
SDK_STEPS_ROUNDS_TOOL = "sdk_steps_rounds"
STEPS_TOOL = "elicit_steps"
CONTROL_TOOL = "bench_control"
ANSWER: dict[str, str | int | float | bool | list[str] | None] = {"approve": True, "note": "ship it"}


class Approval(BaseModel):
    approve: bool = Field(description="Apply the change")
    note: str = Field(default="", max_length=80, description="A short note for the team")


class Go(BaseModel):
    approve: bool = Field(description="Apply the change")


def message(n: int) -> str:
    return f"Apply change {n}?"


def outcome(n: int, approval: Approval | None) -> str:
    return f"applied {n}: {approval.note}" if approval is not None and approval.approve else f"not applied {n}"


def plan(n: int) -> str:
    return f"change {n}"


def apply(n: int, go: bool) -> str:
    return f"applied {n}" if go else f"not applied {n}"


ANSWERED = Approval.model_validate(ANSWER)
SDK_SCHEMA = render_elicitation_schema(Approval)
"""Rendered once, as an author writing the 2026-07-28 round by hand would (`ctx.elicit` renders per call)."""
GO_SCHEMA = render_elicitation_schema(Go)


@dataclass(frozen=True, slots=True)
class Body:
    """One tool body: its mcp-elicit tool, its bare SDK twins, and what a call of it answers when accepted."""

    name: str
    elicit_tool: str
    sdk_legacy_tool: str
    sdk_rounds_tool: str
    expected: Callable[[int], str]


STEPS = Body("step-ask-step", STEPS_TOOL, SDK_STEPS_LEGACY_TOOL, SDK_STEPS_ROUNDS_TOOL, lambda n: apply(n, True))
ASK_ONLY = Body("ask-only", ELICIT_TOOL, SDK_LEGACY_TOOL, SDK_ROUNDS_TOOL, lambda n: outcome(n, ANSWERED))
COUNTED = STEPS
"""The call the targets are about (issue 21): `step -> ask (form) -> step`, no task."""
BODIES = (STEPS, ASK_ONLY)


def build(store_url: str, port: int) -> tuple[Elicitation, uvicorn.Config]:
    elicitation = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"x" * 32]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
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

    @server.tool(name=SDK_STEPS_LEGACY_TOOL)
    async def sdk_steps(n: int, ctx: Context) -> str:
        """The bare SDK twin of `elicit_steps` on 2025-11-25: plain calls around `ctx.elicit`."""
        planned = plan(n)
        result = await ctx.elicit(f"Apply {planned}?", Go)
        return apply(n, isinstance(result, AcceptedElicitation) and result.data.approve)

    @server.tool(name=SDK_STEPS_ROUNDS_TOOL)
    async def sdk_steps_rounds(n: int, ctx: Context) -> str | InputRequiredResult:
        """The bare SDK twin of `elicit_steps` on 2026-07-28: the first step runs again on the retry, as
        nothing keeps its result."""
        planned = plan(n)
        responses = ctx.input_responses
        if not responses:
            params = ElicitRequestFormParams(message=f"Apply {planned}?", requested_schema=GO_SCHEMA)
            return InputRequiredResult(input_requests={GO_KEY: ElicitRequest(params=params)}, request_state=GO_KEY)
        response = responses.get(GO_KEY)
        if isinstance(response, ElicitResult) and response.action == "accept":
            return apply(n, Go.model_validate(response.content).approve)
        return apply(n, False)

    @elicitation.tool(name=STEPS_TOOL)
    async def elicit_steps(flow: Flow, n: int) -> str:
        """mcp-elicit: a journaled step, a one-field form, another step; the same body on every era."""
        planned = await flow.step("plan", plan, n, returns=str)
        answer = await flow.ask(f"Apply {planned}?", Go, key=GO_KEY)
        return await flow.step("apply", apply, n, isinstance(answer, Accepted) and answer.data.approve, returns=str)

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

    Health(elicitation).add_routes(server)  # `/readyz`, which a balancer in front checks
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
