"""A task round trip against the same decision without a task, on SQLite and PostgreSQL, in the same run.

The task round trip is what a 2026-07-28 client of a long pause does: `tools/call` gets `resultType: "task"`,
`tasks/get` until `input_required`, `tasks/update` with the answer, `tasks/get` until `completed`. The plain
decision is the same tool body on the call itself: `tools/call` gets `input_required`, the retry with the
answer completes. Both go over streamable HTTP on loopback to one server (uvicorn in a thread of this
process) and take turns block by block, so drift and table growth hit them alike. Every call has new
arguments, so each starts a new operation (no replay, no attach).

The client polls `tasks/get` every `--poll` seconds (5 ms by default, far below what a real client would
use, so the figure is the server's cost and not the pacing). Round trips per second are reported for each
side with their ratio, and the `tasks/get` a task round trip took.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import anyio
import httpx2
import uvicorn
from pydantic import BaseModel

from bench._common import add_backend_arguments, pg_schema, select_backends
from bench.overhead import free_port
from mcp_elicit.server import (
    Accepted,
    Elicitation,
    Flow,
    IdentityPolicy,
    RequestState,
    TaskPolicy,
    TaskSettings,
    Timing,
)
from mcp_elicit.store import open_store

MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
ANSWER = {"action": "accept", "content": {"approve": True}}


class Approval(BaseModel):
    approve: bool


def build(store_url: str, port: int) -> Any:
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"b" * 32]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True, development_principal="bench-user"),
        tasks=TaskSettings(poll_interval=timedelta(milliseconds=100)),
        timing=Timing(sweep_interval=None),
    )
    server = runtime.server("bench-tasks")

    @runtime.tool(task=TaskPolicy.OPTIONAL)
    async def approve(flow: Flow, n: int) -> str:
        answer = await flow.ask(f"Approve change {n}?", Approval, key="approve")
        return "approved" if isinstance(answer, Accepted) and answer.data.approve else "refused"

    return runtime, server.streamable_http_app(host="127.0.0.1")


@contextmanager
def serving(store_url: str) -> Iterator[str]:
    port = free_port()
    runtime, app = build(store_url, port)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        runtime.close()


class Wire:
    """The JSON-RPC a 2026-07-28 client sends, with or without the tasks extension declared."""

    def __init__(self, http: httpx2.AsyncClient, url: str, *, tasks: bool) -> None:
        self._http, self._url = http, url
        capabilities: dict[str, Any] = {"elicitation": {"form": {}}}
        if tasks:
            capabilities["extensions"] = {TASKS_EXTENSION: {}}
        self._capabilities = capabilities
        self._ids = itertools.count(1)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": self._capabilities,
        }
        name = params.get("name") if method == "tools/call" else params.get("taskId")
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": method,
            "mcp-name": str(name),
        }
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": {**params, "_meta": meta}}
        response = await self._http.post(self._url, json=body, headers=headers)
        if "event-stream" in response.headers.get("content-type", ""):
            data = [line[5:] for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()]
            reply = json.loads(data[-1])
        else:
            reply = response.json()
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply["result"]
        return result


@dataclass
class Side:
    name: str
    seconds: list[float] = field(default_factory=list)
    polls: list[int] = field(default_factory=list)

    def per_second(self) -> float:
        return len(self.seconds) / sum(self.seconds)


async def task_round_trip(wire: Wire, n: int, poll: float) -> int:
    created = await wire.request("tools/call", {"name": "approve", "arguments": {"n": n}})
    assert created["resultType"] == "task", created
    task_id, polls = created["taskId"], 0
    while True:
        polls += 1
        task = await wire.request("tasks/get", {"taskId": task_id})
        if task["status"] == "input_required":
            await wire.request("tasks/update", {"taskId": task_id, "inputResponses": {"approve": ANSWER}})
        elif task["status"] == "completed":
            assert task["result"]["content"][0]["text"] == "approved", task
            return polls
        elif task["status"] != "working":
            raise RuntimeError(f"task {task_id} ended as {task['status']}")
        await anyio.sleep(poll)


async def plain_round_trip(wire: Wire, n: int) -> None:
    params = {"name": "approve", "arguments": {"n": n}}
    first = await wire.request("tools/call", params)
    assert first["resultType"] == "input_required", first
    retry = {**params, "inputResponses": {"approve": ANSWER}, "requestState": first["requestState"]}
    done = await wire.request("tools/call", retry)
    assert done["content"][0]["text"] == "approved", done


async def contest(url: str, calls: int, rounds: int, poll: float) -> tuple[Side, Side]:
    task_side, plain_side = Side("task"), Side("plain")
    numbers = itertools.count()
    async with httpx2.AsyncClient(timeout=60) as http:
        tasks, plain = Wire(http, url, tasks=True), Wire(http, url, tasks=False)
        for _ in range(3):  # warm-up, both sides
            await task_round_trip(tasks, next(numbers), poll)
            await plain_round_trip(plain, next(numbers))
        for _ in range(rounds):
            for _ in range(calls):
                started = time.perf_counter()
                task_side.polls.append(await task_round_trip(tasks, next(numbers), poll))
                task_side.seconds.append(time.perf_counter() - started)
            for _ in range(calls):
                started = time.perf_counter()
                await plain_round_trip(plain, next(numbers))
                plain_side.seconds.append(time.perf_counter() - started)
    return task_side, plain_side


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_arguments(parser)
    parser.add_argument("--calls", type=int, default=30, help="round trips per side and block (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="blocks per side (default %(default)s)")
    parser.add_argument("--poll", type=float, default=0.005, help="seconds between two tasks/get (default 5 ms)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, force=True)  # the server's per-request lines are not the figure
    backends = select_backends(args.backend, args.pg_url)
    if backends is None:
        return 2
    print(f"{'store':<10} {'task rt/s':>10} {'plain rt/s':>11} {'task/plain':>11} {'tasks/get per task':>19}")
    for backend in backends:
        with _store_url(backend, args.pg_url) as url, serving(url) as endpoint:
            task_side, plain_side = anyio.run(contest, endpoint, args.calls, args.rounds, args.poll)
        ratio = task_side.per_second() / plain_side.per_second()
        print(
            f"{backend:<10} {task_side.per_second():>10.1f} {plain_side.per_second():>11.1f} {ratio:>11.2f}"
            f" {statistics.mean(task_side.polls):>19.1f}"
        )
    return 0


@contextmanager
def _store_url(backend: str, pg_url: str) -> Iterator[str]:
    if backend == "sqlite":
        with TemporaryDirectory(prefix="mcp-elicit-bench-") as directory:
            yield f"sqlite://{Path(directory) / 'bench.db'}"
        return
    with pg_schema(pg_url, "bench_tasks") as url:
        yield url


if __name__ == "__main__":
    raise SystemExit(main())
