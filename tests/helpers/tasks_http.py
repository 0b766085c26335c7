"""The tasks server over real HTTP, in this process or in a process of its own, and how a test drives a task."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

from mcp_elicit.server import Elicitation, RequestState, Timing
from mcp_elicit.server.tasks import TaskSettings
from mcp_elicit.store import open_store
from tests.helpers.commands import FORKS, Forked
from tests.helpers.http_harness import StaticTokenVerifier, auth_settings, free_port, serving, stop, wait_for_port
from tests.helpers.server import Options, Workspace, task_tools
from tests.helpers.server import serve as serve_options
from tests.helpers.tasks_wire import MODERN, Wire


@dataclass
class Served:
    runtime: Elicitation
    url: str
    workspace: Workspace

    def wire(self, era: str, token: str = "token-alice", **options: Any) -> Wire:
        return Wire(self.url, era, token=token, **options)


@contextmanager
def serve(
    store_url: str,
    root: Path,
    settings: TaskSettings | None = None,
    tools: Callable[[Elicitation], None] | None = None,
) -> Iterator[Served]:
    """The runtime served over HTTP with `tools` registered on it (by default the task tools, on a workspace)."""
    port = free_port()
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"t" * 32]),
        public_base_url=f"http://127.0.0.1:{port}",
        timing=Timing(lease=timedelta(seconds=2)),
        tasks=settings or TaskSettings(poll_interval=timedelta(milliseconds=200)),
    )
    server = runtime.server("tasks-http", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))
    workspace = Workspace(root / "workspace")
    if tools is None:
        task_tools(runtime, workspace)
    else:
        tools(runtime)
    with serving(server.streamable_http_app(), port) as base:
        yield Served(runtime, f"{base}/mcp", workspace)
    runtime.close()


async def status_of(wire: Wire, task_id: str) -> dict[str, Any]:
    return await wire.request("tasks/get", {"taskId": task_id})


async def until(wire: Wire, task_id: str, *statuses: str, timeout: float = 20) -> dict[str, Any]:
    """Poll `tasks/get` at the task's own interval until it reaches one of `statuses`."""
    with anyio.fail_after(timeout):
        while True:
            task = await status_of(wire, task_id)
            if task["status"] in statuses:
                return task
            interval = task.get("pollIntervalMs", task.get("pollInterval", 200))
            await anyio.sleep(interval / 1000)


def answer(action: str = "accept", **content: Any) -> dict[str, Any]:
    return {"action": action, "content": content} if action == "accept" else {"action": action}


async def answer_task(wire: Wire, task_id: str, key: str, response: dict[str, Any]) -> list[dict[str, Any]]:
    """Answer the outstanding question `key` the era's way; returns the requests the client was shown."""
    shown: list[dict[str, Any]] = []
    if wire.era == MODERN:
        ack = await wire.request("tasks/update", {"taskId": task_id, "inputResponses": {key: response}})
        assert ack == {"resultType": "complete", "_meta": ack.get("_meta")} or ack.get("resultType") == "complete"
        return shown

    async def on_request(request: dict[str, Any]) -> dict[str, Any]:
        shown.append(request)
        return response

    wire.last_result = await wire.request("tasks/result", {"taskId": task_id}, on_request=on_request)
    return shown


LEASE = 2.0
"""The run lease of an `instance`, in seconds: short, so that another instance takes a killed one's task soon."""


@contextmanager
def instance(store: str, workspace: Path, *, stall: str = "") -> Iterator[tuple[str, Forked]]:
    """The test server's tasks tools over HTTP, forked from the forkserver that imported it once: a process of
    its own that a test SIGKILLs as any (what is under test is the store's recovery, not the process's start)."""
    port = free_port()
    options = Options(
        store,
        tools=("tasks",),
        port=port,
        workspace=workspace,
        lease=LEASE,
        task_poll=0.2,
        public_base_url=f"http://127.0.0.1:{port}",
        stall=stall or None,
    )
    child = FORKS.Process(target=serve_options, args=(options,), name="tasks-server", daemon=True)
    child.start()
    process = Forked(child, ["tests.helpers.server", "serve", "--tools", "tasks", "--port", str(port)])
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        stop(process)
