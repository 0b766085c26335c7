"""A gated tool run as an MCP task: the approval is the task's input request, and the task's result carries what
the model is told of it. Both task wires (2025-11-25 core tasks, 2026-07-28 extension), real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from mcp_elicit import Flow, Gate
from mcp_elicit.approvals import APPROVAL_KEY
from mcp_elicit.model import Operator
from mcp_elicit.server import Elicitation, RequestState, TaskPolicy, Timing
from mcp_elicit.server.tasks import TaskSettings
from mcp_elicit.store import open_store
from tests.helpers.http_harness import StaticTokenVerifier, auth_settings, free_port, serving
from tests.helpers.tasks_http import answer, answer_task, until
from tests.helpers.tasks_wire import LEGACY, MODERN, Wire

pytestmark = pytest.mark.anyio


class Served:
    def __init__(self, runtime: Elicitation, url: str) -> None:
        self.runtime, self.url = runtime, url
        self.ran: list[dict[str, Any]] = []


@pytest.fixture
def served(store_url: str) -> Iterator[Served]:
    port = free_port()
    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"g" * 32]),
        public_base_url=f"http://127.0.0.1:{port}",
        timing=Timing(lease=timedelta(seconds=2)),
        tasks=TaskSettings(poll_interval=timedelta(milliseconds=200)),
    )
    server = runtime.server("gated-tasks", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))
    with serving(server.streamable_http_app(), port) as base:
        served = Served(runtime, f"{base}/mcp")

        @runtime.tool(task=TaskPolicy.OPTIONAL, gate=Gate(editable=["replicas"]))
        async def scale(flow: Flow, service: str, replicas: int) -> str:
            served.ran.append({"service": service, "replicas": replicas})
            return f"{service} at {replicas}"

        yield served
    runtime.close()


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_gated_task_asks_for_approval_and_runs_the_edit_once(served: Served, era: str) -> None:
    async with Wire(served.url, era, token="token-alice") as wire:
        task_id = (await wire.call_as_task("scale", {"service": "web", "replicas": 12}))["taskId"]
        waiting = await until(wire, task_id, "input_required")
        if era == MODERN:
            [(key, request)] = waiting["inputRequests"].items()
            assert key == APPROVAL_KEY and request["params"]["message"].startswith("Approve this call?")
        assert served.ran == [], "nothing runs before the approval"
        await answer_task(wire, task_id, APPROVAL_KEY, answer(replicas=4))
        done = await until(wire, task_id, "completed")
        result = done["result"] if era == MODERN else wire.last_result
    assert [block["text"] for block in result["content"]] == [
        "The user changed the arguments before approving (replicas: 12 → 4); the tool ran with the changes.",
        "web at 4",
    ]
    assert served.ran == [{"service": "web", "replicas": 4}]
    [approval] = served.runtime.store.list_decisions(Operator())
    assert approval.key == APPROVAL_KEY and approval.about == 'scale(service="web", replicas=12)'


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_a_rejected_task_fails_with_the_persons_reason(served: Served, era: str) -> None:
    async with Wire(served.url, era, token="token-alice") as wire:
        task_id = (await wire.call_as_task("scale", {"service": "db", "replicas": 40}))["taskId"]
        await until(wire, task_id, "input_required")
        await answer_task(wire, task_id, APPROVAL_KEY, answer(approval_reject=True, approval_note="budget"))
        ended = await until(wire, task_id, "failed", "completed")
    assert served.ran == []
    said = str(ended)
    assert "The user rejected this call; nothing ran." in said and "Note from the user: budget" in said
