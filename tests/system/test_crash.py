"""Process death between the answer and the side effect: SIGKILL, restart, retry, one effect."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.store import open_store
from tests.helpers.http_harness import free_port, wait_for_port
from tests.helpers.person import Person, accept
from tests.helpers.results import text
from tests.helpers.server import Workspace

# On both engines: a killed process and its restart, on either store's durability.
pytestmark = [pytest.mark.anyio, pytest.mark.engines("sqlite", "postgres")]
REPO = Path(__file__).resolve().parents[2]


@contextmanager
def server_process(port: int, store: str, workspace: Path, stall: str | None) -> Iterator[subprocess.Popen[bytes]]:
    """The test server's `transfer` tool; a step claim lapses 2 s after the killed holder's last renewal."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers.server",
            "serve",
            "--tools",
            "transfer",
            "--port",
            str(port),
            "--store",
            store,
            "--workspace",
            str(workspace),
            "--lease",
            "2",
            *(["--stall", stall] if stall else []),
        ],
        cwd=REPO,
    )
    try:
        wait_for_port(port, process)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


async def call_transfer(url: str, era: str, person: Person) -> str:
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=era, elicitation_callback=person) as client,
    ):
        return text(await client.call_tool("transfer", {"amount": 125}))


async def kill_when_stalled(process: subprocess.Popen[bytes], workspace: Workspace, point: str) -> None:
    with anyio.fail_after(20):
        while not workspace.stalled(point):
            await anyio.sleep(0.02)
    process.kill()


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("moment", ["before", "after"])
async def test_sigkill_restart_retry_gives_one_effect(store_url: str, tmp_path: Path, era: str, moment: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    person = Person([accept(confirm=True)])
    workspace = Workspace(tmp_path)
    stall = f"{moment}-transfer"
    with server_process(port, store_url, tmp_path, stall) as doomed:
        failed: list[BaseException] = []

        async def doomed_call() -> None:
            try:
                await call_transfer(url, era, person)
            except BaseException as error:  # the server dies mid-call; any transport error will do
                failed.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(doomed_call)
            group.start_soon(kill_when_stalled, doomed, workspace, stall)
        assert doomed.wait(timeout=10) == -9
        assert failed, "the call should not have finished while its server was killed"

    store = open_store(store_url)
    try:
        [decision] = store.list_decisions(Operator())
        assert decision.status is DecisionStatus.ACCEPTED
    finally:
        store.close()

    with server_process(port, store_url, tmp_path, None):
        result = await call_transfer(url, era, person)
    assert result.startswith("transferred 125: receipt-")
    assert len(person.asked) == 1
    ledger = json.loads((tmp_path / "ledger.json").read_text())
    assert list(ledger.values()) == [125]
    assert workspace.runs("transfer") == 2
