"""Overlapping identical calls: SDK clients, each on a connection of its own, calling at once; the overlap servers."""

from __future__ import annotations

import multiprocessing.process
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client._memory import InMemoryTransport
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    RequestParamsMeta,
    TextContent,
)

from mcp_elicit.client.transport import KitTransport
from tests.helpers.commands import FORKS
from tests.helpers.http_harness import free_port
from tests.helpers.server import Options, serve

K = 20
"""Overlapping calls per batch, each on its own connection."""
PATIENT_ROUNDS = 400
"""2026-07-28 rounds an SDK client drives before giving up (its default, 10, is about 2 s of state-only rounds)."""
Params = ElicitRequestFormParams | ElicitRequestURLParams
Callback = ElicitationFnT
Reply = Callable[[int, Params], Awaitable[ElicitResult]]


@asynccontextmanager
async def connect(
    target: str | MCPServer, era: str, callback: Callback | None, *, token: str | None = None
) -> AsyncIterator[Client]:
    """An SDK client on `era`: an HTTP URL or an in-process server. 2025-06-18 is offered through the kit's
    transport wrapper (the SDK always offers its newest handshake version), with form mode only."""
    mode = "2026-07-28" if era == "2026-07-28" else "legacy"
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=60) as http:
        transport: Any
        if isinstance(target, str):
            transport = streamable_http_client(target, http_client=http)
        elif era == "2026-07-28":
            transport = target
        else:
            transport = InMemoryTransport(target)
        if era == "2025-06-18":
            transport = KitTransport(transport, frozenset({"form"}), offer_version="2025-06-18")
        async with Client(
            transport, mode=mode, elicitation_callback=callback, input_required_max_rounds=PATIENT_ROUNDS
        ) as client:
            assert client.protocol_version == era
            yield client


def outcome(result: CallToolResult) -> str:
    first = result.content[0] if result.content else None
    said = first.text if isinstance(first, TextContent) else repr(result.content)
    return f"tool error: {said}" if result.is_error else said


async def call(client: Client, tool: str, arguments: dict[str, Any], meta: RequestParamsMeta | None = None) -> str:
    try:
        return outcome(await client.call_tool(tool, arguments, meta=meta))
    except MCPError as error:
        return f"MCP error {error.code}: {error.message}"


@dataclass
class Desk:
    """The one person behind every connection of a test: what each seat (connection) was asked, in order."""

    reply: Reply
    asked: list[tuple[int, str]] = field(default_factory=list)

    def seat(self, index: int) -> Callback:
        async def ask(context: ClientRequestContext, params: Params) -> ElicitResult | ErrorData:
            self.asked.append((index, params.message))
            return await self.reply(index, params)

        return ask


async def together(
    count: int,
    open_seat: Callable[[int], AbstractAsyncContextManager[Client]],
    *rounds: Callable[[int, Client], Awaitable[str]],
    start: anyio.Event | None = None,
    timeout: float = 45,
) -> list[list[str]]:
    """Connect `count` clients, then (and once `start` is set) make every seat's call at the same moment;
    each further round starts, on the same connections, once every seat is done with the one before."""
    outcomes: list[dict[int, str]] = [{} for _ in rounds]
    gates = [anyio.Event() for _ in range(len(rounds) + 1)]
    arrived = [0] * len(gates)

    async def pass_gate(gate: int) -> None:
        arrived[gate] += 1
        if arrived[gate] == count:
            gates[gate].set()
        await gates[gate].wait()

    async def seat(index: int) -> None:
        async with open_seat(index) as client:
            await pass_gate(0)
            if start is not None:
                await start.wait()
            for number, call_seat in enumerate(rounds):
                outcomes[number][index] = await call_seat(index, client)
                await pass_gate(number + 1)  # stay connected until every call of the round is done

    with anyio.fail_after(timeout):
        async with anyio.create_task_group() as group:
            for index in range(count):
                group.start_soon(seat, index)
    return [[done[index] for index in range(count)] for done in outcomes]


def the_one(results: list[str], prefix: str) -> str:
    """The one result every call got; fails naming how many different ones there were."""
    different = sorted(set(results))
    assert len(different) == 1, f"{len(results)} overlapping calls got {len(different)} different results: {different}"
    assert different[0].startswith(prefix), different[0]
    return different[0]


SERVERS = FORKS
"""Server processes are forked from one interpreter that imported the server once (importing the SDK takes
seconds): each is still a process of its own, on its own port, SIGKILLed like any other."""

LEASE = 10.0
"""Seconds a step claim lasts unrenewed, unless a test says otherwise."""
LONG_POLL = 0.5
"""Seconds a 2026-07-28 round may be held."""


@dataclass
class Process:
    process: multiprocessing.process.BaseProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=10)


def launch(
    store: str,
    workspace: Path,
    *,
    lease: float = LEASE,
    stall: bool = False,
    ponder: float = 0.0,
    reask_after: float | None = None,
    die_after_round: bool = False,
) -> Process:
    """A process of the test server's `overlap` tools over HTTP; with `stall`, its `work` step stalls."""
    port = free_port()
    options = Options(
        store,
        tools=("overlap",),
        port=port,
        workspace=workspace,
        lease=lease,
        long_poll=LONG_POLL,
        reask_after=reask_after,
        stall="work" if stall else None,
        ponder=ponder,
        die_after_round=die_after_round,
    )
    process = SERVERS.Process(target=serve, args=(options,), daemon=True)
    process.start()
    return Process(process, port)


@contextmanager
def running(*processes: Process) -> Iterator[None]:
    """Until every process listens (they start in parallel); every one still alive is killed afterwards."""
    try:
        for launched in processes:
            deadline = time.monotonic() + 30
            while not listening(launched.port):
                if not launched.process.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"the overlap server on {launched.port} did not start")
                time.sleep(0.02)
        yield
    finally:
        for launched in processes:
            if launched.process.is_alive():
                launched.kill()


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
