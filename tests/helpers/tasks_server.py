"""Tools that run as MCP tasks, for the task tests: in a test's own thread, or as a process to SIGKILL.

`deploy` plans (a journaled step), asks for approval, prepares and applies (journaled steps; the apply
hands its idempotency key to a ledger file, as a real deploy system would take it). With
`TASKS_STALL=prepare` in its environment the process stalls inside `prepare`, so a test can kill it there.
Every step's runs are counted in the workspace, across processes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import anyio
import uvicorn
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

from mcp_elicit.server import (
    Accepted,
    Completed,
    Declined,
    Elicitation,
    Expired,
    Flow,
    IdentityPolicy,
    RequestState,
    Timing,
)
from mcp_elicit.server.tasks import TaskPolicy, TaskSettings, TaskStart
from mcp_elicit.store import open_store


class Approval(BaseModel):
    approve: bool
    note: str = ""


class Window(BaseModel):
    window: str


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def ran(self, step: str) -> None:
        with (self.root / f"ran-{step}").open("a") as log:
            log.write("x\n")

    def runs(self, step: str) -> int:
        path = self.root / f"ran-{step}"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def apply(self, service: str, idempotency_key: str) -> str:
        self.ran("apply")
        entries = self.ledger()
        entries.setdefault(idempotency_key, service)
        (self.root / "ledger.json").write_text(json.dumps(entries))
        return f"release-{idempotency_key[-6:]}"

    def ledger(self) -> dict[str, str]:
        path = self.root / "ledger.json"
        loaded: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        return loaded


def build(runtime: Elicitation, workspace: Workspace) -> None:
    stall = os.environ.get("TASKS_STALL", "")

    def plan(service: str) -> str:
        workspace.ran("plan")
        return f"plan for {service}"

    def prepare() -> str:
        workspace.ran("prepare")
        if stall == "prepare":
            (workspace.root / "stalled").write_text("")
            time.sleep(3600)
        return "prepared"

    @runtime.tool(task=TaskPolicy.OPTIONAL)
    async def deploy(flow: Flow, service: str) -> str:
        """Deploy a service to production once a person approves."""
        planned = await flow.step("plan", plan, service)
        answer = await flow.ask(f"Apply the {planned}?", Approval, key="approve")
        if isinstance(answer, Declined):
            return "declined"
        if isinstance(answer, Expired):
            return "expired"
        if not (isinstance(answer, Accepted) and answer.data.approve):
            return "not deployed"
        await flow.step("prepare", prepare)
        release = await flow.step("apply", workspace.apply, service, flow.idempotency_key("apply"))
        return f"deployed {service} ({release})"

    @runtime.tool(task=TaskPolicy.OPTIONAL)
    async def hurry(flow: Flow) -> str:
        """A question that must be answered within a second."""
        answer = await flow.ask("Quick: approve?", Approval, key="quick", ttl=timedelta(seconds=1))
        return "expired" if isinstance(answer, Expired) else "answered"

    @runtime.tool(task=TaskPolicy.OPTIONAL)
    async def connect(flow: Flow) -> str:
        """Connect an account on the server's own page (URL mode)."""
        outcome = await flow.ask_url("Connect your account", key="connect_account")
        return "connected" if isinstance(outcome, Completed) else type(outcome).__name__.lower()

    @runtime.tool(task=TaskPolicy.OPTIONAL, task_start=TaskStart.FLOW)
    async def change(flow: Flow, service: str) -> str:
        """Which window is asked on the call; the approval, which may take hours, inside the task."""
        window = await flow.ask(f"Which window for {service}?", Window, key="window")
        if not isinstance(window, Accepted):
            return "no window"
        await flow.begin_task()
        approval = await flow.ask(f"Approve {service} in the {window.data.window} window?", Approval, key="approve")
        approved = isinstance(approval, Accepted) and approval.data.approve
        return f"{service} {'changed' if approved else 'left'} in the {window.data.window} window"

    @runtime.tool(task=TaskPolicy.OPTIONAL)
    async def slow(flow: Flow, seconds: float) -> str:
        """Works for a while without asking anything."""
        await anyio.sleep(seconds)
        return f"slept {seconds:g} s"

    @runtime.tool(task=TaskPolicy.REQUIRED)
    async def nightly(flow: Flow) -> str:
        """Runs only as a task."""
        return "nightly done"

    @runtime.tool()
    async def plain(flow: Flow) -> str:
        """Never a task."""
        return "plain done"

    @runtime.tool(task=TaskPolicy.OPTIONAL)
    async def broken(flow: Flow) -> str:
        """Reports a tool error."""
        raise ToolError("the deploy target is gone")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--lease", type=float, default=2.0)
    args = parser.parse_args()
    runtime = Elicitation(
        open_store(args.store),
        request_state=RequestState(keys=[b"t" * 32]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        public_base_url=f"http://127.0.0.1:{args.port}",
        timing=Timing(lease=timedelta(seconds=args.lease)),
        tasks=TaskSettings(poll_interval=timedelta(milliseconds=200)),
    )
    server = runtime.server("tasks-server")
    build(runtime, Workspace(args.workspace))
    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
